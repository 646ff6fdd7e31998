"""Training throughput: our pipeline against a plain Hugging Face Trainer that pads every
example to the block size (same model, data, steps and hardware).

    python benchmarks/train_throughput.py                   # CPU, tiny preset: baseline, ours x1, ours x2
    python benchmarks/train_throughput.py --steps 80 --data out/prepared --variants contextual

It runs jobs/train.py (Ray Data tokenization, length-bucketed batches, Ray Train +
DeepSpeed ZeRO-2) with one worker and with two, and the baseline Trainer in this process.
The baseline model is GPT-2 as Hugging Face builds it; ours is the same shape and weights from
rrt.modelling.models, computing the same functions more cheaply: GPT-2's tanh GELU as one fused kernel,
fused AdamW and an LM head padded to 64 rows (their logits -inf).
Speed is useful (non-padding) tokens per second, measured after the first steps so start-up
is not counted. Each variant in --variants (default: contextual and no_context) gets its own
comparison; with --rounds N the baseline and ours take turns N times and the median ratio
counts (a shared machine drifts between runs). The ratio per variant is printed last, after
the most that removing padding could give (1 / (1 - the baseline's padding)). On a GPU,
benchmarks/gpu_speed.py compares the batching schemes and engines with the real model shape.
Each line printed is JSON; the last is the ratio ours / baseline.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import pyarrow.dataset as pads

from rrt.config import load_config
from rrt.modelling.batching import pad_batch, tokenize_table
from rrt.modelling.models import tiny_config, train_tiny_tokenizer
from rrt.training.finetune import parameter_counts
from rrt.training.speed import estimate_mfu, measure_cpu_peak_flops
from testing.timing import example_rows

SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data")
WARMUP_STEPS = 5


def prepared_data(path: str | None) -> str:
    """A prepare_data folder: the one given, or one made from the real recipes in ../shared/data."""
    if path:
        return path
    web, paper = (
        os.path.join(SHARED, "web_recipes", "recipes.jsonl"),
        os.path.join(SHARED, "paper_sample"),
    )
    if not os.path.exists(web):
        raise SystemExit(f"needs --data or the real recipes at {web}")
    out = os.path.join(tempfile.mkdtemp(prefix="rrt-bench-"), "prepared")
    subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "jobs", "prepare_data.py"),
            "--input",
            f"{web},{paper}",
            "--output",
            out,
            "--dish-key",
            "head",
        ],
        check=True,
        capture_output=True,
    )
    return out


def token_rows(data: str, variant: str, vocab_size: int, block: int):
    """The tokenizer the job would train, and every training example as (ids, target start)."""
    files = sorted(
        glob.glob(
            os.path.join(data, "step_pairs", variant, "train", "**", "*.parquet"), recursive=True
        )
    )
    table = pads.dataset(files, format="parquet").to_table(columns=["text"])
    tokenizer = train_tiny_tokenizer(table.column("text").to_pylist(), vocab_size)
    return tokenizer, example_rows(
        tokenize_table(table, tokenizer.backend_tokenizer.to_str(), variant, block)
    )


def stock_model(tokenizer, shape: dict):
    """The tiny shape as plain Hugging Face builds it (no rrt changes, such as the fused GELU)."""
    import torch
    from transformers import GPT2LMHeadModel

    torch.manual_seed(13)
    return GPT2LMHeadModel(tiny_config(len(tokenizer), shape, tokenizer.pad_token_id))


def baseline_trainer(
    tokenizer, rows, shape: dict, micro: int, steps: int, lr: float, block: int
) -> dict:
    """HF Trainer, every example padded to the block: useful tokens per second after warm-up."""
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    real_per_batch: list[int] = []

    def collate(examples):
        """Pad every example to the block, counting the real tokens of each batch."""
        batch = pad_batch(
            [(e["ids"], e["start"]) for e in examples],
            tokenizer.pad_token_id,
            "all",
            multiple=block,
        )
        real_per_batch.append(batch.real_tokens)
        return {
            k: torch.from_numpy(getattr(batch, k))
            for k in ("input_ids", "attention_mask", "labels")
        }

    class Clock(TrainerCallback):
        """The time at the end of every optimizer step."""

        def __init__(self):
            self.times: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            """Record the step's end."""
            self.times.append(time.perf_counter())

    model = stock_model(tokenizer, shape)
    clock = Clock()
    with tempfile.TemporaryDirectory() as scratch:
        args = TrainingArguments(
            output_dir=scratch,
            per_device_train_batch_size=micro,
            max_steps=steps,
            learning_rate=lr,
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            use_cpu=True,
            dataloader_num_workers=0,
            remove_unused_columns=False,
            dataloader_drop_last=True,
            seed=13,
        )
        Trainer(
            model=model,
            args=args,
            train_dataset=[{"ids": i, "start": s} for i, s in rows],
            data_collator=collate,
            callbacks=[clock],
        ).train()
    timed = clock.times[WARMUP_STEPS - 1 :]
    useful = sum(real_per_batch[WARMUP_STEPS : WARMUP_STEPS + len(timed) - 1])
    seconds = timed[-1] - timed[0]
    padded = micro * block * (len(timed) - 1)
    return {
        "tokens_per_s": useful / seconds,
        "padding_fraction": 1 - useful / padded,
        "parameters": parameter_counts(model)["trainable_parameters"],
    }


def ours(data: str, variant: str, workers: int, steps: int, config_path: str) -> dict:
    """jobs/train.py with N Ray Train workers; its own train_stats.json."""
    out = os.path.join(tempfile.mkdtemp(prefix="rrt-bench-train-"), "run")
    env = {**os.environ, "RAY_DATA_DISABLE_PROGRESS_BARS": "1"}
    done = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "jobs", "train.py"),
            "--variant",
            variant,
            "--data",
            data,
            "--output",
            out,
            "--num-workers",
            str(workers),
            "--max-steps",
            str(steps),
            "--config",
            config_path,
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode != 0:
        raise SystemExit(f"jobs/train.py failed:\n{done.stderr[-3000:]}")
    with open(os.path.join(out, "train_stats.json"), encoding="utf-8") as handle:
        return json.load(handle)


def bench_config(shape: dict, steps: int) -> str:
    """ray_config.yaml with the tiny model trained in full, as the baseline is, and evaluation
    and checkpoints pushed out of the timed steps."""
    import yaml

    config = load_config(os.path.join(ROOT, "ray_config.yaml"), "local")
    config["train"].update(
        {
            "model": "tiny",
            "finetune": "full",
            "tiny": shape,
            "eval_examples": 32,
            "eval_interval": 10**6,
            "checkpoint_interval": 10**6,
            "log_interval": max(1, steps // 8),
        }
    )
    config.pop("profile", None)
    path = os.path.join(tempfile.mkdtemp(prefix="rrt-bench-cfg-"), "config.yaml")
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump(config, handle)
    return path


def bench_variant(
    data: str, variant: str, config: dict, micro: int, steps: int, peak: float, rounds: int
) -> dict:
    """Baseline and ours with one worker in turn, `rounds` times, then ours with two workers;
    the ratio is the median of each round's (ours / the baseline run just before it)."""
    block = int(config["block_size"][variant])
    shape = dict(config["tiny"])
    tokenizer, rows = token_rows(data, variant, int(shape.get("vocab_size", 8000)), block)
    config_path = bench_config(shape, steps)

    def run_ours(workers: int) -> dict:
        """One run of jobs/train.py, printed as a JSON line."""
        stats = ours(data, variant, workers, steps, config_path)
        print(
            json.dumps(
                {
                    "run": "ours",
                    "variant": variant,
                    "workers": workers,
                    "useful_tokens_per_s": stats["tokens_per_s"],
                    "padding_fraction": stats["padding_fraction"],
                    "mfu": round(estimate_mfu(stats["parameters"], stats["tokens_per_s"], peak), 4),
                    "data_wait_fraction": stats.get("data_wait_fraction"),
                    "wall_s": stats["wall_s"],
                }
            ),
            flush=True,
        )
        return stats

    ratios, singles = [], []
    for _ in range(rounds):
        baseline = baseline_trainer(
            tokenizer, rows, shape, micro, steps, float(config["deepspeed"]["lr"]), block
        )
        print(
            json.dumps(
                {
                    "run": "hf_trainer_padded",
                    "variant": variant,
                    "block": block,
                    "workers": 1,
                    "useful_tokens_per_s": round(baseline["tokens_per_s"], 1),
                    "padding_fraction": round(baseline["padding_fraction"], 3),
                    "mfu": round(
                        estimate_mfu(baseline["parameters"], baseline["tokens_per_s"], peak), 4
                    ),
                }
            ),
            flush=True,
        )
        singles.append(run_ours(1))
        ratios.append(singles[-1]["tokens_per_s"] / baseline["tokens_per_s"])
    pair = run_ours(2)
    single = statistics.median(s["tokens_per_s"] for s in singles)
    # Padding is all the baseline wastes, so removing it can gain at most 1 / (1 - its padding).
    return {
        "ratio": statistics.median(ratios),
        "ratios": ratios,
        "ceiling": 1 / (1 - baseline["padding_fraction"]),
        "scaling": pair["tokens_per_s"] / single,
        "padding": singles[-1]["padding_fraction"],
    }


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's flags."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data", help="a prepare_data output folder (default: build one from ../shared/data)"
    )
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps per run")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="baseline and ours x1 run in turn this many times; the median ratio counts",
    )
    parser.add_argument(
        "--variants",
        default="contextual,no_context",
        help="comma list of model variants whose step pairs train, one comparison each",
    )
    parser.add_argument("--micro-batch", type=int, default=8, help="examples per batch")
    return parser


def print_ratios(results: dict, rounds: int) -> None:
    """Scaling and padding, the ceiling from padding alone, each round's ratio, then the ratios."""
    print(
        json.dumps(
            {
                "scaling_2_workers_over_1": {v: round(r["scaling"], 2) for v, r in results.items()},
                "padding_fraction_ours": {v: r["padding"] for v, r in results.items()},
                "target_padding_fraction_max": 0.10,
            }
        )
    )
    print(
        json.dumps(
            {"ceiling_from_padding_alone": {v: round(r["ceiling"], 2) for v, r in results.items()}}
        )
    )
    if rounds > 1:
        per_round = {v: [round(x, 2) for x in r["ratios"]] for v, r in results.items()}
        print(json.dumps({"ratio_per_round": per_round}))
    ratios = {v: round(r["ratio"], 2) for v, r in results.items()}
    print(json.dumps({"ratio_ours_1_worker_over_baseline": ratios, "target_ratio_min": 1.3}))


def main() -> None:
    """Run the baseline and ours on the same data and steps per variant; print each, then the ratios last."""
    args = build_parser().parse_args()
    config = load_config(os.path.join(ROOT, "ray_config.yaml"), "local")["train"]
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in config["block_size"]]
    if unknown:
        raise SystemExit(f"unknown variant(s): {', '.join(unknown)}")
    data = prepared_data(args.data)
    peak = measure_cpu_peak_flops(os.cpu_count() or 1)
    results = {
        v: bench_variant(data, v, config, args.micro_batch, args.steps, peak, args.rounds)
        for v in variants
    }
    print_ratios(results, args.rounds)


if __name__ == "__main__":
    main()

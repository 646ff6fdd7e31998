"""Training throughput: our pipeline against a plain Hugging Face Trainer that pads every
example to the block size (same model, data, steps and hardware).

    python benchmarks/train_throughput.py                   # CPU, tiny preset: baseline, ours x1, ours x2
    python benchmarks/train_throughput.py --steps 80 --data out/prepared --variants contextual
    python benchmarks/train_throughput.py --gpu-model gpt2-medium --data out/prepared   # on one GPU

CPU mode runs jobs/train.py (Ray Data tokenization, length-bucketed batches, Ray Train +
DeepSpeed ZeRO-2) with one worker and with two, and the baseline Trainer in this process.
The baseline model is GPT-2 as Hugging Face builds it; ours is the same shape and weights from
rrt.modelling.models, computing the same functions more cheaply: GPT-2's tanh GELU as one fused kernel,
fused AdamW and an LM head padded to 64 rows (their logits -inf).
Speed is useful (non-padding) tokens per second, measured after the first steps so start-up
is not counted. Each variant in --variants (default: contextual and no_context) gets its own
comparison; with --rounds N the baseline and ours take turns N times and the median ratio
counts (a shared machine drifts between runs). The ratio per variant is printed last, after
the most that removing padding could give (1 / (1 - the baseline's padding)). GPU mode
compares the two batching schemes on one GPU in one process with the real model shape
(random weights: nothing is downloaded), reports MFU and profiles one step of each
micro-batch. Each line printed is JSON; the last is the ratio ours / baseline.
"""

from __future__ import annotations

import argparse
import copy
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
from rrt.modelling.models import (
    fused_gelu,
    pad_vocabulary,
    special_tokens,
    tiny_config,
    train_tiny_tokenizer,
)
from rrt.training.finetune import parameter_counts
from rrt.training.speed import estimate_mfu, gpu_peak_flops, measure_cpu_peak_flops
from testing.timing import autocast_step, example_rows, scheme_batches, sync

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


# GPT-2's own vocabulary; the real run adds our special tokens to it (rrt.modelling.models.load_tokenizer).
GPT2_VOCAB = 50257


def model_shape(model_name: str) -> tuple[dict, int | None]:
    """Layer shape and vocabulary of a model: known shapes need no download; a local path is read."""
    from transformers import AutoConfig

    shapes = {
        "gpt2-medium": {"n_layer": 24, "n_head": 16, "n_embd": 1024},
        "gpt2": {"n_layer": 12, "n_head": 12, "n_embd": 768},
    }
    if model_name in shapes:
        return shapes[model_name], GPT2_VOCAB + len(special_tokens())
    config = AutoConfig.from_pretrained(model_name)
    return {k: getattr(config, k) for k in ("n_layer", "n_head", "n_embd")}, None


def batch_inputs(batch, device) -> dict:
    """A batch's model inputs as tensors on `device`."""
    import torch

    return {
        k: torch.from_numpy(getattr(batch, k)).to(device, non_blocking=True)
        for k in ("input_ids", "attention_mask", "labels")
    }


def time_steps(step, batches: list, steps: int, device) -> float:
    """Useful tokens per second of `steps` calls of `step(inputs)`, after warm-up steps."""
    useful, started = 0, None
    for index in range(steps + WARMUP_STEPS):
        batch = batches[index % len(batches)]
        step(batch_inputs(batch, device))
        if index == WARMUP_STEPS - 1:
            sync(device)
            started = time.perf_counter()
        elif index >= WARMUP_STEPS:
            useful += batch.real_tokens
    sync(device)
    return useful / (time.perf_counter() - started)


def engine_step(model, device, ds: dict, total_steps: int):
    """Our training step: the engine jobs/train_worker.py builds (DeepSpeed, bf16 weights on a GPU
    that has bf16), one process, no Ray; no key/value cache, as the workers run it."""
    import deepspeed
    import torch

    from jobs.train_worker import build_engine
    from rrt.config import DeepSpeedSettings
    from rrt.training.optim import resolve_precision

    for key, value in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29531",
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
    }.items():
        os.environ.setdefault(key, value)
    cuda = device.type == "cuda"
    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo")
    precision = resolve_precision("auto", cuda, cuda and torch.cuda.is_bf16_supported())
    engine, _ = build_engine(model, DeepSpeedSettings(**ds), precision, total_steps, device)

    def step(inputs: dict) -> None:
        """Forward, backward and update through the engine."""
        loss = engine(**inputs, use_cache=False).loss
        engine.backward(loss)
        engine.step()

    return step


def profile_step(model, batch, device) -> dict:
    """Host and device time of one forward and backward: far more host than kernel time means
    the GPU waits on Python and kernel launches, so larger batches (or compilation) pay off."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    inputs = batch_inputs(batch, device)
    sync(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        started = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = model(**inputs).loss
        loss.backward()
        host = time.perf_counter() - started
        sync(device)
        wall = time.perf_counter() - started
    kernels = [e for e in prof.key_averages() if e.device_type == DeviceType.CUDA]
    top = sorted(kernels, key=lambda e: e.self_device_time_total, reverse=True)[:6]
    model.zero_grad(set_to_none=True)
    return {
        "step_wall_s": round(wall, 4),
        "host_launch_s": round(host, 4),
        "gpu_kernel_s": round(sum(e.self_device_time_total for e in kernels) / 1e6, 4),
        "kernel_launches": sum(e.count for e in kernels),
        "top_kernels_ms": [(e.key[:60], round(e.self_device_time_total / 1e3, 2)) for e in top],
    }


def gpu_compare(
    model_name: str,
    tokenizer,
    rows,
    variant: str,
    micros: list[int],
    steps: int,
    block: int,
    multiples: list[int],
    device_type: str = "cuda",
    engine_ds: dict | None = None,
    zero_stages: list[int] | None = None,
    pad_vocab_to: int = 64,
) -> list[dict]:
    """One GPU, one process: padded-to-block batches against our bucketed batches (one run per
    width rounding), bf16 autocast, per micro-batch, with a profile of the padded step; with
    `engine_ds`, also our whole step (the DeepSpeed engine, fused GELU) on our batches, once per
    ZeRO stage in `zero_stages` (default: the block's own)."""
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config

    shape, vocab = model_shape(model_name)
    device = torch.device(device_type)
    cuda = device.type == "cuda"
    name = torch.cuda.get_device_name() if cuda else "cpu"
    peak = gpu_peak_flops(name) or 0.0
    config = GPT2Config(
        vocab_size=vocab or len(tokenizer),
        n_positions=1024,
        **shape,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    schemes = [("padded", block)] + [("bucketed", m) for m in multiples]
    stages = zero_stages or ([int(engine_ds.get("zero_stage", 2))] if engine_ds else [])
    schemes += [(f"engine_z{stage}", multiples[0]) for stage in stages]
    zero_stage = {
        f"engine_z{stage}": stage for stage in stages
    }  # the engine runs' ZeRO stage, by scheme
    lines = []
    for micro in micros:
        speeds = {}
        for scheme, multiple in schemes:
            batches = scheme_batches(
                "padded" if scheme == "padded" else "bucketed",
                rows,
                micro,
                block,
                tokenizer.pad_token_id,
                multiple,
            )
            torch.manual_seed(0)
            with device:  # initialised where it trains: 355M parameters take seconds on the host
                model = AutoModelForCausalLM.from_config(
                    fused_gelu(copy.deepcopy(config)) if scheme in zero_stage else config
                )
            model.train()
            parameters = parameter_counts(model)["trainable_parameters"]
            if scheme in zero_stage:
                pad_vocabulary(model, pad_vocab_to)  # and the LM head padded to tensor-core tiles
                block_ds = {**engine_ds, "micro_batch": micro, "zero_stage": zero_stage[scheme]}
                step = engine_step(model, device, block_ds, steps + WARMUP_STEPS)
            else:
                step = autocast_step(model, device)
            speed = speeds[(scheme, multiple)] = time_steps(step, batches, steps, device)
            padding = 1 - sum(b.real_tokens for b in batches) / sum(b.total_tokens for b in batches)
            line = {
                "run": f"gpu_{scheme}",
                "variant": variant,
                "device": name,
                "model": model_name,
                "parameters": parameters,
                "micro_batch": micro,
                "block": block,
                "pad_multiple": multiple,
                "shapes": len({b.input_ids.shape for b in batches}),
                "useful_tokens_per_s": round(speed),
                "padding_fraction": round(padding, 3),
                "mfu": round(estimate_mfu(parameters, speed, peak), 4),
                "peak_memory_gb": round(torch.cuda.max_memory_allocated() / 2**30, 1)
                if cuda
                else None,
            }
            if scheme == "padded":
                line["profile"] = profile_step(model, batches[0], device)
            if scheme in zero_stage:
                line["zero_stage"] = zero_stage[scheme]
            print(json.dumps(line), flush=True)
            lines.append(line)
            del model, step
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
        padded = speeds[("padded", block)]
        ratio = {
            "variant": variant,
            "micro_batch": micro,
            "gpu_ratio_bucketed_over_padded": {
                f"pad_multiple_{m}": round(speeds[("bucketed", m)] / padded, 2) for m in multiples
            },
        }
        for stage in stages:
            ratio[f"gpu_ratio_our_engine_zero{stage}_over_padded"] = round(
                speeds[(f"engine_z{stage}", multiples[0])] / padded, 2
            )
        print(json.dumps(ratio), flush=True)
        lines.append(ratio)
    return lines


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


def main() -> None:
    """Run the baseline and ours on the same data and steps per variant; print each, then the ratios last."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data", help="a prepare_data output folder (default: build one from ../shared/data)"
    )
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps per run")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="CPU mode: baseline and ours x1 run in turn this many times; the median ratio counts",
    )
    parser.add_argument(
        "--variants",
        default="contextual,no_context",
        help="comma list of model variants whose step pairs train, one comparison each",
    )
    parser.add_argument("--gpu-model", help="GPU mode: model shape to time, e.g. gpt2-medium")
    parser.add_argument(
        "--micro-batch",
        default="8",
        help="examples per batch (GPU mode: a comma list, one run each)",
    )
    parser.add_argument(
        "--device", default="cuda", help="GPU mode: torch device type (cpu only to try the script)"
    )
    parser.add_argument(
        "--engine",
        metavar="PROFILE",
        help="GPU mode: also time our whole step (DeepSpeed engine from this profile's "
        "train.deepspeed block, bf16 where supported) on our batches",
    )
    parser.add_argument(
        "--zero-stages",
        help="GPU mode with --engine: comma list of ZeRO stages to time the "
        "engine at, one run each (default: the profile's)",
    )
    parser.add_argument(
        "--results", help="GPU mode: also write every printed line to this JSON-lines file"
    )
    parser.add_argument(
        "--pad-multiple",
        default="8",
        help="GPU mode: comma list; our batches' widths are rounded up to each in turn",
    )
    args = parser.parse_args()
    config = load_config(os.path.join(ROOT, "ray_config.yaml"), "local")["train"]
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in config["block_size"]]
    if unknown:
        raise SystemExit(f"unknown variant(s): {', '.join(unknown)}")
    data = prepared_data(args.data)
    if args.gpu_model:
        micros = [int(m) for m in str(args.micro_batch).split(",")]
        multiples = [int(m) for m in str(args.pad_multiple).split(",")]
        engine_ds = None
        if args.engine:
            engine_ds = {
                **load_config(os.path.join(ROOT, "ray_config.yaml"), args.engine)["train"][
                    "deepspeed"
                ],
                "precision": "auto",
            }
        stages = [int(z) for z in args.zero_stages.split(",")] if args.zero_stages else None
        lines = []
        for variant in variants:
            block = int(config["block_size"][variant])
            tokenizer, rows = token_rows(data, variant, config["tiny"]["vocab_size"], block)
            lines += gpu_compare(
                args.gpu_model,
                tokenizer,
                rows,
                variant,
                micros,
                args.steps,
                block,
                multiples,
                args.device,
                engine_ds,
                stages,
                int(config.get("pad_vocab_to", 64)),
            )
        if args.results:
            with open(args.results, "w", encoding="utf-8") as handle:
                handle.writelines(json.dumps(line) + "\n" for line in lines)
        return
    peak = measure_cpu_peak_flops(os.cpu_count() or 1)
    results = {
        v: bench_variant(data, v, config, int(args.micro_batch), args.steps, peak, args.rounds)
        for v in variants
    }
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
    if args.rounds > 1:
        print(
            json.dumps(
                {
                    "ratio_per_round": {
                        v: [round(x, 2) for x in r["ratios"]] for v, r in results.items()
                    }
                }
            )
        )
    print(
        json.dumps(
            {
                "ratio_ours_1_worker_over_baseline": {
                    v: round(r["ratio"], 2) for v, r in results.items()
                },
                "target_ratio_min": 1.3,
            }
        )
    )


if __name__ == "__main__":
    main()

"""Training throughput: our pipeline against a plain Hugging Face Trainer that pads every
example to the block size (same model, data, steps and hardware).

    python benchmarks/train_throughput.py                   # CPU, tiny preset: baseline, ours x1, ours x2
    python benchmarks/train_throughput.py --steps 80 --data out/prepared --variants contextual
    python benchmarks/train_throughput.py --gpu-model gpt2-medium --data out/prepared   # on one GPU

CPU mode runs jobs/train.py (Ray Data tokenization, length-bucketed batches, Ray Train +
DeepSpeed ZeRO-2) with one worker and with two, and the baseline Trainer in this process.
Speed is useful (non-padding) tokens per second, measured after the first steps so start-up
is not counted. Each variant in --variants (default: contextual and no_context) gets its own
comparison; the ratio per variant is printed last, after the most that removing padding
could give (1 / (1 - the baseline's padding)). GPU mode compares the two batching schemes
on one GPU in one process with the real model shape (random weights: nothing is
downloaded) and reports MFU. Each line printed is JSON; the last is the ratio ours / baseline.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import random
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import pyarrow.dataset as pads  # noqa: E402

from rrt.batching import bucket_batches, pad_batch, tokenize_table  # noqa: E402
from rrt.config import load_config  # noqa: E402
from rrt.models import build_model, count_parameters, train_tiny_tokenizer  # noqa: E402
from rrt.speed import estimate_mfu, gpu_peak_flops, measure_cpu_peak_flops  # noqa: E402

SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data")
WARMUP_STEPS = 5


def prepared_data(path: str | None) -> str:
    """A prepare_data folder: the one given, or one made from the real recipes in ../shared/data."""
    if path:
        return path
    web, paper = os.path.join(SHARED, "web_recipes", "recipes.jsonl"), os.path.join(SHARED, "paper_sample")
    if not os.path.exists(web):
        raise SystemExit(f"needs --data or the real recipes at {web}")
    out = os.path.join(tempfile.mkdtemp(prefix="rrt-bench-"), "prepared")
    subprocess.run([sys.executable, os.path.join(ROOT, "jobs", "prepare_data.py"), "--input", f"{web},{paper}",
                    "--output", out, "--dish-key", "head"], check=True, capture_output=True)
    return out


def token_rows(data: str, variant: str, vocab_size: int, block: int):
    """The tokenizer the job would train, and every training example as (ids, target start)."""
    files = sorted(glob.glob(os.path.join(data, "step_pairs", variant, "train", "**", "*.parquet"), recursive=True))
    table = pads.dataset(files, format="parquet").to_table(columns=["text"])
    tokenizer = train_tiny_tokenizer(table.column("text").to_pylist(), vocab_size)
    tokens = tokenize_table(table, tokenizer.backend_tokenizer.to_str(), variant, block)
    rows = [(np.asarray(ids), start) for ids, start, length in zip(tokens.column("input_ids").to_pylist(),
                                                                   tokens.column("target_start").to_pylist(),
                                                                   tokens.column("length").to_pylist()) if length]
    return tokenizer, rows


def baseline_trainer(tokenizer, rows, shape: dict, micro: int, steps: int, lr: float, block: int) -> dict:
    """HF Trainer, every example padded to the block: useful tokens per second after warm-up."""
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    real_per_batch: list[int] = []

    def collate(examples):
        """Pad every example to the block, counting the real tokens of each batch."""
        batch = pad_batch([(e["ids"], e["start"]) for e in examples], tokenizer.pad_token_id, "all", multiple=block)
        real_per_batch.append(batch.real_tokens)
        return {k: torch.from_numpy(getattr(batch, k)) for k in ("input_ids", "attention_mask", "labels")}

    class Clock(TrainerCallback):
        """The time at the end of every optimizer step."""

        def __init__(self):
            self.times: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            """Record the step's end."""
            self.times.append(time.perf_counter())

    model = build_model("tiny", len(tokenizer), shape, seed=13, pad_token_id=tokenizer.pad_token_id)
    clock = Clock()
    with tempfile.TemporaryDirectory() as scratch:
        args = TrainingArguments(output_dir=scratch, per_device_train_batch_size=micro, max_steps=steps,
                                 learning_rate=lr, report_to=[], save_strategy="no", logging_strategy="no",
                                 use_cpu=True, dataloader_num_workers=0, remove_unused_columns=False,
                                 dataloader_drop_last=True, seed=13)
        Trainer(model=model, args=args, train_dataset=[{"ids": i, "start": s} for i, s in rows],
                data_collator=collate, callbacks=[clock]).train()
    timed = clock.times[WARMUP_STEPS - 1:]
    useful = sum(real_per_batch[WARMUP_STEPS:WARMUP_STEPS + len(timed) - 1])
    seconds = timed[-1] - timed[0]
    padded = micro * block * (len(timed) - 1)
    return {"tokens_per_s": useful / seconds, "padding_fraction": 1 - useful / padded,
            "parameters": count_parameters(model)}


def ours(data: str, variant: str, workers: int, steps: int, config_path: str) -> dict:
    """jobs/train.py with N Ray Train workers; its own train_stats.json."""
    out = os.path.join(tempfile.mkdtemp(prefix="rrt-bench-train-"), "run")
    env = {**os.environ, "RAY_DATA_DISABLE_PROGRESS_BARS": "1"}
    done = subprocess.run([sys.executable, os.path.join(ROOT, "jobs", "train.py"), "--variant", variant,
                           "--data", data, "--output", out, "--num-workers", str(workers),
                           "--max-steps", str(steps), "--config", config_path],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"jobs/train.py failed:\n{done.stderr[-3000:]}")
    with open(os.path.join(out, "train_stats.json"), encoding="utf-8") as handle:
        return json.load(handle)


def bench_config(shape: dict, steps: int) -> str:
    """ray_config.yaml with evaluation and checkpoints pushed out of the timed steps."""
    import yaml

    config = load_config(os.path.join(ROOT, "ray_config.yaml"), "local")
    config["train"].update({"tiny": shape, "eval_examples": 32, "eval_interval": 10 ** 6,
                            "checkpoint_interval": 10 ** 6, "log_interval": max(1, steps // 8)})
    config.pop("profile", None)
    path = os.path.join(tempfile.mkdtemp(prefix="rrt-bench-cfg-"), "config.yaml")
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump(config, handle)
    return path


def gpu_compare(model_name: str, tokenizer, rows, micro: int, steps: int, block: int, multiple: int) -> None:
    """One GPU, one process: padded-to-block batches against our bucketed batches, bf16."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GPT2Config

    # Known shapes need no download; a local path is read for its shape.
    shapes = {"gpt2-medium": {"n_layer": 24, "n_head": 16, "n_embd": 1024},
              "gpt2": {"n_layer": 12, "n_head": 12, "n_embd": 768}}
    shape = shapes.get(model_name) or {k: getattr(AutoConfig.from_pretrained(model_name), k)
                                       for k in ("n_layer", "n_head", "n_embd")}
    device = torch.device("cuda")
    name = torch.cuda.get_device_name()
    peak = gpu_peak_flops(name) or 0.0
    results = {}
    for scheme in ("padded", "bucketed"):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(GPT2Config(vocab_size=len(tokenizer), n_positions=1024, **shape))
        model.to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        rng = random.Random(0)
        order = list(rows)
        rng.shuffle(order)
        if scheme == "padded":
            batches = [pad_batch(order[i:i + micro], tokenizer.pad_token_id, "all", multiple=block)
                       for i in range(0, len(order) - micro + 1, micro)]
        else:
            batches = []
            for i in range(0, len(order), micro * 32):
                batches.extend(bucket_batches(order[i:i + micro * 32], micro, tokenizer.pad_token_id, "all", rng,
                                              token_budget=micro * block, multiple=multiple))
        useful, started = 0, None
        for step in range(steps):
            batch = batches[step % len(batches)]
            inputs = {k: torch.from_numpy(getattr(batch, k)).to(device, non_blocking=True)
                      for k in ("input_ids", "attention_mask", "labels")}
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(**inputs).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if step == WARMUP_STEPS - 1:
                torch.cuda.synchronize()
                started = time.perf_counter()
            elif step >= WARMUP_STEPS:
                useful += batch.real_tokens
        torch.cuda.synchronize()
        speed = useful / (time.perf_counter() - started)
        parameters = count_parameters(model)
        results[scheme] = speed
        padding = 1 - sum(b.real_tokens for b in batches) / sum(b.total_tokens for b in batches)
        print(json.dumps({"run": f"gpu_{scheme}", "device": name, "model": model_name, "parameters": parameters,
                          "micro_batch": micro, "block": block, "pad_multiple": multiple,
                          "useful_tokens_per_s": round(speed),
                          "padding_fraction": round(padding, 3),
                          "mfu": round(estimate_mfu(parameters, speed, peak), 4)}), flush=True)
        del model, optimizer
        torch.cuda.empty_cache()
    print(json.dumps({"gpu_ratio_bucketed_over_padded": round(results["bucketed"] / results["padded"], 2)}))


def bench_variant(data: str, variant: str, config: dict, micro: int, steps: int, peak: float) -> dict:
    """The baseline, then ours with one worker and with two, on one variant's step pairs."""
    block = int(config["block_size"][variant])
    shape = dict(config["tiny"])
    tokenizer, rows = token_rows(data, variant, int(shape.get("vocab_size", 8000)), block)
    baseline = baseline_trainer(tokenizer, rows, shape, micro, steps, float(config["deepspeed"]["lr"]), block)
    print(json.dumps({"run": "hf_trainer_padded", "variant": variant, "block": block, "workers": 1,
                      "useful_tokens_per_s": round(baseline["tokens_per_s"], 1),
                      "padding_fraction": round(baseline["padding_fraction"], 3),
                      "mfu": round(estimate_mfu(baseline["parameters"], baseline["tokens_per_s"], peak), 4)}), flush=True)
    config_path = bench_config(shape, steps)
    runs = {}
    for workers in (1, 2):
        stats = ours(data, variant, workers, steps, config_path)
        runs[workers] = stats
        print(json.dumps({"run": "ours", "variant": variant, "workers": workers,
                          "useful_tokens_per_s": stats["tokens_per_s"], "padding_fraction": stats["padding_fraction"],
                          "mfu": round(estimate_mfu(stats["parameters"], stats["tokens_per_s"], peak), 4),
                          "wall_s": stats["wall_s"]}), flush=True)
    # Padding is all the baseline wastes, so removing it can gain at most 1 / (1 - its padding).
    return {"ratio": runs[1]["tokens_per_s"] / baseline["tokens_per_s"],
            "ceiling": 1 / (1 - baseline["padding_fraction"]),
            "scaling": runs[2]["tokens_per_s"] / runs[1]["tokens_per_s"],
            "padding": runs[1]["padding_fraction"]}


def main() -> None:
    """Run the baseline and ours on the same data and steps per variant; print each, then the ratios last."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a prepare_data output folder (default: build one from ../shared/data)")
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps per run")
    parser.add_argument("--variants", default="contextual,no_context",
                        help="comma list of model variants whose step pairs train, one comparison each")
    parser.add_argument("--gpu-model", help="GPU mode: model shape to time, e.g. gpt2-medium")
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--pad-multiple", type=int, default=8, help="GPU mode: round batch widths up to this")
    args = parser.parse_args()
    config = load_config(os.path.join(ROOT, "ray_config.yaml"), "local")["train"]
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in config["block_size"]]
    if unknown:
        raise SystemExit(f"unknown variant(s): {', '.join(unknown)}")
    data = prepared_data(args.data)
    if args.gpu_model:
        block = int(config["block_size"][variants[0]])
        tokenizer, rows = token_rows(data, variants[0], int(config["tiny"].get("vocab_size", 8000)), block)
        return gpu_compare(args.gpu_model, tokenizer, rows, args.micro_batch, args.steps, block, args.pad_multiple)
    peak = measure_cpu_peak_flops(os.cpu_count() or 1)
    results = {v: bench_variant(data, v, config, args.micro_batch, args.steps, peak) for v in variants}
    print(json.dumps({"scaling_2_workers_over_1": {v: round(r["scaling"], 2) for v, r in results.items()},
                      "padding_fraction_ours": {v: r["padding"] for v, r in results.items()},
                      "target_padding_fraction_max": 0.10}))
    print(json.dumps({"ceiling_from_padding_alone": {v: round(r["ceiling"], 2) for v, r in results.items()}}))
    print(json.dumps({"ratio_ours_1_worker_over_baseline": {v: round(r["ratio"], 2) for v, r in results.items()},
                      "target_ratio_min": 1.3}))


if __name__ == "__main__":
    main()

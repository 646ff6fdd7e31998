"""Which weights to train from a pretrained model: every weight, the top blocks, or LoRA adapters.

    python benchmarks/finetune_methods.py --data out/quality/prepared
    python benchmarks/finetune_methods.py --data D --steps 30 --methods freeze,lora --trainable-layers 6,12

One process, no Ray: each method fine-tunes the same pretrained model (`smollm2-135m` unless
--model) on the same Contextual + rule prompt rows of a prepared folder, in the same order, with
the optimizer grouping and learning rate of the training job, then scores the same dev rows.
Prints per method: seconds per step, trainable parameters, process peak memory, and the dev
loss on the rewrite's tokens before and after; the last line is the ratio of the dev-loss
drops, the default method's (`train.finetune`) over the best other.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from rrt.config import load_settings
from rrt.modelling.batching import IGNORED, pad_batch, tokenize_table
from rrt.modelling.models import build_model, load_tokenizer, pad_vocabulary
from rrt.training import finetune


def rows(data: str, split: str, tokenizer, block: int, count: int, seed: int) -> list:
    """`count` (token ids, target start) rows of a split, in a seeded random order."""
    import random

    import pyarrow.dataset as pads

    table = pads.dataset(
        os.path.join(data, "step_pairs", "contextual_ing", split), format="parquet"
    ).to_table(columns=["text"])
    tokens = tokenize_table(
        table, tokenizer.backend_tokenizer.to_str(), "contextual_ing", block
    ).to_pylist()
    usable = [(r["input_ids"], r["target_start"]) for r in tokens if r["length"]]
    random.Random(seed).shuffle(usable)
    return usable[:count]


def dev_loss(lm, batches) -> float:
    """Mean loss per rewrite token over the dev batches."""
    import torch

    lm.eval()
    total, tokens = 0.0, 0
    with torch.no_grad():
        for batch in batches:
            labels = torch.from_numpy(batch.labels)
            counted = int((labels[:, 1:] != IGNORED).sum())
            out = lm(
                input_ids=torch.from_numpy(batch.input_ids),
                attention_mask=torch.from_numpy(batch.attention_mask),
                labels=labels,
            )
            total += float(out.loss) * counted
            tokens += counted
    lm.train()
    return total / max(1, tokens)


def run_method(
    args, method: str, layers: int, train_rows: list, dev_batches: list, tokenizer
) -> dict:
    """Fine-tune one method for --steps steps; its speed, size and dev loss."""
    import torch

    from rrt.training.optim import lr_factor

    train = load_settings(args.config).train
    ds = train.deepspeed
    torch.manual_seed(args.seed)
    lm = build_model(
        args.model, len(tokenizer), seed=args.seed, pad_token_id=tokenizer.pad_token_id
    )
    live = pad_vocabulary(lm, train.pad_vocab_to).live
    lm = finetune.prepare(
        lm,
        method,
        range(finetune.new_tokens_from(tokenizer), live),
        layers,
        train.lora.model_dump(),
    )
    counts = finetune.parameter_counts(lm)
    optimizer = torch.optim.AdamW(
        finetune.optimizer_groups(lm, ds.weight_decay),
        lr=args.lr or ds.lr,
        betas=(0.9, 0.95),
        fused=True,
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, ds.warmup_steps, args.steps, ds.schedule, ds.min_lr_ratio)
    )
    before = dev_loss(lm, dev_batches)
    lm.train()
    started = time.perf_counter()
    for step in range(args.steps):
        chunk = train_rows[step * args.micro_batch : (step + 1) * args.micro_batch]
        batch = pad_batch(chunk, tokenizer.pad_token_id, "target")
        loss = lm(
            input_ids=torch.from_numpy(batch.input_ids),
            attention_mask=torch.from_numpy(batch.attention_mask),
            labels=torch.from_numpy(batch.labels),
        ).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in lm.parameters() if p.requires_grad], 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
    seconds = (time.perf_counter() - started) / args.steps
    after = dev_loss(lm, dev_batches)
    return {
        "method": method,
        "trainable_layers": layers if method == "freeze" else None,
        **counts,
        "s_per_step": round(seconds, 2),
        "dev_loss_before": round(before, 4),
        "dev_loss_after": round(after, 4),
        "dev_loss_drop": round(before - after, 4),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def main(argv: list[str] | None = None) -> int:
    """Time and score every method on the same rows; the drop ratio last."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--data", required=True, help="a prepare_data output folder")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--methods", default="freeze,lora", help="comma list of full, freeze, lora")
    parser.add_argument(
        "--trainable-layers", default="12", help="freeze: comma list of block counts"
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--dev-rows", type=int, default=48)
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--lr", type=float, help="peak learning rate (default: train.deepspeed.lr)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--config", help="config file (default: ray_config.yaml)")
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    tokenizer = load_tokenizer(args.model)
    train_rows = rows(
        args.data, "train", tokenizer, args.block, args.steps * args.micro_batch, args.seed
    )
    dev = rows(args.data, "dev", tokenizer, args.block, args.dev_rows, args.seed)
    dev_batches = [
        pad_batch(dev[i : i + 8], tokenizer.pad_token_id, "target") for i in range(0, len(dev), 8)
    ]
    results = []
    for method in args.methods.split(","):
        for layers in (
            [int(n) for n in args.trainable_layers.split(",")] if method == "freeze" else [0]
        ):
            result = run_method(args, method, layers, train_rows, dev_batches, tokenizer)
            print(json.dumps(result), flush=True)
            results.append(result)
    default = load_settings(args.config).train.finetune
    ours = max(
        (r for r in results if r["method"] == default),
        key=lambda r: r["dev_loss_drop"],
        default=None,
    )
    others = [r for r in results if r["method"] != default]
    if ours and others:
        best = max(others, key=lambda r: r["dev_loss_drop"])
        print(
            json.dumps(
                {
                    "default": default,
                    "best_other": best["method"],
                    "drop_ratio": round(ours["dev_loss_drop"] / best["dev_loss_drop"], 3)
                    if best["dev_loss_drop"]
                    else None,
                    "speed_ratio": round(best["s_per_step"] / ours["s_per_step"], 3),
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

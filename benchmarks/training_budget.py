"""How much to train the grounded rewriter: optimizer steps (so rows seen) and trainable blocks,
against invented foods and closeness to the source.

    python benchmarks/training_budget.py --data out/quality/prepared            # 2 CPU cores: about an hour
    python benchmarks/training_budget.py --data D --budgets 40:12,120:12,40:full --seeds 13,7

Each budget is STEPS:BLOCKS, BLOCKS the transformer blocks trained from the top (`train.finetune:
freeze`, `train.trainable_layers`) or `full` for every weight. Each fine-tunes the grounded
Contextual + rule prompt rewriter (`grounded_ing`) from the same pretrained model, rows and seed
(2 workers x --micro-batch rows a step), then rewrites each seed's sample of test recipes with the
product's defaults, plain, so the guard's closed food set does not hide what the model learned.
One resumable command: finished trainings and rewrites are skipped. Writes training_budget.json
into --output (per budget and seed: the final dev loss, invented-food steps, same job, ROUGE-L
recall against the source, form rules, seconds) and prints a table, then the ROUGE-L ratio of
the best budget over the default last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.quality import form_pass_share, rewrite_sample, run_job
from rrt.config import load_settings
from rrt.evaluation.grounding import grounding_counts
from rrt.evaluation.metrics import rouge_l_recall


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's flags."""
    train = load_settings().train
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument(
        "--output",
        default=os.path.join(ROOT, "out", "training_budget"),
        help="run folder (resumable)",
    )
    parser.add_argument(
        "--data",
        required=True,
        help="a prepared folder (jobs/prepare_data.py, as quality.py makes)",
    )
    parser.add_argument(
        "--model", default="smollm2-135m", help="the pretrained model every budget starts from"
    )
    parser.add_argument(
        "--budgets",
        default=f"40:{train.trainable_layers},120:{train.trainable_layers},40:full",
        help="comma list of STEPS:BLOCKS (BLOCKS: trained from the top, or full)",
    )
    parser.add_argument("--micro-batch", type=int, default=4, help="rows per worker per step")
    parser.add_argument(
        "--eval-examples", type=int, default=64, help="dev examples per evaluation while training"
    )
    parser.add_argument(
        "--num-recipes", type=int, default=12, help="test recipes each run rewrites"
    )
    parser.add_argument(
        "--seeds",
        default=f"{load_settings().rewrite.seed},7",
        help="comma list: one seeded sample of recipes and draws each",
    )
    parser.add_argument("--candidates", type=int, default=10, help="samples per step (best kept)")
    parser.add_argument("--actors", type=int, default=2, help="rewriter actors")
    return parser


def parse_budget(text: str) -> tuple[int, str]:
    """(steps, blocks) from "STEPS:BLOCKS"; blocks is a count or "full"."""
    steps, _, blocks = text.strip().partition(":")
    if not steps.isdigit() or not (blocks == "full" or blocks.isdigit()):
        raise SystemExit(
            f"training_budget: error: a budget is STEPS:BLOCKS (e.g. 40:12 or 40:full), not {text!r}"
        )
    return int(steps), blocks


def measure(folder: str) -> dict:
    """Invented-food steps, same job, ROUGE-L recall and form rules of one rewrite run."""
    with open(os.path.join(folder, "rewrites.jsonl"), encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle]
    counts = [grounding_counts(r) for r in records]
    steps = sum(c["steps"] for c in counts)
    paired = sum(c["paired_steps"] for c in counts)
    recall = [rouge_l_recall(r["rewrite"]["steps"], r["source"]["steps"]) for r in records]
    return {
        "recipes": len(records),
        "steps": steps,
        "invented_food_steps": round(
            100 * sum(c["invented_steps"] for c in counts) / max(steps, 1), 2
        ),
        "same_job": round(100 * sum(c["same_job_steps"] for c in counts) / max(paired, 1), 2),
        "rouge_l_recall": round(sum(recall) / max(len(recall), 1), 2),
        "form_pass_share": form_pass_share(folder),
    }


def train(args, data: str, folder: str, steps: int, blocks: str) -> float:
    """Fine-tune one budget unless its export is there; seconds taken."""
    if os.path.exists(os.path.join(folder, "train_stats.json")):
        return 0.0
    flags = [
        "--variant",
        "grounded_ing",
        "--data",
        data,
        "--output",
        folder,
        "--model",
        args.model,
        "--max-steps",
        str(steps),
        "--micro-batch",
        str(args.micro_batch),
        "--eval-examples",
        str(args.eval_examples),
    ]
    flags += (
        ["--finetune", "full"]
        if blocks == "full"
        else ["--finetune", "freeze", "--trainable-layers", blocks]
    )
    if os.path.exists(os.path.join(folder, "run.json")):
        flags.append("--resume")  # a stopped run continues from its checkpoint
    return run_job("train.py", *flags)


def dev_loss(folder: str) -> float | None:
    """The training job's last dev loss."""
    with open(os.path.join(folder, "train_stats.json"), encoding="utf-8") as handle:
        loss = json.load(handle).get("eval_loss_last")
    return round(loss, 3) if loss is not None else None


def mean_of(runs: list[dict], key: str) -> tuple[float, float]:
    """Mean and max - min of one measure over a budget's seeds."""
    values = [r[key] for r in runs if r.get(key) is not None]
    if not values:
        return float("nan"), 0.0
    return sum(values) / len(values), max(values) - min(values)


def main(argv: list[str] | None = None) -> int:
    """Train every budget, rewrite every seed's sample with each, compare."""
    args = build_parser().parse_args(argv)
    out = os.path.abspath(args.output)
    data = os.path.abspath(args.data)
    if not os.path.exists(os.path.join(data, "stats.json")):
        raise SystemExit(f"training_budget: error: {data} is not a prepared folder (no stats.json)")
    budgets = [parse_budget(b) for b in args.budgets.split(",") if b.strip()]
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    os.makedirs(out, exist_ok=True)
    runs: dict[str, list[dict]] = {}
    for steps, blocks in budgets:
        name = f"{steps}:{blocks}"
        folder = os.path.join(out, "train", f"{steps}-{blocks}")
        seconds = train(args, data, folder, steps, blocks)
        runs[name] = []
        for seed in seeds:
            rewrites = os.path.join(out, "rewrites", f"{steps}-{blocks}-seed{seed}")
            started = time.perf_counter()
            rewrite_sample(
                data,
                rewrites,
                "grounded_rule",
                seed,
                args.num_recipes,
                args.candidates,
                args.actors,
                "--model",
                os.path.join(folder, "model"),
            )
            runs[name].append(
                {
                    "seed": seed,
                    "steps": steps,
                    "blocks": blocks,
                    "rows": steps * 2 * args.micro_batch,
                    "dev_loss": dev_loss(folder),
                    **measure(rewrites),
                    "train_s": round(seconds, 1),
                    "rewrite_s": round(time.perf_counter() - started, 1),
                }
            )
    keys = ("dev_loss", "invented_food_steps", "same_job", "rouge_l_recall", "form_pass_share")
    summary = {
        name: {key: mean_of(per_seed, key) for key in keys} for name, per_seed in runs.items()
    }
    with open(os.path.join(out, "training_budget.json"), "w", encoding="utf-8") as handle:
        json.dump(
            {"runs": runs, "mean_and_spread": summary, "settings": vars(args)}, handle, indent=2
        )
    print(
        "| budget (steps:blocks) | rows | dev loss | invented-food steps % | same job % | ROUGE-L recall | form rules |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, per_seed in runs.items():
        cells = [f"{m:.3g} ± {s / 2:.2g}" for m, s in (summary[name][k] for k in keys)]
        print(f"| {name} | {per_seed[0]['rows']} | " + " | ".join(cells) + " |")
    first, best = next(iter(summary)), max(summary, key=lambda n: summary[n]["rouge_l_recall"][0])
    print(
        f"ROUGE-L recall, best budget {best} / first {first}: {summary[best]['rouge_l_recall'][0]:.2f} / "
        f"{summary[first]['rouge_l_recall'][0]:.2f} = "
        f"{summary[best]['rouge_l_recall'][0] / summary[first]['rouge_l_recall'][0]:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

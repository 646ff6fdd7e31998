"""What the loss reads (`train.loss_on`): the Contextual + rule prompt rewriter fine-tuned with the
loss on the learned step only (`step`) and on every target step (`target`), from the same
pretrained model, rows and seed; then each rewrites the same seeded test samples.

    python benchmarks/loss_on.py                              # 2 CPU cores: about 45 minutes
    python benchmarks/loss_on.py --data out/quality/prepared --steps 120 --seeds 13,7,21

A Contextual text holds the target steps 1..n' after the source; at rewrite time the steps before
n' are the rewriter's own, so only the last one is what it writes. One resumable command: it
prepares the real recipes as quality.py does (unless --data names a prepared folder), trains
each setting and rewrites each seed's sample, skipping what is done. Writes loss_on.json into
--output (per run: ROUGE-L recall against the source recipe, the mean ROUGE-L recall of each
step against its source step and the share under 0.2, trigram diversity, the form rules' pass
share, seconds) and prints the ROUGE-L ratio step / target last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.quality import form_pass_share, inputs, rewrite_sample, run_job
from rrt.config import load_settings
from rrt.evaluation.metrics import rouge_l_recall, trigram_diversity

SETTINGS = ("step", "target")


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's flags."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument(
        "--output", default=os.path.join(ROOT, "out", "loss_on"), help="run folder (resumable)"
    )
    parser.add_argument(
        "--data", help="a prepared folder (default: prepare the real recipes into --output)"
    )
    parser.add_argument(
        "--model", default="smollm2-135m", help="the pretrained model both settings start from"
    )
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps of each setting")
    parser.add_argument("--micro-batch", type=int, default=4, help="examples per worker per step")
    parser.add_argument(
        "--eval-examples", type=int, default=64, help="dev examples per evaluation while training"
    )
    parser.add_argument(
        "--num-recipes", type=int, default=24, help="test recipes each run rewrites"
    )
    parser.add_argument(
        "--seeds",
        default=f"{load_settings().rewrite.seed},7",
        help="comma list: one seeded sample of recipes and draws each (default: rewrite.seed and 7)",
    )
    parser.add_argument("--candidates", type=int, default=10, help="samples per step (best kept)")
    parser.add_argument("--actors", type=int, default=2, help="rewriter actors")
    return parser


def measure(folder: str) -> dict:
    """ROUGE-L recall, per-step closeness, trigram diversity and form rules of one rewrite run."""
    with open(os.path.join(folder, "rewrites.jsonl"), encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle]
    recipes = [rouge_l_recall(r["rewrite"]["steps"], r["source"]["steps"]) for r in records]
    steps = [
        rouge_l_recall([rewrite], [source]) / 100
        for r in records
        for source, rewrite in zip(r["source"]["steps"], r["rewrite"]["steps"])
    ]
    written = [s for r in records for s in r["rewrite"]["steps"]]
    return {
        "recipes": len(records),
        "steps": len(steps),
        "rouge_l_recall": round(sum(recipes) / len(recipes), 2),
        "step_recall_mean": round(sum(steps) / len(steps), 3),
        "steps_under_0.2": round(sum(s < 0.2 for s in steps) / len(steps), 3),
        "trigram_diversity": round(trigram_diversity(written), 3),
        "form_pass_share": form_pass_share(folder),
    }


def main(argv: list[str] | None = None) -> int:
    """Train both settings, rewrite every seed's sample with each, compare."""
    args = build_parser().parse_args(argv)
    out = os.path.abspath(args.output)
    os.makedirs(out, exist_ok=True)
    data = os.path.abspath(args.data) if args.data else os.path.join(out, "prepared")
    if not os.path.exists(os.path.join(data, "stats.json")):
        if args.data:
            raise SystemExit(f"loss_on: error: {data} is not a prepared folder (no stats.json)")
        run_job("prepare_data.py", "--input", inputs([]), "--output", data)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    runs: dict[str, dict] = {}
    for setting in SETTINGS:
        folder = os.path.join(out, "train", setting)
        seconds = 0.0
        if not os.path.exists(os.path.join(folder, "train_stats.json")):
            flags = [
                "--variant",
                "contextual_ing",
                "--data",
                data,
                "--output",
                folder,
                "--model",
                args.model,
                "--loss-on",
                setting,
                "--max-steps",
                str(args.steps),
                "--micro-batch",
                str(args.micro_batch),
                "--eval-examples",
                str(args.eval_examples),
            ]
            if os.path.exists(os.path.join(folder, "run.json")):
                flags.append("--resume")  # a stopped run continues from its checkpoint
            seconds = run_job("train.py", *flags)
        for seed in seeds:
            rewrites = os.path.join(out, "rewrites", f"{setting}-seed{seed}")
            started = time.perf_counter()
            rewrite_sample(
                data,
                rewrites,
                "contextual_rule",
                seed,
                args.num_recipes,
                args.candidates,
                args.actors,
                "--model",
                os.path.join(folder, "model"),
            )
            runs[f"{setting}-seed{seed}"] = {
                "setting": setting,
                "seed": seed,
                **measure(rewrites),
                "train_s": round(seconds, 1),
                "rewrite_s": round(time.perf_counter() - started, 1),
            }
    mean = {
        s: sum(r["rouge_l_recall"] for r in runs.values() if r["setting"] == s) / len(seeds)
        for s in SETTINGS
    }
    summary = {"runs": runs, "mean_rouge_l_recall": mean, "settings": vars(args)}
    with open(os.path.join(out, "loss_on.json"), "w", encoding="utf-8") as handle:
        json.dump(summary, handle, indent=2)
    print(
        "| run | ROUGE-L recall | step recall (mean) | steps under 0.2 | trigram diversity | form rules |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name, r in runs.items():
        print(
            f"| {name} | {r['rouge_l_recall']:.2f} | {r['step_recall_mean']:.3f} | {r['steps_under_0.2']:.0%} "
            f"| {r['trigram_diversity']:.3f} | {r['form_pass_share']:.0%} |"
        )
    print(
        f"ROUGE-L recall, step / target: {mean['step']:.2f} / {mean['target']:.2f} = "
        f"{mean['step'] / mean['target']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

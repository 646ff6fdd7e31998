"""Rewrite quality the way the paper measured it (Table 2), from a pretrained model, offline.

    python benchmarks/quality.py                                   # 2 CPU cores (its timings: benchmarks/RESULTS.md)
    python benchmarks/quality.py --output out/quality --steps 120 --num-recipes 60   # longer, closer
    python benchmarks/quality.py --use-gpu --steps 2000 --num-recipes 1000
    python benchmarks/quality.py --seeds 13,7 --systems rule_based,retrieval,contextual_rule,grounded_rule

One resumable command: a rerun skips finished stages and continues the others. It
  1. prepares the real recipes (../shared/data web recipes and the paper's samples, plus
     data/sample) with jobs/prepare_data.py;
  2. fine-tunes from `smollm2-135m` the grounded Contextual + rule prompt rewriter (the product's:
     grounded_ing), the paper's Contextual + rule prompt, Contextual and No-Context rewriters and
     the No-Source LM that scores perplexity, and trains from scratch the
     sentence-level baselines, Transformer and Seq2seq Copy (one model per constraint)
     (jobs/train.py);
  3. rewrites the test split with those rewriters, plain and constrained (the paper's rows with the
     paper's selection rules, open guard, temperature and every step rewritten, `--selection paper
     --no-closed-foods --temperature 1.0 --steps every`; the grounded rows with the product's
     defaults, which edit only the steps the constraint touches), with Rule-Based and
     Retrieval, with PPLM steering the No-Source LM, with CTRL on a tiny random config
     (`ctrl_tiny`: the 1.6B model cannot run here, so its row measures the pipeline, not CTRL),
     and with Transformer and Seq2seq Copy, each step on its own
     (jobs/rewrite.py; the same seeded sample of recipes for every system, one sample per --seeds);
  4. evaluates them side by side, per seed (jobs/evaluate.py: table.md holds ours beside the
     paper's rows, report.html the rewrites).
Writes quality.json (every system's metrics per seed, their mean and spread, the targets on the
mean and whether each is met, seconds per stage) and examples.md (source steps beside the grounded
rewrites) into --output, and prints one JSON line per stage, the summary last. --systems keeps
a subset of the rows (and trains only the models they need).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from testing.shared_data import SHARED

# label -> training variant; each label's rewrite system has the same name. The No-Source LM only
# scores perplexity.
MODELS = {
    "grounded_rule": "grounded_ing",
    "contextual_rule": "contextual_ing",
    "contextual": "contextual",
    "no_context": "no_context",
    "no_source": "no_source",
}
LEARNED = ("grounded_rule", "contextual_rule", "contextual", "no_context")
PRODUCT = "grounded_rule"  # the rows the targets judge: the product's defaults
# The paper's rows keep the paper's selection rules, its open guard, its sampling temperature and
# its rewrite of every step.
PAPER_FLAGS = (
    "--selection",
    "paper",
    "--no-closed-foods",
    "--temperature",
    "1.0",
    "--steps",
    "every",
)
# The sentence-level baselines, trained from scratch on the no_context pairs (train.seq2seq's shape).
SEQ2SEQ = ("transformer", "seq2seq_copy")
OTHERS = ("rule_based", "retrieval", "ctrl_tiny", "pplm")
# (metric, row, target, direction): the product row's targets, on the mean over seeds.
TARGETS = (
    ("adherence", PRODUCT, 99.5, "min"),
    ("adherence", PRODUCT + "+constrained", 100.0, "min"),
    ("rouge_l_recall", PRODUCT, 35.0, "min"),
    ("trigram_diversity", PRODUCT, 0.65, "min"),
    ("form_pass_share", PRODUCT, 0.95, "min"),
    ("invented_food_steps", PRODUCT, 2.0, "max"),
    ("invented_food_steps", PRODUCT + "+constrained", 2.0, "max"),
    ("same_job", PRODUCT, 80.0, "min"),
    ("title_consistency", PRODUCT, 100.0, "min"),
    ("untouched_steps_kept", PRODUCT + "+constrained", 95.0, "min"),
    ("changed_steps_same_action", PRODUCT + "+constrained", 85.0, "min"),
    ("invented_food_steps", PRODUCT + "+constrained", 1.0, "max"),
)


def log(stage: str, **fields) -> None:
    """One JSON line of progress for a stage."""
    print(json.dumps({"stage": stage, **fields}), flush=True)


def stage_seconds(out: str, stage: str | None = None, seconds: float = 0.0) -> dict[str, float]:
    """Seconds per stage over every run of this folder (stage_seconds.json), adding `seconds` to
    `stage` first: a resumed run skips finished stages, whose time the earlier runs spent."""
    path = os.path.join(out, "stage_seconds.json")
    totals = json.load(open(path, encoding="utf-8")) if os.path.exists(path) else {}
    if stage:
        totals[stage] = round(totals.get(stage, 0.0) + seconds, 1)
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(totals, handle, indent=2)
        log(stage, seconds=round(seconds, 1), total_seconds=totals[stage])
    return totals


def run_job(script: str, *args: str) -> float:
    """Run one jobs/ script (its own progress bars show); seconds taken. A failure ends the benchmark."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, os.path.join(ROOT, "jobs", script), *args], cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(
            f"quality: error: jobs/{script} {' '.join(args)} failed (exit {done.returncode})"
        )
    return time.perf_counter() - started


def inputs(extra: list[str]) -> str:
    """The corpora to prepare: the shared real recipes (when present), the bundled sample, extras."""
    found = [
        p
        for p in (
            os.path.join(SHARED, "web_recipes", "recipes.jsonl"),
            os.path.join(SHARED, "paper_sample"),
        )
        if os.path.exists(p)
    ]
    if not found:
        print(
            f"quality: note: {SHARED} not found; only the bundled sample is prepared",
            file=sys.stderr,
        )
    return ",".join(found + [os.path.join(ROOT, "data", "sample", "recipes.jsonl")] + extra)


def train(args, out: str, label: str) -> float:
    """Fine-tune one model from the pretrained preset unless its export is already there."""
    folder = os.path.join(out, "train", label)
    if os.path.exists(os.path.join(folder, "train_stats.json")):
        return 0.0
    steps = args.lm_steps if label == "no_source" else args.steps
    flags = [
        "--variant",
        MODELS[label],
        "--data",
        os.path.join(out, "prepared"),
        "--output",
        folder,
        "--model",
        args.model,
        "--max-steps",
        str(steps),
        "--eval-examples",
        str(args.eval_examples),
    ]
    if args.micro_batch:
        flags += ["--micro-batch", str(args.micro_batch)]
    if args.use_gpu:
        flags += ["--use-gpu"]
    if os.path.exists(os.path.join(folder, "run.json")):
        flags += ["--resume"]
    return run_job("train.py", *flags)


def train_seq2seq(args, out: str, variant: str) -> float:
    """Train a sentence-level baseline from scratch unless it is done (Seq2seq Copy: a model for
    every constraint with training pairs; its summary is written when all are)."""
    folder = os.path.join(out, "train", variant)
    if os.path.exists(os.path.join(folder, "train_stats.json")):
        return 0.0
    # One worker: the models are small, and a constraint with few pairs still fills its steps.
    flags = [
        "--variant",
        variant,
        "--data",
        os.path.join(out, "prepared"),
        "--output",
        folder,
        "--num-workers",
        "1",
        "--max-steps",
        str(args.seq2seq_steps),
        "--eval-examples",
        str(args.eval_examples),
    ]
    if args.micro_batch:
        flags += ["--micro-batch", str(args.micro_batch)]
    if args.use_gpu:
        flags += ["--use-gpu"]
    if os.path.isdir(folder) and os.listdir(folder):
        flags += ["--resume"]
    return run_job("train.py", *flags)


def seq2seq_runs(out: str) -> list[tuple]:
    """The rewrite runs of the sentence-level baselines: (label, system, model, constrained)."""
    folder = os.path.join(out, "train")
    return [
        ("transformer", "transformer", os.path.join(folder, "transformer", "model"), False),
        ("seq2seq_copy", "seq2seq_copy", os.path.join(folder, "seq2seq_copy"), False),
    ]


def batch_recipes(recipes: int, actors: int) -> int:
    """Recipes per rewrite batch: three batches per actor, so an actor that finishes early takes
    another instead of idling."""
    return max(1, -(-recipes // (3 * actors)))


def rewrite(
    args,
    folder: str,
    seed: int,
    system: str,
    model: str | None,
    constrained: bool,
    recipes: int | None = None,
) -> float:
    """Rewrite one seed's test sample with one system into `folder` unless a finished run is there (the
    job itself resumes a stopped one); the paper's systems with the paper's selection and guard."""
    flags = ["--model", model] if model else []
    if constrained:
        flags += ["--constrained"]
    if not system.startswith("grounded"):
        flags += list(PAPER_FLAGS)
    if args.use_gpu and model:
        flags += ["--use-gpu"]
    return rewrite_sample(
        os.path.join(args.output, "prepared"),
        folder,
        system,
        seed,
        recipes or args.num_recipes,
        args.candidates,
        args.actors,
        *flags,
    )


def rewrite_sample(
    data: str,
    folder: str,
    system: str,
    seed: int,
    recipes: int,
    candidates: int,
    actors: int,
    *flags: str,
) -> float:
    """Rewrite one seeded sample of a prepared folder's test recipes into `folder` unless a finished
    run is there; seconds taken."""
    if finished(folder):
        return 0.0
    return run_job(
        "rewrite.py",
        "--data",
        data,
        "--split",
        "test",
        "--system",
        system,
        "--output",
        folder,
        "--num-recipes",
        str(recipes),
        "--candidates",
        str(candidates),
        "--batch-recipes",
        str(batch_recipes(recipes, actors)),
        "--actors",
        str(actors),
        "--seed",
        str(seed),
        *flags,
    )


def finished(folder: str) -> bool:
    """A rewrite run that wrote every recipe it planned."""
    path = os.path.join(folder, "run.json")
    if not os.path.exists(path):
        return False
    with open(path, encoding="utf-8") as handle:
        run = json.load(handle)
    counts = run.get("counts") or {}
    return bool(run.get("finished")) and counts.get("written", 0) + counts.get(
        "done_earlier", 0
    ) >= counts.get("recipes", 1)


def edit_fidelity(folder: str) -> dict:
    """How a run treats the steps the guide leaves alone and those it changes: % of untouched
    steps whose rewrite recalls at least 90 of the guide's version (ROUGE-L), and % of changed
    steps whose leading action is the source step's (or an equivalent), read after any cook's
    note that opens the step ("Press the tofu for 15 minutes before you start. Cut the tofu...")."""
    from rrt.modelling.editing import leading_action, same_action, step_affected
    from rrt.modelling.rewriter import guide_rewrite
    from rrt.modelling.selection import StepContext, closeness
    from rrt.recipes.cook_notes import NOTES
    from rrt.recipes.tagger import parse_constraints

    openers = tuple(note.text for note in NOTES if note.before)

    untouched, kept, changed, same = 0, 0, 0, 0
    with open(os.path.join(folder, "rewrites.jsonl"), encoding="utf-8") as handle:
        for record in map(json.loads, handle):
            source = record["source"]
            guide = guide_rewrite(source, parse_constraints(record["constraint"]))[0]["steps"]
            for src, floor, new in zip(source["steps"], guide, record["rewrite"]["steps"]):
                if step_affected(src, floor):
                    changed += 1
                    while new.startswith(openers):
                        new = new[len(next(o for o in openers if new.startswith(o))) :].lstrip()
                    same += same_action(leading_action(new), leading_action(src))
                else:
                    untouched += 1
                    kept += closeness(new, StepContext([], floor, [])) >= 0.9
    return {
        "untouched_steps_kept": round(100 * kept / untouched, 1) if untouched else None,
        "changed_steps_same_action": round(100 * same / changed, 1) if changed else None,
    }


def examples(folder: str, count: int = 5) -> str:
    """examples.md: source steps beside the grounded rewrite (constrained) of a few recipes."""
    path = os.path.join(folder, PRODUCT + "+constrained", "rewrites.jsonl")
    if not os.path.exists(path):
        return ""
    with open(path, encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle]
    records.sort(key=lambda r: r["id"])
    lines = ["# Grounded Contextual + rule prompt, constrained: source beside rewrite", ""]
    for record in records[:count]:
        lines += [
            f"## {record['source']['title']} -> {record['rewrite']['title']} ({record['constraint']})",
            "",
            "| source step | rewrite |",
            "| --- | --- |",
        ]
        for source, target in zip(record["source"]["steps"], record["rewrite"]["steps"]):
            lines.append(f"| {source.replace('|', '/')} | {target.replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines)


def mean_and_spread(per_seed: dict[int, dict]) -> tuple[dict, dict]:
    """(mean, max - min) over seeds of every system's numeric metrics."""
    labels = {label for metrics in per_seed.values() for label in metrics}
    mean, spread = {}, {}
    for label in sorted(labels):
        keys = {
            k
            for metrics in per_seed.values()
            for k, v in (metrics.get(label) or {}).items()
            if isinstance(v, (int, float))
        }
        mean[label], spread[label] = {}, {}
        for key in sorted(keys):
            values = [
                m[label][key]
                for m in per_seed.values()
                if isinstance((m.get(label) or {}).get(key), (int, float))
            ]
            mean[label][key] = round(sum(values) / len(values), 4)
            spread[label][key] = round(max(values) - min(values), 4)
    return mean, spread


def judge(metrics: dict) -> dict:
    """Each target of the quality run with our value (the mean over seeds) and whether it is met;
    then the orderings the paper saw among its own systems."""
    out = {}
    for key, label, target, direction in TARGETS:
        ours = (metrics.get(label) or {}).get(key)
        met = ours is not None and (ours >= target if direction == "min" else ours <= target)
        out[f"{key}:{label}"] = {"ours": ours, "target": target, "met": met}
    learned = [
        label
        for label in metrics
        if label.split("+")[0] in LEARNED and not label.startswith("grounded")
    ]
    core = {
        label: m
        for label, m in metrics.items()
        if label in ("rule_based", "retrieval") or label in learned
    }
    rouge = {label: m.get("rouge_l_recall") for label, m in core.items()}
    diversity = {label: m.get("trigram_diversity") for label, m in core.items()}
    if (
        all(v is not None for v in rouge.values())
        and learned
        and "rule_based" in rouge
        and "retrieval" in rouge
    ):
        out["rule_based_closest"] = {"met": rouge["rule_based"] == max(rouge.values())}
        out["rule_based_least_diverse"] = {
            "met": diversity["rule_based"] == min(diversity.values())
        }
        out["retrieval_least_close"] = {"met": rouge["retrieval"] == min(rouge.values())}
        out["contextual_between"] = {
            "met": all(
                rouge["retrieval"] <= rouge[label] <= rouge["rule_based"] for label in learned
            )
        }
    return out


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's flags."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--output", default=os.path.join(ROOT, "out", "quality"), help="run folder (resumable)"
    )
    parser.add_argument(
        "--model", default="smollm2-135m", help="the pretrained model every system starts from"
    )
    parser.add_argument(
        "--steps", type=int, default=40, help="optimizer steps per fine-tuned rewriter"
    )
    parser.add_argument(
        "--lm-steps", type=int, default=12, help="optimizer steps of the No-Source LM"
    )
    parser.add_argument(
        "--seq2seq-steps",
        type=int,
        default=150,
        help="optimizer steps of the Transformer and of each Seq2seq Copy model (from scratch)",
    )
    parser.add_argument(
        "--eval-examples", type=int, default=64, help="dev examples per evaluation while training"
    )
    parser.add_argument("--actors", type=int, default=2, help="rewriter actors")
    parser.add_argument("--micro-batch", type=int, default=4, help="examples per worker per step")
    parser.add_argument(
        "--num-recipes", type=int, default=24, help="test recipes each system rewrites"
    )
    parser.add_argument("--candidates", type=int, default=10, help="samples per step (best kept)")
    parser.add_argument(
        "--pplm-recipes",
        type=int,
        default=6,
        help="test recipes PPLM rewrites (its perturbation costs seconds a token on CPU)",
    )
    parser.add_argument(
        "--seeds", default="13", help="comma list: one seeded sample of test recipes and draws each"
    )
    parser.add_argument(
        "--systems",
        help="comma list of the rows to run (default: all): rule_based, retrieval, "
        "grounded_rule, contextual_rule, contextual, no_context, transformer, "
        "seq2seq_copy, ctrl_tiny, pplm (learned rows come plain and constrained)",
    )
    parser.add_argument(
        "--input", action="append", default=[], help="another corpus to prepare (repeatable)"
    )
    parser.add_argument("--use-gpu", action="store_true", help="train, rewrite and score on GPUs")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run every stage that is not done yet, then judge the results."""
    args = build_parser().parse_args(argv)
    out = args.output = os.path.abspath(args.output)
    os.makedirs(out, exist_ok=True)
    every = (*LEARNED, *SEQ2SEQ, *OTHERS)
    rows = [r.strip() for r in args.systems.split(",")] if args.systems else list(every)
    if unknown := sorted(set(rows) - set(every)):
        raise SystemExit(
            f"quality: error: unknown --systems {', '.join(unknown)}; choose from {', '.join(every)}"
        )
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    seconds: dict[str, float] = {}
    prepared = os.path.join(out, "prepared")
    # A finished preparation is not run again: its stats.json identifies the data to the later runs.
    seconds["prepare"] = (
        0.0
        if os.path.exists(os.path.join(prepared, "stats.json"))
        else run_job("prepare_data.py", "--input", inputs(args.input), "--output", prepared)
    )
    stage_seconds(out, "prepare", seconds["prepare"])
    for label in MODELS:
        if label in rows or label == "no_source":
            seconds[f"train/{label}"] = train(args, out, label)
            stage_seconds(out, f"train/{label}", seconds[f"train/{label}"])
    for variant in SEQ2SEQ:
        if variant in rows:
            seconds[f"train/{variant}"] = train_seq2seq(args, out, variant)
            stage_seconds(out, f"train/{variant}", seconds[f"train/{variant}"])
    runs = [(label, label, None, False) for label in ("rule_based", "retrieval") if label in rows]
    for label in (r for r in LEARNED if r in rows):
        model = os.path.join(out, "train", label, "model")
        runs += [(label, label, model, False), (f"{label}+constrained", label, model, True)]
    tiny_ctrl_folder = os.path.join(out, "train", "ctrl_tiny")
    if "ctrl_tiny" in rows:
        if not os.path.exists(os.path.join(tiny_ctrl_folder, "config.json")):
            from testing.local_service import tiny_ctrl

            tiny_ctrl(tiny_ctrl_folder)
        runs.append(("ctrl_tiny", "ctrl", tiny_ctrl_folder, False))
    if "pplm" in rows:
        runs.append(("pplm", "pplm", os.path.join(out, "train", "no_source", "model"), False))
    runs += [run for run in seq2seq_runs(out) if run[0] in rows]
    per_seed = {}
    for seed in seeds:
        # The first seed's runs keep the folders a single-seed run has always used.
        base = (
            os.path.join(out, "rewrites")
            if seed == seeds[0]
            else os.path.join(out, f"rewrites_seed{seed}")
        )
        for label, system, model, constrained in runs:
            # PPLM takes a few gradient steps for every token: a smaller sample on CPU.
            recipes = args.pplm_recipes if system == "pplm" else None
            stage = f"rewrite/{label}" + ("" if seed == seeds[0] else f"/seed{seed}")
            seconds[stage] = rewrite(
                args, os.path.join(base, label), seed, system, model, constrained, recipes
            )
            stage_seconds(out, stage, seconds[stage])
        evaluation = os.path.join(
            out, "evaluation" if seed == seeds[0] else f"evaluation_seed{seed}"
        )
        stage = "evaluate" + ("" if seed == seeds[0] else f"/seed{seed}")
        seconds[stage] = run_job(
            "evaluate.py",
            "--lm",
            os.path.join(out, "train", "no_source", "model"),
            "--rewrites",
            ",".join(os.path.join(base, label) for label, *_ in runs),
            "--output",
            evaluation,
        )
        stage_seconds(out, stage, seconds[stage])
        with open(os.path.join(evaluation, "metrics.json"), encoding="utf-8") as handle:
            metrics = {label: values for label, values in json.load(handle)["systems"].items()}
        # evaluate.py names a run by its system and decoding; quality.py by its row.
        for label, system, _, constrained in runs:
            named = system + ("+constrained" if constrained else "")
            if named in metrics and named != label:
                metrics[label] = metrics.pop(named)
            # evaluate.py's form rules (% of chosen steps) as the share the targets read.
            if label in metrics and metrics[label].get("form_rules") is not None:
                metrics[label]["form_pass_share"] = round(metrics[label]["form_rules"] / 100, 4)
            if label in metrics:
                metrics[label].update(edit_fidelity(os.path.join(base, label)))
        per_seed[seed] = metrics
        with open(
            os.path.join(out, "examples.md" if seed == seeds[0] else f"examples_seed{seed}.md"),
            "w",
            encoding="utf-8",
        ) as handle:
            handle.write(examples(base))
    mean, spread = mean_and_spread(per_seed)
    targets = judge(mean)
    if "ctrl_tiny" in mean:
        mean["ctrl (tiny random config)"] = mean.pop("ctrl_tiny")
    seconds = stage_seconds(out)
    summary = {
        "metrics": mean,
        "spread": spread,
        "per_seed": per_seed,
        "targets": targets,
        "seconds": seconds,
        "settings": {k: v for k, v in vars(args).items()},
    }
    with open(os.path.join(out, "quality.json"), "w", encoding="utf-8") as handle:
        json.dump(summary, handle, indent=2)
    for seed in seeds:
        evaluation = os.path.join(
            out, "evaluation" if seed == seeds[0] else f"evaluation_seed{seed}"
        )
        with open(os.path.join(evaluation, "table.md"), encoding="utf-8") as handle:
            print(f"# seed {seed}\n" + handle.read().split("\n## Paper")[0])
    print(
        json.dumps(
            {
                "targets_met": sum(t["met"] for t in targets.values()),
                "targets": len(targets),
                "missed": [name for name, t in targets.items() if not t["met"]],
                "total_s": round(sum(seconds.values()), 1),
                "stage_seconds": seconds,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Constrained decoding that takes a refused word back, against the letters-only guard it replaces.

    python benchmarks/take_backs.py --system contextual_rule --model out/demo/contextual_rule/model \\
        --data out/demo/prepared
    python benchmarks/take_backs.py --system contextual_rule --model out/demo/contextual_rule/model \\
        --data <prepared web recipes> --num-recipes 16

Takes the rewrite job's flags. Rewrites the same seeded sample of test recipes twice in one
process, constrained: first with no take-backs (a refused word's end lets only letters follow, so a
model glues some on: "chickenocks"), then as the engine does now (rrt.modelling.guarded_row). For
each it counts the candidates with a forbidden food hidden in a non-word, the chosen steps with
one, the words taken back, candidates cut by the token budget or the guard, the chosen steps'
mean selection score and length, and the seconds. Prints one line per arm, the ratios last.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from jobs.rewrite import build_parser, plan_tasks, settings_from
from jobs.rewrite_actor import _seeded_tasks, task_table
from rrt.config import RewriteSettings
from rrt.evaluation.rewrite_records import sampled_steps
from rrt.modelling import guarded_row
from rrt.modelling.loading import build_rewriter, load_model
from rrt.modelling.scheduler import rewrite_all
from runtime.runs import JobError


def measure(records: list[dict]) -> Counter:
    """Counts over every sampled step of the records (steps with a choice among candidates)."""
    counts = Counter()
    for _, entry, _, words in sampled_steps(records):
        candidates = entry["candidates"]
        hidden = [bool(w) for w in words]
        counts.update(f"word:{w}" for found in words for w in found)
        chosen = candidates[entry["chosen"]]
        counts.update(
            steps=1,
            candidates=len(candidates),
            hidden=sum(hidden),
            chosen_hidden=hidden[entry["chosen"]],
            length=sum(c["ended"] == "length" for c in candidates),
            guard=sum(c["ended"] == "guard" for c in candidates),
            chosen_empty=not chosen["text"].strip(),
            chosen_words=len(chosen["text"].split()),
        )
        counts["chosen_score"] += chosen["scores"]["total"]
    return counts


def arm(model, settings: RewriteSettings, tasks: list, take_backs: int) -> dict:
    """One rewrite of every task with this many take-backs a candidate; its counts and seconds."""
    guarded_row.TAKE_BACKS = take_backs
    rewriter = build_rewriter(model, settings, settings.candidates, True, settings.system)
    started = time.perf_counter()
    records = rewrite_all(
        rewriter, _seeded_tasks(task_table(tasks), settings.seed), settings.batch_recipes
    )
    counts = measure(records)
    counts["taken_back"] = rewriter.stats["words_taken_back"]
    return {"counts": counts, "seconds": time.perf_counter() - started}


def main(argv: list[str] | None = None) -> int:
    """Both arms on the same tasks; one line each, the ratios last."""
    parser = build_parser()
    parser.description = __doc__.split("\n\n")[0]
    args = parser.parse_args(argv)
    try:
        settings = settings_from(args)
        tasks, _ = plan_tasks(settings)
    except JobError as err:
        print(f"take_backs: error: {err}", file=sys.stderr)
        return 2
    model = load_model(settings.model)
    print(
        f"take_backs: {len(tasks)} recipes of {settings.data} ({settings.split}), "
        f"{settings.system} from {settings.model}, {settings.candidates} candidates a step",
        flush=True,
    )
    results = {}
    for name, take_backs in (("letters only", 0), ("take back", guarded_row.TAKE_BACKS)):
        results[name] = found = arm(model, settings, tasks, take_backs)
        c = found["counts"]
        steps = max(c["steps"], 1)
        print(
            f"{name:>12} ({take_backs} a candidate): {c['steps']} steps, {c['candidates']} candidates, "
            f"{c['hidden']} with a hidden food ({c['hidden'] / max(c['candidates'], 1):.1%}), "
            f"{c['taken_back']} words taken back, {c['length']} cut by the token budget, {c['guard']} by the guard; "
            f"chosen: {c['chosen_hidden']} with a hidden food, {c['chosen_empty']} empty, "
            f"{c['chosen_words'] / steps:.1f} words and score {c['chosen_score'] / steps:.2f} on average; "
            f"{found['seconds']:.1f}s",
            flush=True,
        )
        hidden = Counter({k[5:]: v for k, v in c.items() if k.startswith("word:")})
        print(f"{'':>14}hidden: {dict(hidden.most_common(8))}", flush=True)
    old, new = results["letters only"], results["take back"]
    print(
        f"take back / letters only: hidden-food candidates {new['counts']['hidden']} / {old['counts']['hidden']}, "
        f"seconds {new['seconds'] / old['seconds']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

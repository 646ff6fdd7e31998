"""Forbidden foods hidden in non-words ("chickenocks"): how many sampled candidates hold one, how
many chosen steps hold one under the selection rules without `no_disguised_food` and with them
(the same candidate pools), and how often the check flags real, human-written recipe lines.

    python benchmarks/disguised_foods.py out/demo/rewrites/grounded_rule_constrained \
        --recipes ../shared/data/web_recipes/recipes.jsonl

Each rewrite folder is a rewrite job's output (`rewrites.jsonl`); the recipe lines are checked
against each constraint alone, without the recipe's own words (the check's worst case). Prints the
chosen steps with a disguised food, without the rule against with it, last.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from rrt.evaluation.rewrite_records import read_records, sampled_steps
from rrt.modelling import selection
from rrt.modelling.selection import StepContext, disguised_foods, select_best
from rrt.recipes.lexicon import CONSTRAINTS
from rrt.recipes.loaders import read_recipes

RULE = "no_disguised_food"


def chosen_indices(texts: list[str], ctx: StepContext) -> tuple[int, int]:
    """The candidate selection keeps without the rule and with it: one scoring, the rule's part of
    each total taken out for the first (ties still to the lowest index)."""
    after, scores = select_best(texts, ctx)
    weight = selection.RULES[RULE][1]
    without = [s["total"] - weight * s[RULE] for s in scores]
    return max(range(len(texts)), key=lambda i: (without[i], -i)), after


def pools(folder: str) -> dict:
    """Counts over every sampled step of one rewrite folder, and a few steps the rule changed."""
    counts = Counter()
    changed = []
    for record, entry, ctx, words in sampled_steps(
        read_records(os.path.join(folder, "rewrites.jsonl"))
    ):
        texts = [c["text"] for c in entry["candidates"]]
        hidden = [bool(w) for w in words]
        before, after = chosen_indices(texts, ctx)
        counts.update(
            steps=1,
            candidates=len(texts),
            disguised=sum(hidden),
            all_disguised=all(hidden),
            chosen_before=hidden[before],
            chosen_after=hidden[after],
        )
        if hidden[before] and not hidden[after] and len(changed) < 4:
            changed.append((record["constraint"], texts[before], texts[after]))
    return {"counts": counts, "changed": changed}


def human_lines(path: str) -> dict:
    """Flags per constraint over every step and ingredient line of real recipes."""
    recipes = list(read_recipes([path]))
    lines = [line for r in recipes for line in [*r.steps, *r.ingredients]]
    flagged = {}
    for constraint in CONSTRAINTS:
        ctx = StepContext([constraint], "", [], frozenset())
        words = Counter(w for line in lines for w in disguised_foods(line, ctx))
        flagged[constraint] = {"flags": sum(words.values()), "words": dict(words.most_common(6))}
    return {"recipes": len(recipes), "lines": len(lines), "flagged": flagged}


def main(argv: list[str] | None = None) -> int:
    """Measure each rewrite folder, then the real recipes; print the comparison last."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "rewrites", nargs="+", help="rewrite job output folders (holding rewrites.jsonl)"
    )
    parser.add_argument(
        "--recipes", help="real recipes (any format rrt reads) to count false flags on"
    )
    args = parser.parse_args(argv)
    missing = [f for f in args.rewrites if not os.path.exists(os.path.join(f, "rewrites.jsonl"))]
    if missing or (args.recipes and not os.path.exists(args.recipes)):
        print(
            f"disguised_foods: error: not found: {', '.join(missing) or args.recipes}",
            file=sys.stderr,
        )
        return 2
    before = after = 0
    for folder in args.rewrites:
        started = time.perf_counter()
        found = pools(folder)
        c = found["counts"]
        before, after = before + c["chosen_before"], after + c["chosen_after"]
        print(
            f"{folder}: {c['steps']} sampled steps, {c['candidates']} candidates, {c['disguised']} with a "
            f"disguised food, {c['all_disguised']} steps with no other; chosen with one: "
            f"{c['chosen_before']} without the rule, {c['chosen_after']} with it "
            f"({time.perf_counter() - started:.1f}s)"
        )
        for constraint, old, new in found["changed"]:
            print(
                f"  [{constraint}] without: {old[:90]!r}\n  {' ' * len(constraint)}    with: {new[:90]!r}"
            )
    if args.recipes:
        human = human_lines(args.recipes)
        print(
            f"real recipe lines flagged ({human['recipes']} recipes, {human['lines']} lines, each constraint alone):"
        )
        for constraint, seen in human["flagged"].items():
            print(f"  {constraint}: {seen['flags']} {seen['words']}")
    print(f"chosen steps with a disguised food: {before} without the rule, {after} with it")
    return 0


if __name__ == "__main__":
    sys.exit(main())

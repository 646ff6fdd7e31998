"""How the guide's titles and ingredient lines read on real recipes, and whether they agree.

    python benchmarks/guide_lines.py
    python benchmarks/guide_lines.py --baseline facdda9^     # the same counts with rrt/ of that commit first

Every real recipe (../shared/data web recipes when present, and data/sample) is rewritten by the
guide (rrt.recipes.substitutions) for each constraint it breaks. Per constraint, a JSON line
counts the rewrites, the ingredient lines they change, the changed lines with two diet words on
one food ("dairy-free cheddar vegan cheese") or a word twice in a row that the source line lacks,
the titles naming a food no rewritten ingredient line holds ("Cheesy Seitan Tacos" over
"plant-based ground meat"), the rewrites the tagger calls valid (testing.guide_reading says
what each check is), and whether the rewrite stays the recipe (rrt.evaluation.grounding, where
the library has it): the rewritten steps naming a food neither the rewritten lines nor the
source hold ("Coconut cream the butter"), and the rewrites whose title or steps name a new food
their lines lack (a step's "seitan" over a line's "plant-based ground meat"). With --baseline, the library of that commit is measured the same way in a
child process, and the last line is the ratio after/before of the faults.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.append(ROOT)  # after any library a --baseline run puts first

from rrt.recipes.lexicon import CONSTRAINTS
from rrt.recipes.tagger import tag_recipe
from testing.guide_reading import (
    guide_rewrites,
    repeated_words,
    stacked_diet_words,
    title_foods_missing,
)
from testing.shared_data import SHARED

FAULTS = (
    "stacked_lines",
    "repeated_lines",
    "titles_disagreeing",
    "invented_steps",
    "inconsistent_rewrites",
)


def corpus_paths() -> list[str]:
    """The real web recipes when the shared data holds them, and the bundled sample."""
    web = os.path.join(SHARED, "web_recipes", "recipes.jsonl")
    return [
        p for p in (web, os.path.join(ROOT, "data", "sample", "recipes.jsonl")) if os.path.exists(p)
    ]


def measure(paths: list[str]) -> dict[str, Counter]:
    """Per constraint: rewrites, changed lines, lines with stacked diet words or a word said twice,
    titles that disagree with their lines, and valid rewrites."""
    try:
        from rrt.evaluation.grounding import grounding_counts
    except ImportError:  # a --baseline library from before the grounding measures
        grounding_counts = None
    counts = {c: Counter() for c in CONSTRAINTS}
    for source, constraint, result in guide_rewrites(paths):
        row = counts[constraint]
        row["rewrites"] += 1
        for old, new in zip(source.ingredients, result.recipe.ingredients):
            if old != new:
                row["changed_lines"] += 1
                row["stacked_lines"] += bool(stacked_diet_words(new))
                row["repeated_lines"] += bool(repeated_words(new)) and not repeated_words(old)
        row["titles_disagreeing"] += bool(
            title_foods_missing(source.title, result.recipe.title, result.recipe.ingredients)
        )
        row["valid"] += tag_recipe(result.recipe, [constraint]).valid[constraint]
        if grounding_counts is not None:
            grounded = grounding_counts(
                {
                    "source": {
                        "title": source.title,
                        "ingredients": list(source.ingredients),
                        "steps": list(source.steps),
                    },
                    "rewrite": {
                        "title": result.recipe.title,
                        "ingredients": list(result.recipe.ingredients),
                        "steps": list(result.recipe.steps),
                    },
                }
            )
            row["steps"] += grounded["steps"]
            row["invented_steps"] += grounded["invented_steps"]
            row["inconsistent_rewrites"] += not grounded["consistent"]
    return counts


def baseline_counts(revision: str, paths: list[str]) -> dict[str, dict]:
    """The counts of rrt/ at a git revision, measured in a child process that imports it first."""
    with tempfile.TemporaryDirectory() as folder:
        archive = subprocess.run(
            ["git", "-C", ROOT, "archive", revision, "rrt"], check=True, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
        env = {**os.environ, "PYTHONPATH": folder}
        done = subprocess.run(
            [sys.executable, __file__, "--json", "--input", *paths],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
    return json.loads(done.stdout)


def main() -> None:
    """Print a JSON line per constraint and the totals; with --baseline, both sides and the ratio last."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", help="a git revision whose rrt/ is measured as 'before'")
    parser.add_argument(
        "--input", nargs="+", default=None, help="recipe files (default: the real recipes)"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the counts as one JSON object only"
    )
    args = parser.parse_args()
    paths = args.input or corpus_paths()
    after = {c: dict(row) for c, row in measure(paths).items()}
    if args.json:
        print(json.dumps(after))
        return
    sides = {"after": after}
    if args.baseline:
        sides = {"before": baseline_counts(args.baseline, paths), "after": after}
    totals = {}
    for side, counts in sides.items():
        for constraint, row in counts.items():
            print(json.dumps({"side": side, "constraint": constraint, **row}))
        keys = dict.fromkeys(k for row in counts.values() for k in row)
        totals[side] = {k: sum(row.get(k, 0) for row in counts.values()) for k in keys}
        print(json.dumps({"side": side, "constraint": "all", **totals[side]}))
    if args.baseline:
        faults = {side: sum(totals[side].get(k, 0) for k in FAULTS) for side in sides}
        print(
            json.dumps(
                {
                    "faults_before": faults["before"],
                    "faults_after": faults["after"],
                    "ratio_after_before": round(faults["after"] / max(faults["before"], 1), 4),
                }
            )
        )


if __name__ == "__main__":
    main()

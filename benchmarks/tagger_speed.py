"""Dietary tagger speed: time per mention on steps of 50 and of 4,000 mentions, ratio last.

    python benchmarks/tagger_speed.py
    python benchmarks/tagger_speed.py --mentions 50 400 32000 --repeats 3

A step like "milk/milk/.../milk" (400 mentions in 2,000 characters, within the API's limits)
is the worst case for a tagger that reads back from each mention to the start of its line or
compares every mention with every other: its time per mention grows with the mentions. A
linear tagger spends the same time per mention at 50 as at 4,000. The second kind of step,
"coconut milk coconut milk ...", is all matches inside allowed phrases: a tagger that tests
each match against every allowed phrase's span is quadratic there. Also prints how long the
real recipes take (../shared/data web recipes when present, else data/sample), so a change
for the odd case can be checked against the usual one.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from rrt.recipes.loaders import read_recipes
from rrt.recipes.recipe import Recipe
from rrt.recipes.tagger import parse_constraints, tag_recipe
from testing.shared_data import web_recipes_or_sample


def odd_step(mentions: int) -> str:
    """One step naming milk `mentions` times, separated by slashes (offered alternatives)."""
    return "milk/" * (mentions - 1) + "milk"


def phrase_step(mentions: int) -> str:
    """One step of `mentions` allowed phrases that each hold a food word ("coconut milk")."""
    return " ".join(["coconut milk"] * mentions)


KINDS = {"slashes": odd_step, "allowed phrases": phrase_step}


def best_time(recipe: Recipe, constraints: list[str], repeats: int) -> float:
    """The fastest of `repeats` taggings of one recipe, in seconds."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        tag_recipe(recipe, constraints)
        times.append(time.perf_counter() - started)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    """Time the odd steps and the real corpus; print the per-mention ratio last."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--mentions", type=int, nargs="+", default=[50, 400, 4000], help="mentions per step"
    )
    parser.add_argument(
        "--repeats", type=int, default=5, help="timings per size (the fastest counts)"
    )
    args = parser.parse_args(argv)
    if len(args.mentions) < 2 or min(args.mentions) < 1:
        parser.error("give at least two sizes, each at least 1")
    constraints = parse_constraints("all")
    tag_recipe(Recipe("warm-up", "Toast", ["1 tbsp butter"], ["Toast the bread."]), constraints)
    corpus = web_recipes_or_sample()
    recipes = list(read_recipes([corpus]))
    started = time.perf_counter()
    for recipe in recipes:
        tag_recipe(recipe, constraints)
    seconds = time.perf_counter() - started
    print(
        f"real recipes ({os.path.relpath(corpus, ROOT)}): {len(recipes)} in {seconds:.2f}s, "
        f"{1000 * seconds / max(1, len(recipes)):.2f} ms per recipe"
    )
    ratios = {}
    for kind, make in KINDS.items():
        per_mention = {}
        for n in args.mentions:
            step = make(n)
            took = best_time(
                Recipe("odd", "Soup", ["1 cup water"], [step]), constraints, args.repeats
            )
            per_mention[n] = took / n
            print(
                f"{kind:>15}, {n:>6} mentions ({len(step):>7} characters): {1000 * took:9.2f} ms, "
                f"{1e6 * per_mention[n]:7.1f} us per mention"
            )
        small, large = min(args.mentions), max(args.mentions)
        ratios[kind] = per_mention[large] / per_mention[small]
    print(
        "time per mention, "
        + ", ".join(f"{kind} {r:.2f}" for kind, r in ratios.items())
        + f" ({max(args.mentions)} / {min(args.mentions)} mentions); worst: {max(ratios.values()):.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

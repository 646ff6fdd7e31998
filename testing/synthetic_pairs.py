"""Synthetic recipe pairs with known step links, for checking the aligner.

A recipe is rewritten by the substitution guide, then its steps are perturbed the way
real versions of a dish differ: two neighbours merged, one step split at a sentence
boundary, two neighbours swapped. The true links say which source step each target
step came from.
"""

from __future__ import annotations

import random
import re

from rrt.recipes.recipe import Recipe
from rrt.recipes.substitutions import substitute_recipe


def perturbed_pair(
    recipe: Recipe, constraint: str, seed: int
) -> tuple[list[str], list[str], list[set[int]]]:
    """(source steps, target steps, true source steps of each target step)."""
    rng = random.Random(seed)
    target = substitute_recipe(recipe, constraint).recipe.steps
    steps = [(text, {i}) for i, text in enumerate(target)]
    action = rng.choice(["merge", "split", "swap"])
    if action == "merge" and len(steps) >= 3:
        k = rng.randrange(len(steps) - 1)
        steps[k : k + 2] = [(f"{steps[k][0]} {steps[k + 1][0]}", steps[k][1] | steps[k + 1][1])]
    elif action == "split":
        splittable = [
            k for k, (text, _) in enumerate(steps) if len(re.split(r"(?<=[.!?])\s+", text)) > 1
        ]
        if splittable:
            k = rng.choice(splittable)
            first, rest = re.split(r"(?<=[.!?])\s+", steps[k][0], maxsplit=1)
            steps[k : k + 1] = [(first, steps[k][1]), (rest, steps[k][1])]
    elif action == "swap" and len(steps) >= 3:
        k = rng.randrange(len(steps) - 1)
        steps[k], steps[k + 1] = steps[k + 1], steps[k]
    return list(recipe.steps), [t for t, _ in steps], [links for _, links in steps]


def link_accuracy(scores, truth: list[set[int]]) -> tuple[int, int]:
    """(target steps whose best source step is a true one, target steps)."""
    best = scores.argmax(axis=0)
    return sum(int(best[j]) in truth[j] for j in range(len(truth))), len(truth)

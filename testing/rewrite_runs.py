"""Rewrite runs written offline from the bundled sample, in jobs/rewrite.py's record shape: what the
human-study tests judge. No model: each system is the substitution guide, a cut of it, or the source.

    guide   the guide's rewrite (fits the constraint almost always)
    short   the guide's rewrite without its last step
    copy    the source unchanged (breaks the constraint)
"""

from __future__ import annotations

import json
import os

from rrt.recipes.lexicon import CONSTRAINTS
from rrt.recipes.loaders import read_recipes
from rrt.recipes.substitutions import substitute_recipe
from rrt.recipes.tagger import tag_recipe

SYSTEMS = ("guide", "short", "copy")


def _rewrite(system: str, recipe, result) -> tuple[dict, list[dict]]:
    """One system's rewrite from the guide's result."""
    if system == "copy":
        return {
            "title": recipe.title,
            "ingredients": list(recipe.ingredients),
            "steps": list(recipe.steps),
        }, []
    out = {
        "title": result.recipe.title,
        "ingredients": list(result.recipe.ingredients),
        "steps": list(result.recipe.steps),
    }
    if system == "short" and len(out["steps"]) > 1:
        out["steps"] = out["steps"][:-1]
    return out, [s.to_dict() for s in result.substitutions]


def write_runs(sample_path: str, folder: str, systems=SYSTEMS) -> dict[str, str]:
    """One rewrite folder per system (rewrites.jsonl + run.json): every sample recipe for each
    constraint it breaks. The folder of each system."""
    guided = []
    for recipe in read_recipes([sample_path]):
        tags = tag_recipe(recipe, CONSTRAINTS)
        source = {
            "id": recipe.id,
            "title": recipe.title,
            "ingredients": list(recipe.ingredients),
            "steps": list(recipe.steps),
        }
        guided += [
            (recipe, source, c, substitute_recipe(recipe, [c]))
            for c in CONSTRAINTS
            if not tags.valid[c]
        ]
    out = {}
    for system in systems:
        path = os.path.join(folder, system)
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "rewrites.jsonl"), "w", encoding="utf-8") as handle:
            for recipe, source, constraint, result in guided:
                rewrite, substitutions = _rewrite(system, recipe, result)
                handle.write(
                    json.dumps(
                        {
                            "id": recipe.id,
                            "constraint": constraint,
                            "system": system,
                            "constrained": False,
                            "source": source,
                            "rewrite": rewrite,
                            "steps": [],
                            "substitutions": substitutions,
                            "notes": [],
                        }
                    )
                    + "\n"
                )
        with open(os.path.join(path, "run.json"), "w", encoding="utf-8") as handle:
            json.dump(
                {"settings": {"system": system, "constrained": False, "split": "test"}}, handle
            )
        out[system] = path
    return out

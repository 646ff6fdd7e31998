"""Where the dish, not the food, decides the stand-in. Flax eggs bind a batter but never set in a
pan, so eggs that a recipe scrambles become crumbled firm tofu, a tofu scramble, in its title,
lines and steps; the guide's other swaps stay as they are:

    tofu_scramble(source, {"ingredients": ["8 flax eggs (8 tablespoons ...)"], ...}, subs)
        -> ({"ingredients": ["16 ounces firm tofu, crumbled"], ...}, subs with tofu)
"""

from __future__ import annotations

import re

from rrt.recipes.substitutions import FLAX_EGG

SCRAMBLED = re.compile(r"\bscrambl(?:e|ed|es|ing)\b", re.IGNORECASE)
EGGS = re.compile(r"\beggs?\b", re.IGNORECASE)
# A step that bakes or binds with its eggs keeps the flax eggs: the dish is no scramble.
BINDS = re.compile(
    r"\b(?:bake[sd]?|baking|oven|batter|dough|muffin|cake|bread|fold|dredge|dip|coat|bind)\w*\b",
    re.IGNORECASE,
)
# "8 flax eggs (8 tablespoons ground flaxseed + 24 tablespoons water)"
FLAX_LINE = re.compile(
    r"(?:(\d+)\s+)?flax\s+eggs?(?:\s*\([^)]*flaxseed[^)]*\))?(?:\s*\((?:beaten|whisked)\))?",
    re.IGNORECASE,
)
FLAX_WORDS = re.compile(r"\bflax\s+eggs?\b", re.IGNORECASE)
# A title's "Vegan Scrambled Eggs", which the guide keeps as a named diet.
SCRAMBLED_EGGS = re.compile(r"\b(?:(?:vegan|egg-free)\s+)?scrambled\s+eggs?\b", re.IGNORECASE)
# Crumbled firm tofu a large egg stands for, in ounces.
OUNCES_AN_EGG = 2


def scrambles_its_eggs(steps: list[str]) -> bool:
    """Whether a recipe's eggs are a scramble: a step scrambles them and no step that names eggs
    bakes or binds with them."""
    named = [s for s in steps if EGGS.search(s)]
    return any(SCRAMBLED.search(s) for s in steps) and not any(BINDS.search(s) for s in named)


def _line(match: re.Match) -> str:
    eggs = int(match.group(1) or 1)
    return f"{eggs * OUNCES_AN_EGG} ounces firm tofu, crumbled"


def _steps_name(text: str) -> str:
    return FLAX_WORDS.sub(lambda m: "Tofu" if m.group(0)[0].isupper() else "tofu", text)


def tofu_scramble(source: dict, rewritten: dict, subs: list[dict]) -> tuple[dict, list[dict]]:
    """The guide's rewrite with the flax eggs of a scrambled-egg dish made crumbled firm tofu."""
    if not scrambles_its_eggs(source["steps"]) or not any(
        FLAX_EGG in s["replacement"].lower() for s in subs
    ):
        return rewritten, subs
    new = {
        "title": SCRAMBLED_EGGS.sub("Scrambled Tofu", FLAX_WORDS.sub("Tofu", rewritten["title"])),
        "ingredients": [FLAX_LINE.sub(_line, line) for line in rewritten["ingredients"]],
        "steps": [_steps_name(step) for step in rewritten["steps"]],
    }
    changed = []
    for sub in subs:
        if FLAX_EGG not in sub["replacement"].lower():
            changed.append(sub)
        elif sub["field"] == "ingredients":
            changed.append({**sub, "replacement": "firm tofu"})
        else:
            changed.append({**sub, "replacement": _steps_name(sub["replacement"])})
    return {**rewritten, **new}, changed

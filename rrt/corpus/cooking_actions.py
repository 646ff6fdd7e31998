"""What a recipe step does, as coarse kinds of work: two steps that whisk the dry ingredients
do the same job though one names "the dry ingredients" and the other "flour, baking powder,
salt". The step aligner compares these kinds where shared words fail."""

from __future__ import annotations

import re

from rrt.recipes.foods import mentions

# Each kind lists the words (verbs in their plain form, a few tools and places) that show it.
KINDS: dict[str, tuple[str, ...]] = {
    "preheat": ("preheat",),
    "prepare_pan": ("line", "grease", "parchment", "liner", "spray"),
    "mix": (
        "whisk",
        "stir",
        "combine",
        "mix",
        "beat",
        "cream",
        "fold",
        "toss",
        "blend",
        "pulse",
        "incorporate",
        "sift",
        "sieve",
        "mash",
        "knead",
        "puree",
        "process",
    ),
    "stovetop": (
        "saute",
        "sauté",
        "fry",
        "brown",
        "sear",
        "simmer",
        "boil",
        "melt",
        "skillet",
        "saucepan",
        "pot",
        "stovetop",
        "wok",
    ),
    "oven": ("bake", "roast", "broil", "oven"),
    "grill": ("grill", "barbecue", "bbq"),
    "rest": ("cool", "rest", "chill", "refrigerate", "freeze", "cover", "marinate", "soak"),
    "shape": (
        "scoop",
        "roll",
        "shape",
        "divide",
        "form",
        "press",
        "pipe",
        "fill",
        "spread",
        "pour",
        "transfer",
        "arrange",
        "layer",
        "dollop",
        "spoon",
        "assemble",
        "wrap",
        "stuff",
    ),
    "cut": (
        "chop",
        "slice",
        "dice",
        "cut",
        "mince",
        "carve",
        "peel",
        "grate",
        "halve",
        "trim",
        "core",
    ),
    "serve": (
        "serve",
        "garnish",
        "enjoy",
        "plate",
        "drizzle",
        "sprinkle",
        "top",
        "decorate",
        "dust",
    ),
    "season": ("season", "taste", "adjust"),
    "drain": ("drain", "rinse", "strain", "pat"),
    "dry_ingredients": (
        "flour",
        "powder",
        "soda",
        "cornstarch",
        "cocoa",
        "oat",
        "cinnamon",
        "salt",
    ),
    "wet_ingredients": ("milk", "egg", "buttermilk", "yogurt", "vanilla", "oil", "water"),
}
# Names whose words would show the wrong kind: baking powder is not baking, brown sugar not browning.
_NAMES = re.compile(
    r"\bbaking (?=powder|soda|dish|sheet|pan|tray|paper)|\bbrown(?= sugar)|(?<=golden )brown|\bcream(?= cheese)"
)
_GROUP_NAME = re.compile(r"\b(dry|wet) ingredients?\b")
_WORD = re.compile(r"[a-zé]+")
_SUFFIXES = ("ing", "ed", "es", "s")
_KIND_OF = {word: kind for kind, words in KINDS.items() for word in words}


def _plain(word: str) -> str | None:
    """The listed form of a word, trying it bare and without a common verb or plural ending."""
    if word in _KIND_OF:
        return word
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) > len(suffix) + 2:
            stem = word[: -len(suffix)]
            for candidate in (
                stem,
                stem + "e",
                stem[:-1] if len(stem) > 2 and stem[-1] == stem[-2] else stem,
            ):
                if candidate in _KIND_OF:
                    return candidate
    return None


def step_actions(step: str) -> frozenset[str]:
    """The kinds of work a step's words show (KINDS); ingredient groups count from two members
    or from the group's own name ("the dry ingredients")."""
    text = _NAMES.sub("", step.lower())
    counts = {f"{group}_ingredients": 2 for group in _GROUP_NAME.findall(text)}
    for word in _WORD.findall(text):
        plain = _plain(word)
        if plain:
            counts[_KIND_OF[plain]] = counts.get(_KIND_OF[plain], 0) + 1
    return frozenset(
        kind for kind, n in counts.items() if n >= (2 if kind.endswith("_ingredients") else 1)
    )


def action_overlap(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard overlap of two steps' kinds of work, or of their stages (0 when either shows none)."""
    return len(a & b) / len(a | b) if a and b else 0.0


# Where in a recipe's course a step sits: heating the oven, baking, cooling or resting, serving,
# handling the dry or the wet ingredients. A step may sit in several. These words match whole, in
# a few listed forms, and one named ingredient is enough (`step_actions` wants two of a group).
STAGES: dict[str, re.Pattern] = {
    name: re.compile(rf"\b(?:{words})\b")
    for name, words in {
        "heat_oven": r"preheat\w*|oven to|heat (?:the )?oven|degrees",
        "bake": r"bake[ds]?|baking(?! (?:powder|soda))|roast\w*",
        "cool": r"cool(?:ed|ing|s)?|chill(?:ed|ing|s)?|refrigerat\w*|rest(?:ing|s)?|set aside",
        "serve": r"serv(?:e|ed|es|ing)|garnish\w*|enjoy|slice[sd]?|slicing|cut into",
        "dry_ingredients": r"flour|baking soda|baking powder|dry ingredients",
        "wet_ingredients": r"eggs?|milk|butter|oil|wet ingredients",
    }.items()
}


def step_stages(step: str) -> frozenset[str]:
    """The stages of a recipe's course a step's words show (STAGES)."""
    text = step.lower()
    return frozenset(name for name, pattern in STAGES.items() if pattern.search(text))


# Ingredient groups show what a step handles, not the work it does.
_GROUPS = frozenset({"dry_ingredients", "wet_ingredients"})


def work_kinds(step: str) -> frozenset[str]:
    """The kinds of work a step does (`step_actions` without the ingredient groups); the words of a food
    named in several words are not work ("sour cream", "ice cream", "top sirloin")."""
    for mention in reversed([m for m in mentions(step) if len(m.words) > 1]):
        step = step[: mention.start] + " " + step[mention.end :]
    return step_actions(step) - _GROUPS


def same_job(rewritten: str, source: str) -> bool:
    """Whether a rewritten step does its source step's kind of work: they share a kind, or neither shows one."""
    mine, theirs = work_kinds(rewritten), work_kinds(source)
    return bool(mine & theirs) if theirs else not mine

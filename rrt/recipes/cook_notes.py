"""Cues and method notes that follow from a swap: what a cook changes in a step besides the food.

The guide swaps foods; a cook also changes what the swap makes untrue. Plant-based meat leaves no
fat to drain and is never pink; tofu in place of fish turns golden, not flaky; tofu in place of
meat is pressed first; flax eggs stand to thicken. Each rule is a row of a table: the kind of
swap it follows (`SWAP_KINDS`, told from the swapped food's category and its stand-in's words), a
pattern in the step, and what the pattern becomes; notes are rows too, said once a recipe:

    adapt_step("Brown the beef; drain off the fat.", "Brown the seitan; drain off the fat.",
               substitutions, ["vegan"])  -> ("Brown the seitan.", [])
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rrt.recipes.substitutions import Substitution
from rrt.recipes.tagger import scan_text


@dataclass(frozen=True)
class SwapKind:
    """A kind of swap: the food category it replaces and words one of which its stand-in holds."""

    category: str
    stand_in_words: tuple[str, ...]


PLANT_WORDS = (
    "plant-based",
    "seitan",
    "tofu",
    "tempeh",
    "jackfruit",
    "imitation",
    "vegan",
    "vegetarian",
    "meatless",
    "lentils",
    "mushrooms",
)
SWAP_KINDS = {
    "plant_meat": SwapKind("meat", PLANT_WORDS),
    "tofu_for_meat": SwapKind("meat", ("tofu",)),
    "tofu_for_fish": SwapKind("fish", ("tofu",)),
    "flax_egg": SwapKind("egg", ("flax egg", "flax eggs")),
}
# Stand-ins that are no pieces of meat: a broth or a fat has no fat to drain nor pink to lose.
NOT_PIECES = ("broth", "stock", "bouillon", "oil", "shortening", "smoked tofu")


@dataclass(frozen=True)
class Cue:
    """A pattern in a step that a kind of swap makes untrue, and what it becomes ("" drops it).
    `anywhere`: the cue speaks of the swapped food even in a step that does not name it
    ("Cook until no longer pink.")."""

    kind: str
    pattern: str
    becomes: str
    anywhere: bool = False


_FAT = r"(?:off\s+|away\s+)?(?:any\s+|the\s+|all\s+|excess\s+|the\s+excess\s+)?(?:fat|grease|drippings)"
CUES = (
    # "Brown the beef; drain off the fat." / "..., then drain the grease from the pan"
    Cue(
        "plant_meat",
        r"\s*[,;]?\s*(?:and\s+|then\s+)+drain(?:ing)?\s+" + _FAT + r"(?:\s+from\s+the\s+\w+)?",
        "",
        anywhere=True,
    ),
    Cue(
        "plant_meat",
        r"\s*[,;]\s*drain(?:ing)?\s+" + _FAT + r"(?:\s+from\s+the\s+\w+)?",
        "",
        anywhere=True,
    ),
    # "Drain the fat and add the onions." -> "Add the onions."
    Cue(
        "plant_meat",
        r"(?:(?<=^)|(?<=[.!?]\s))drain\s+"
        + _FAT
        + r"(?:\s+from\s+the\s+\w+)?\s*(?:,\s*)?(?:and|then)\s+",
        "",
        anywhere=True,
    ),
    # A step that only drains the fat.
    Cue(
        "plant_meat",
        r"(?:(?<=^)|(?<=[.!?]\s))drain\s+" + _FAT + r"(?:\s+from\s+the\s+\w+)?\s*[.!]",
        "No fat to drain.",
        anywhere=True,
    ),
    Cue(
        "plant_meat",
        r"until\s+(?:it\s+is\s+|they\s+are\s+)?no\s+longer\s+pink(?:\s+inside|\s+in\s+the\s+(?:center|middle))?",
        "until heated through and browned",
        anywhere=True,
    ),
    Cue(
        "plant_meat",
        r"until\s+(?:the\s+)?juices\s+run\s+clear",
        "until heated through and browned",
        anywhere=True,
    ),
    Cue(
        "plant_meat",
        r"until\s+(?:it\s+is\s+|they\s+are\s+)?cooked\s+through",
        "until heated through and browned",
    ),
    # Flax eggs are mixed, not cracked: "Crack the eggs into the bowl" -> "Add the flax eggs ...".
    Cue("flax_egg", r"\bcrack(?=\s+(?:in\s+)?(?:the\s+|\d+\s+)*flax\s+egg)", "add"),
    Cue(
        "tofu_for_fish",
        r"until\s+(?:crisp\s+and\s+flaky|flaky|opaque(?:\s+throughout)?|"
        r"(?:it|the\s+\w+)\s+flakes(?:\s+easily)?(?:\s+with\s+a\s+fork)?)",
        "until golden",
        anywhere=True,
    ),
)


@dataclass(frozen=True)
class Note:
    """A short method note a kind of swap calls for, said once a recipe where a step names it."""

    kind: str
    text: str
    before: bool = False  # said before its step ("... first."), not after it


NOTES = (
    Note("tofu_for_meat", "Press the tofu for 15 minutes first.", before=True),
    # Said before the step that first uses them: a flax egg is made and thickened before it goes in.
    Note(
        "flax_egg",
        "Stir the ground flaxseed into the water and let it stand 5 minutes to thicken.",
        before=True,
    ),
)
_BEFORE = frozenset(n.text for n in NOTES if n.before)


def place_notes(step: str, notes: list[str]) -> str:
    """A step with its notes as sentences of their own: a note of what to do first before it,
    the others after it."""
    before = [n for n in notes if n in _BEFORE]
    return " ".join([*before, step, *(n for n in notes if n not in _BEFORE)])


_COMPILED = tuple((cue, re.compile(cue.pattern, re.IGNORECASE)) for cue in CUES)


def _swap_words(sub: Substitution | Mapping) -> tuple[str, str, str]:
    if isinstance(sub, Mapping):
        return sub["original"], sub["replacement"], sub.get("constraint", "")
    return sub.from_text, sub.to_text, sub.constraint


def _words(words: Iterable[str]) -> re.Pattern:
    return re.compile(
        r"\b(?:" + "|".join(sorted(map(re.escape, words), key=len, reverse=True)) + r")\b",
        re.IGNORECASE,
    )


_STAND_INS = {name: _words(kind.stand_in_words) for name, kind in SWAP_KINDS.items()}


def swap_kinds(original: str, replacement: str) -> dict[str, list[str]]:
    """The kinds of swap one substitution is, each with the swapped food's words ("ground beef" ->
    "plant-based ground meat": plant_meat, ["ground beef"])."""
    if any(word in replacement.lower() for word in NOT_PIECES):
        return {}
    kinds = {}
    for name, kind in SWAP_KINDS.items():
        foods = [original[m.start : m.end] for m in scan_text(original, kind.category)]
        if foods and _STAND_INS[name].search(replacement):
            kinds[name] = foods
    return kinds


def _tidy(step: str) -> str:
    step = re.sub(r"\s+([.,;!?])", r"\1", re.sub(r"\s{2,}", " ", step)).strip()
    step = re.sub(r"([,;])\s*([.!?])", r"\2", step)
    # A sentence whose opening words went starts with a capital.
    return re.sub(r"(^|[.!?]\s+)([a-z])", lambda m: m.group(1) + m.group(2).upper(), step)


def adapt_step(
    source_step: str,
    guided_step: str,
    substitutions: Iterable[Substitution | Mapping],
    constraints: Iterable[str],
    said: set[str] | None = None,
) -> tuple[str, list[str]]:
    """The guide's step with the cues its recipe's swaps make untrue rewritten, and the notes it
    calls for; notes in `said` are not said again, and those returned are added to it."""
    wanted = set(constraints)
    named: dict[str, bool] = {}
    shown: set[str] = set()  # kinds whose stand-in the step names: a note is said there
    for sub in substitutions:
        original, replacement, constraint = _swap_words(sub)
        if constraint and wanted and constraint not in wanted:
            continue
        for kind, foods in swap_kinds(original, replacement).items():
            if _STAND_INS[kind].search(guided_step):
                shown.add(kind)
            here = kind in shown or bool(_words(foods).search(source_step))
            named[kind] = named.get(kind, False) or here
    step = guided_step
    for cue, pattern in _COMPILED:
        if cue.kind in named and (cue.anywhere or named[cue.kind]):
            step = pattern.sub(cue.becomes, step)
    step = _tidy(step) if step != guided_step else step
    said = set() if said is None else said
    notes = [n.text for n in NOTES if n.kind in shown and n.text not in said]
    said.update(notes)
    return step, notes


def adapt_steps(
    source_steps: list[str],
    guided_steps: list[str],
    substitutions: Iterable[Substitution | Mapping],
    constraints: Iterable[str],
) -> list[tuple[str, list[str]]]:
    """`adapt_step` over a recipe's steps in order, each note said once."""
    subs, wanted, said = list(substitutions), list(constraints), set()
    return [
        adapt_step(source, guided, subs, wanted, said)
        for source, guided in zip(source_steps, guided_steps, strict=True)
    ]

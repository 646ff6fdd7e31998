"""What a cook changes in an ingredient line besides the food: the words of the swapped food that
its stand-in makes untrue. Tofu is not thawed, peeled or deveined, has no skin or bones and comes
in blocks; chicken in place of shrimp is not deveined. A row of `LINE_CUES` drops such words from
a line that holds a swap of its kind (rrt.recipes.cook_notes' kinds):

    adapt_lines(["4 ounces tofu, thawed, peeled, deveined and cut into chunks"], subs, ["vegan"])
        -> ["4 ounces tofu, cut into chunks"]
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rrt.recipes.cook_notes import swap_fields, swap_kinds
from rrt.recipes.substitutions import Substitution

PLANT_KINDS = ("plant_meat", "tofu_for_meat", "plant_for_fish", "tofu_for_fish")
FISH_KINDS = ("plant_for_fish", "tofu_for_fish", "chicken_for_fish")
# Words of a fish or shellfish that no stand-in keeps, and of any meat or fish that a plant lacks.
FISH_WORDS = (
    r"deveined|peeled|tails?[-\s](?:on|off|removed)|pin\s*bones\s+removed|shelled|"
    r"shells?\s+removed|scaled|gutted|cleaned\s+and\s+gutted"
)
MEAT_WORDS = (
    r"skin(?:less|\s+removed|[-\s]on)|bone(?:less|[-\s]in)|boned|split|trimmed(?:\s+of\s+fat)?|"
    r"thawed(?:\s+if\s+frozen)?|patted\s+dry"
)
# Words before a food that a plant stand-in makes untrue ("lump hearts of palm", "split tofu").
BEFORE_WORDS = (
    r"boneless|skinless|bone-in|skin-on|split|lump|jumbo|colossal|raw|wild[-\s]caught|"
    r"deveined|peeled|lean|extra[-\s]lean|fatty|rotisserie"
)
# Plant stand-ins that come in blocks, not tins.
BLOCK_FOODS = ("tofu", "tempeh", "seitan")
# A chicken breast is about half of a 14-ounce block of tofu.
BLOCKS_PER_PIECE = 8 / 14


@dataclass(frozen=True)
class LineCue:
    """Words after the food that a kind of swap makes untrue, as a pattern of alternatives."""

    kinds: tuple[str, ...]
    words: str


LINE_CUES = (
    LineCue(FISH_KINDS, FISH_WORDS),
    LineCue(PLANT_KINDS, MEAT_WORDS),
)


def _after(words: str) -> re.Pattern:
    # ", thawed", " (skin removed)", ", deveined and" (its "and" becomes a comma before "cut ...")
    return re.compile(
        r"\s*,?\s*\(?\b(?:" + words + r")\b\)?(\s+and(?=\s+\w))?",
        re.IGNORECASE,
    )


_COMPILED = tuple((cue, _after(cue.words)) for cue in LINE_CUES)


def _blocks(match: re.Match) -> str:
    count = {"a": 1, "an": 1, "one": 1}.get(match.group(2).lower()) or int(match.group(2))
    blocks = max(1, math.ceil(count * BLOCKS_PER_PIECE - 1e-9))
    return f"{match.group(1)}{blocks} (14-ounce) block{'s' if blocks > 1 else ''} firm {match.group(3)}"


def _tidy(line: str) -> str:
    line = re.sub(r"\(\s*\)", "", line)
    line = re.sub(r"\s+([,)])", r"\1", re.sub(r"\s{2,}", " ", line))
    line = re.sub(r",\s*,", ",", line)
    return re.sub(r"[\s,]+$", "", line)


def adapt_line(line: str, kinds: Iterable[str], stand_in: str) -> str:
    """An ingredient line without the words of its swapped food that swaps of `kinds` (to
    `stand_in`) make untrue."""
    kinds = set(kinds)
    new = line
    for cue, pattern in _COMPILED:
        if kinds & set(cue.kinds):
            new = pattern.sub(lambda m: "," if m.group(1) else "", new)
    plant = kinds & set(PLANT_KINDS)
    if plant and stand_in:
        before = BEFORE_WORDS + ("|canned|tinned" if stand_in in BLOCK_FOODS else "")
        new = re.sub(
            r"\b(?:(?:" + before + r"),?\s+)+(?=" + re.escape(stand_in) + r"\b)",
            "",
            new,
            flags=re.IGNORECASE,
        )
        said = re.escape(stand_in)
        # "2 lbs seitan (or seitan)", the two meats it stands for; "(we use rotisserie tofu)".
        new = re.sub(
            r"(?<=\b" + said + r"\b)(.*?)\s*\(?\s*\bor\s+" + said + r"\b\s*\)?",
            r"\1",
            new,
            flags=re.IGNORECASE,
        )
        new = re.sub(
            r"\s*\((?:we|i)\s+(?:use|used|like)\b[^)]*\b" + said + r"\b[^)]*\)",
            "",
            new,
            flags=re.IGNORECASE,
        )
        if stand_in in BLOCK_FOODS:
            # "1 tofu" (for "1 split chicken breast"): blocks a cook can buy.
            new = re.sub(
                r"^(\s*)(\d+|a|an|one)\s+(" + re.escape(stand_in) + r")\b(?!\s*\()",
                _blocks,
                new,
                flags=re.IGNORECASE,
            )
    return _tidy(new) if new != line else line


def adapt_lines(
    lines: list[str], substitutions: Iterable[Substitution | Mapping], constraints: Iterable[str]
) -> list[str]:
    """The guide's ingredient lines, each without the words its swaps make untrue."""
    wanted = set(constraints)
    kinds: dict[int, set[str]] = {}
    stand_in: dict[int, str] = {}
    for sub in substitutions:
        original, replacement, constraint, field, index = swap_fields(sub)
        if field != "ingredients" or (constraint and wanted and constraint not in wanted):
            continue
        found = swap_kinds(original, replacement)
        if found:
            kinds.setdefault(index, set()).update(found)
            stand_in[index] = replacement.lower()
    return [
        adapt_line(line, kinds[k], stand_in[k]) if k in kinds else line
        for k, line in enumerate(lines)
    ]

"""Ingredient matcher: ingredient line → ingredient name, and step → ingredients it mentions.

Names drop quantities, fractions, units, parentheticals, sizes and preparation words
("1/2 cup (2 3/8 ounces) all-purpose flour" → "all-purpose flour"). A step mentions an
ingredient when they share an n-gram of content words; each span of the step goes to
the ingredient with the longest match there (the paper's method), in order of appearance.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

UNITS = {
    "cup",
    "cups",
    "c",
    "tablespoon",
    "tablespoons",
    "tbsp",
    "tbs",
    "tbl",
    "tb",
    "teaspoon",
    "teaspoons",
    "tsp",
    "t",
    "ounce",
    "ounces",
    "oz",
    "fl",
    "fluid",
    "pound",
    "pounds",
    "lb",
    "lbs",
    "gram",
    "grams",
    "g",
    "kg",
    "kilogram",
    "kilograms",
    "ml",
    "milliliter",
    "milliliters",
    "millilitre",
    "l",
    "liter",
    "liters",
    "litre",
    "litres",
    "quart",
    "quarts",
    "qt",
    "pint",
    "pints",
    "pt",
    "gallon",
    "gallons",
    "can",
    "cans",
    "package",
    "packages",
    "pkg",
    "packet",
    "packets",
    "jar",
    "jars",
    "bottle",
    "bottles",
    "box",
    "boxes",
    "bag",
    "bags",
    "container",
    "containers",
    "carton",
    "stick",
    "sticks",
    "pinch",
    "pinches",
    "dash",
    "dashes",
    "handful",
    "handfuls",
    "bunch",
    "bunches",
    "sprig",
    "sprigs",
    "clove",
    "cloves",
    "slice",
    "slices",
    "piece",
    "pieces",
    "head",
    "heads",
    "stalk",
    "stalks",
    "sheet",
    "sheets",
    "drop",
    "drops",
    "splash",
    "scoop",
    "scoops",
    "cube",
    "cubes",
    "block",
    "blocks",
    "envelope",
    "envelopes",
    "loaf",
    "loaves",
    "fillet",
    "fillets",
    "strip",
    "strips",
    "inch",
    "inches",
    "cm",
    "rib",
    "ribs",
    "ear",
    "ears",
    "knob",
    "leaf",
    "leaves",
    "spoonful",
}
SIZES = {
    "large",
    "medium",
    "small",
    "extra-large",
    "jumbo",
    "big",
    "little",
    "heaping",
    "heaped",
    "level",
    "generous",
    "scant",
    "rounded",
    "thick",
    "thin",
    "mini",
    "full-fat",
    "low-fat",
    "reduced-fat",
    "fat-free",
    "nonfat",
    "~",
}
PREPARATION = {
    "chopped",
    "minced",
    "diced",
    "sliced",
    "grated",
    "shredded",
    "melted",
    "softened",
    "beaten",
    "peeled",
    "seeded",
    "cored",
    "halved",
    "quartered",
    "crushed",
    "ground",
    "freshly",
    "finely",
    "roughly",
    "coarsely",
    "thinly",
    "thickly",
    "divided",
    "packed",
    "sifted",
    "cubed",
    "trimmed",
    "rinsed",
    "drained",
    "cooked",
    "uncooked",
    "toasted",
    "room-temperature",
    "lightly",
    "well",
    "optional",
    "about",
    "approximately",
    "plus",
    "more",
    "extra",
    "separated",
    "whisked",
    "pitted",
    "zested",
    "juiced",
    "torn",
    "smashed",
    "deveined",
    "fresh",
}
STOP_WORDS = {
    "a",
    "an",
    "the",
    "of",
    "and",
    "or",
    "to",
    "for",
    "with",
    "in",
    "on",
    "into",
    "at",
    "by",
    "from",
    "as",
    "it",
    "its",
    "them",
    "they",
    "this",
    "that",
    "these",
    "those",
    "is",
    "are",
    "be",
    "until",
    "then",
    "some",
    "any",
    "each",
    "your",
    "you",
    "all",
    "over",
    "about",
    "if",
    "up",
    "out",
    "off",
    "taste",
    "needed",
    "serving",
    "serve",
    "such",
    "like",
    "other",
    "remaining",
    "half",
    "whole",
    "few",
    "bit",
    "together",
    "mixture",
    "well",
}
_FRACTIONS = "½⅓⅔¼¾⅕⅖⅗⅘⅙⅚⅛⅜⅝⅞"
_QUANTITY = re.compile(
    rf"^(?:[\d{_FRACTIONS}][\d{_FRACTIONS}/.,]*|a|an|one|two|three|four|five|six|"
    rf"eight|ten|twelve|dozen|few|several|to|-|–|x)$",
    re.IGNORECASE,
)
_TOKEN = re.compile(rf"[A-Za-zÀ-ÿ{_FRACTIONS}0-9][\w{_FRACTIONS}'’./%-]*")


_IE_PLURALS = (
    "cookies",
    "brownies",
    "pies",
    "smoothies",
    "veggies",
    "calories",
    "pierogies",
    "hoagies",
)


def singular(word: str) -> str:
    """A word's singular from its English plural ending (cookies -> cookie, berries -> berry)."""
    if word.endswith(_IE_PLURALS):
        return word[:-1]
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("oes", "ches", "shes", "sses", "xes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def ingredient_name(line: str) -> str:
    """The food an ingredient line names, without amounts, units, sizes or preparation."""
    text = re.sub(r"\([^)]*\)|\[[^\]]*\]", " ", line)
    text = re.split(r",|;|\bfor\b|\bto taste\b|\bdivided\b|:\s", text, maxsplit=1)[0]
    words = [w.strip(".,;:'’") for w in text.split()]
    # Leading amounts and units: "1 1/2 cups", "2-3 large", "1 can of".
    while words and (
        _QUANTITY.match(words[0])
        or words[0].lower() in UNITS | SIZES
        or words[0].lower() == "of"
        or re.fullmatch(rf"[\d{_FRACTIONS}/.-]+\w{{0,3}}", words[0].lower())
    ):
        if len(words) == 1:
            break
        words = words[1:]
    kept = [w for w in words if w.lower() not in SIZES and w.lower() not in PREPARATION]
    name = " ".join(kept).strip(" -–").lower()
    return name or " ".join(words).lower()


@functools.lru_cache(maxsize=65536)
def _content_word(token: str) -> str:
    # Steps repeat a small vocabulary, and scoring reads every candidate's words: one look per word.
    token = token.strip(".'’-")
    if (
        not token
        or token in STOP_WORDS
        or token in UNITS
        or token in SIZES
        or token in PREPARATION
        or not any(c.isalpha() for c in token)
    ):
        return ""
    return singular(token)


def content_words(text: str) -> list[str]:
    """Lowercase singular words of a text, without stop words, units, sizes and numbers."""
    return [word for word in map(_content_word, _TOKEN.findall(text.lower())) if word]


@dataclass
class StepIngredient:
    """An ingredient a step mentions: its index in the recipe, its name and where it matched."""

    index: int
    name: str
    start: int
    length: int


def _word_places(hay: list[str]) -> dict[str, list[int]]:
    """Where each word of hay stands."""
    where: dict[str, list[int]] = {}
    for i, word in enumerate(hay):
        where.setdefault(word, []).append(i)
    return where


def _longest_run(
    needle: tuple[str, ...], hay: list[str], where: dict[str, list[int]]
) -> tuple[int, int]:
    """(start in hay, length) of the longest contiguous run of needle found in hay (`where`: its
    words' places, made once per hay)."""
    best = (0, 0)
    for j, word in enumerate(needle):
        for i in where.get(word, ()):
            k = 1
            while i + k < len(hay) and j + k < len(needle) and hay[i + k] == needle[j + k]:
                k += 1
            if k > best[1] or (k == best[1] and i < best[0]):
                best = (i, k)
    return best


# Longer ingredient names are rare (a note run into the line) and are split afresh each time:
# cached, the lines a client sends would grow the cache by size, not count.
MAX_CACHED_NAME = 64


@functools.lru_cache(maxsize=65536)
def _cached_name_words(name: str) -> tuple[str, ...]:
    return tuple(content_words(name))


def _name_words(name: str) -> tuple[str, ...]:
    if len(name) > MAX_CACHED_NAME:
        return _cached_name_words.__wrapped__(name)
    return _cached_name_words(name)


def step_ingredients(step: str, names: list[str]) -> list[StepIngredient]:
    """Ingredients (by name) that a step mentions, in their order of appearance."""
    words = content_words(step)
    where = _word_places(words)
    candidates = []
    for index, name in enumerate(names):
        start, length = _longest_run(_name_words(name), words, where)
        if length:
            candidates.append(StepIngredient(index, name, start, length))
    # Longest match claims its span first; ties go to the earlier ingredient line.
    candidates.sort(key=lambda c: (-c.length, c.index))
    claimed: list[StepIngredient] = []
    for cand in candidates:
        span = set(range(cand.start, cand.start + cand.length))
        if not any(span & set(range(c.start, c.start + c.length)) for c in claimed):
            claimed.append(cand)
    return sorted(claimed, key=lambda c: (c.start, c.index))


def recipe_ingredients(ingredients: list[str], steps: list[str]) -> dict:
    """Names per ingredient line and the ingredients each step mentions."""
    names = [ingredient_name(line) for line in ingredients]
    return {
        "names": names,
        "steps": [[m.name for m in step_ingredients(step, names)] for step in steps],
    }

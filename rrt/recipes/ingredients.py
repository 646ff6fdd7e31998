"""Ingredient matcher: ingredient line → ingredient name, and step → ingredients it mentions.

Names drop quantities, fractions, units, parentheticals, sizes and preparation words
("1/2 cup (2 3/8 ounces) all-purpose flour" → "all-purpose flour"). A step mentions an
ingredient when they share an n-gram of content words; each span of the step goes to
the ingredient with the longest match there (the paper's method), in order of appearance.
A name's runs are followed place by place where its words stand in few places of the step,
and read from a suffix automaton of the step's words where they pair up more, so a step
costs time linear in its words and its names' words, however often a word repeats.
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


# Words of a name and of a step the matcher reads: several times the longest real ones
# (benchmarks/RESULTS.md), so a request of long lines costs a bounded amount of host work.
NAME_WORDS = 32
STEP_WORDS = 512


class _Automaton:
    """Every run of words a text holds, as a suffix automaton: built in time linear in the
    text, it finds a name's longest run in the text in time linear in the name."""

    def __init__(self, words: list[str]):
        # Per state: its next states by word, suffix link, longest run, and where that run first ends.
        nexts: list[dict[str, int]] = [{}]
        link, size, end = [-1], [0], [0]
        last = 0
        for at, word in enumerate(words):
            new = len(size)
            nexts.append({})
            link.append(0)
            size.append(at + 1)
            end.append(at)
            state = last
            while state >= 0 and word not in nexts[state]:
                nexts[state][word] = new
                state = link[state]
            if state >= 0:
                seen = nexts[state][word]
                if size[state] + 1 == size[seen]:
                    link[new] = seen
                else:
                    clone = len(size)
                    nexts.append(dict(nexts[seen]))
                    link.append(link[seen])
                    size.append(size[state] + 1)
                    end.append(end[seen])
                    while state >= 0 and nexts[state].get(word) == seen:
                        nexts[state][word] = clone
                        state = link[state]
                    link[seen] = link[new] = clone
            last = new
        self.nexts, self.link, self.size, self.end = nexts, link, size, end

    def longest(self, name: tuple[str, ...]) -> tuple[int, int]:
        """(start, length) of the longest run of the name's words in the text, the earliest of
        equal length; (0, 0) when they share no word."""
        nexts, link = self.nexts, self.link
        best_start = best = 0
        state = size = 0
        for word in name:
            while state and word not in nexts[state]:
                state = link[state]
                size = self.size[state]
            state = nexts[state].get(word, 0)
            size = size + 1 if state else 0
            # Every run in a state ends first where the state's longest does.
            if size and size >= best:
                start = self.end[state] - size + 1
                if size > best or start < best_start:
                    best_start, best = start, size
        return best_start, best


# Places in the step a name's word may have, on average, before the name reads the automaton:
# following runs place by place costs one look for each pair of equal words.
_PAIRS_PER_WORD = 4


class _StepRuns:
    """A step's words, ready for each name's longest run in them. A real name's words stand in
    few places of the step, and its runs are followed place by place; a name whose words pair
    up more (one word repeated in both) reads the step's automaton, built once, so no name
    costs more than time linear in its words, and the step no more than linear in its own."""

    def __init__(self, words: list[str]):
        self.words = words
        self.places: dict[str, list[int]] = {}
        for at, word in enumerate(words):
            self.places.setdefault(word, []).append(at)
        self.automaton: _Automaton | None = None

    def longest(self, name: tuple[str, ...]) -> tuple[int, int]:
        """(start, length) of the longest run of the name's words in the step, the earliest of
        equal length; (0, 0) when they share no word."""
        places, budget = self.places, _PAIRS_PER_WORD * len(name)
        best_start = best = 0
        ending: dict[int, int] = {}  # the length of the run ending at each place of the last word
        for word in name:
            here = places.get(word)
            if here is None:
                ending = {}
                continue
            budget -= len(here)
            if budget < 0:
                if self.automaton is None:
                    self.automaton = _Automaton(self.words)
                return self.automaton.longest(name)
            ending = {at: ending.get(at - 1, 0) + 1 for at in here}
            for at, size in ending.items():
                if size > best or (size == best and at - size + 1 < best_start):
                    best_start, best = at - size + 1, size
        return best_start, best


# Longer ingredient names are rare (a note run into the line) and are split afresh each time:
# cached, the lines a client sends would grow the cache by size, not count.
MAX_CACHED_NAME = 64


@functools.lru_cache(maxsize=65536)
def _cached_name_words(name: str) -> tuple[str, ...]:
    return tuple(content_words(name)[:NAME_WORDS])


def _name_words(name: str) -> tuple[str, ...]:
    if len(name) > MAX_CACHED_NAME:
        return _cached_name_words.__wrapped__(name)
    return _cached_name_words(name)


def step_ingredients(step: str, names: list[str]) -> list[StepIngredient]:
    """Ingredients (by name) that a step mentions, in their order of appearance."""
    longest = _StepRuns(content_words(step)[:STEP_WORDS]).longest
    candidates = []
    for index, name in enumerate(names):
        start, length = longest(_name_words(name))
        if length:
            candidates.append(StepIngredient(index, name, start, length))
    # Longest match claims its span first; ties go to the earlier ingredient line.
    candidates.sort(key=lambda c: (-c.length, c.index))
    claimed: list[StepIngredient] = []
    for cand in candidates:
        end = cand.start + cand.length
        if not any(c.start < end and cand.start < c.start + c.length for c in claimed):
            claimed.append(cand)
    return sorted(claimed, key=lambda c: (c.start, c.index))


def recipe_ingredients(ingredients: list[str], steps: list[str]) -> dict:
    """Names per ingredient line and the ingredients each step mentions."""
    names = [ingredient_name(line) for line in ingredients]
    return {
        "names": names,
        "steps": [[m.name for m in step_ingredients(step, names)] for step in steps],
    }

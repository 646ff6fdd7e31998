"""Foods a text names, and which of them its recipe does not hold.

A rewrite must stay the user's recipe: every food a rewritten step names should be in the
rewritten title and ingredient lines or in the source recipe. Foods are found by the longest
match of a food name's content words (rrt.recipes.ingredients.content_words: lowercase,
singular, without stop words, units, sizes and preparation words), left to right:

    held = recipe_food_words([rewritten title, *rewritten ingredient lines], [source lines...])
    unlisted_foods("Toss with black sesame seeds.", held)   -> [FoodMention("sesame seeds", ...)]

The names are rrt/data/foods.txt (made by data/foods/prepare.py from WordNet's foods, the
tagger's lexicon and a few cooking words). A mention is held when each of its words is a word of
the recipe's lines or of PANTRY, so "the cheese" is held by "1 cup shredded cheddar cheese" but
"parmesan cheese" is not.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources

from rrt.recipes.ingredients import content_words

# What any kitchen has, so a step may name it though no ingredient line does. Kept short on purpose:
# a food a reader could be allergic to is never here.
PANTRY = (
    "salt",
    "kosher salt",
    "sea salt",
    "table salt",
    "pepper",
    "black pepper",
    "water",
    "ice",
    "oil",
    "olive oil",
    "canola oil",
    "cooking oil",
    "vegetable oil",
    "neutral oil",
    "cooking spray",
    "nonstick spray",
)
# Vocabulary names longer than this many content words are ingredient-line noise, not foods.
MAX_NAME_WORDS = 5
_TOKEN = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")


@dataclass(frozen=True)
class FoodVocabulary:
    """Food names as tuples of singular content words ("cream cheese" -> ("cream", "cheese"))."""

    names: frozenset
    longest: int

    def __len__(self) -> int:
        return len(self.names)


@dataclass(frozen=True)
class FoodMention:
    """A food a text names: where it stands and its content words."""

    start: int
    end: int
    words: tuple[str, ...]


def food_vocabulary(names: Iterable[str]) -> FoodVocabulary:
    """A vocabulary from plain food names; names without a content word are dropped."""
    keys = set()
    for name in names:
        key = tuple(content_words(re.sub(r"\([^)]*\)", " ", name or "")))
        if key and len(key) <= MAX_NAME_WORDS and any(len(w) > 2 for w in key):
            keys.add(key)
    return FoodVocabulary(frozenset(keys), max((len(k) for k in keys), default=0))


@functools.cache
def known_foods() -> FoodVocabulary:
    """The food names of rrt/data/foods.txt."""
    text = resources.files("rrt").joinpath("data", "foods.txt").read_text(encoding="utf-8")
    return food_vocabulary(
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )


@functools.lru_cache(maxsize=65536)
def _content_word(token: str) -> str:
    found = content_words(token)
    return found[0] if len(found) == 1 else ""


def mentions(text: str, vocabulary: FoodVocabulary | None = None) -> list[FoodMention]:
    """The foods a text names: longest vocabulary match first, left to right. Stop words may sit
    inside a name ("cream of tartar"), so matching runs over content words."""
    vocabulary = vocabulary or known_foods()
    tokens = [
        (w, m.start(), m.end()) for m in _TOKEN.finditer(text) if (w := _content_word(m.group()))
    ]
    found, i = [], 0
    while i < len(tokens):
        for n in range(min(vocabulary.longest, len(tokens) - i), 0, -1):
            words = tuple(t[0] for t in tokens[i : i + n])
            if words in vocabulary.names:
                found.append(FoodMention(tokens[i][1], tokens[i + n - 1][2], words))
                i += n
                break
        else:
            i += 1
    return found


def food_mentions(text: str, vocabulary: FoodVocabulary) -> list[tuple[int, int]]:
    """Character spans of the foods a text names (`mentions`)."""
    return [(m.start, m.end) for m in mentions(text, vocabulary)]


@functools.cache
def pantry_words() -> frozenset[str]:
    """The content words of PANTRY."""
    return frozenset(w for name in PANTRY for w in content_words(name))


# What a prepared line yields for the steps to name: "1 lime, juiced" holds lime juice.
YIELDS = {"juiced": "juice", "zested": "zest"}
_YIELD = re.compile(r"\b(" + "|".join(YIELDS) + r")\b")


def recipe_food_words(*lines: Iterable[str]) -> frozenset[str]:
    """The content words of a recipe's lines (any number of groups: titles, ingredient lines,
    steps), what their preparation yields (YIELDS), and the pantry's: the words a held food may use."""
    texts = [line or "" for group in lines for line in group]
    words = {w for text in texts for w in content_words(text)}
    # Preparation words are not content words, so the yields are read from the raw text.
    words |= {YIELDS[w] for text in texts for w in _YIELD.findall(text.lower())}
    return frozenset(words) | pantry_words()


def held_words(rewritten: dict, source: dict) -> frozenset[str]:
    """The words a food in a rewritten step may use: the rewritten title and ingredient lines, the whole
    source recipe and the pantry."""
    return recipe_food_words(
        [str(rewritten.get("title") or "")],
        rewritten.get("ingredients") or [],
        [str(source.get("title") or "")],
        source.get("ingredients") or [],
        source.get("steps") or [],
    )


def unlisted_foods(
    text: str, held: frozenset[str], vocabulary: FoodVocabulary | None = None
) -> list[FoodMention]:
    """The foods a text names that are not held: some word of theirs is in none of `held`
    (`recipe_food_words`)."""
    return [m for m in mentions(text, vocabulary) if not set(m.words) <= held]

"""How the guide's rewrites read: diet words stacked on one food, words said twice, titles that disagree.

A line reads badly when two diet words that forbid the same food name one food ("dairy-free
cheddar vegan cheese", "vegan nondairy butter") or a word comes twice in a row ("seitan
seitan"). A title disagrees with its recipe when it names a food the source title did not and
no rewritten ingredient line holds ("Cheesy Seitan Tacos" over "plant-based ground meat"):
diet words do not count, since they name no food.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

from rrt.recipes.lexicon import CATEGORIES, CONSTRAINTS, DIET_WORDS
from rrt.recipes.loaders import read_recipes
from rrt.recipes.recipe import Recipe
from rrt.recipes.substitutions import SubstitutionResult, substitute_recipe
from rrt.recipes.tagger import tag_recipe
from rrt.recipes.titles import MINOR_WORDS

# Each diet word with the food categories it says a food is free of.
DIET_COVERS: dict[str, frozenset[str]] = {}
for _category in CATEGORIES.values():
    for _word in _category.modifiers:
        if " " not in _word:
            DIET_COVERS[_word] = DIET_COVERS.get(_word, frozenset()) | {_category.name}
NON_FOOD = frozenset(DIET_COVERS) | {w for w in DIET_WORDS if " " not in w} | MINOR_WORDS
# A phrase names one food: it ends at punctuation or a joining word ("vegan cheese or vegan butter").
_CLAUSE = re.compile(r"[.,;:()!?\[\]/+&|]")
_WORD = re.compile(r"[^\W\d_][\w'’-]*")
PHRASE_WORDS = 4
_DIET_PHRASE = re.compile(
    r"(?<!\w)(?:"
    + "|".join(sorted(map(re.escape, NON_FOOD - MINOR_WORDS), key=len, reverse=True))
    + r")(?!\w)",
    re.IGNORECASE,
)


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def stacked_diet_words(line: str) -> list[tuple[str, str]]:
    """Pairs of diet words in one phrase of a line that say the same food is free of the same thing."""
    found = []
    for clause in _CLAUSE.split(line):
        words = _words(clause)
        for i, word in enumerate(words):
            if word not in DIET_COVERS:
                continue
            for later in words[i + 1 : i + PHRASE_WORDS]:
                if later in MINOR_WORDS:
                    break
                if DIET_COVERS[word] & DIET_COVERS.get(later, frozenset()):
                    found.append((word, later))
    return found


def repeated_words(line: str) -> list[str]:
    """Words a line says twice in a row, with nothing but spaces between ("seitan seitan")."""
    return [
        a for clause in _CLAUSE.split(line) for a, b in itertools.pairwise(_words(clause)) if a == b
    ]


def _singular(word: str) -> str:
    for ending, stem in (("ies", "y"), ("es", ""), ("s", "")):
        if word.endswith(ending) and len(word) > len(ending) + 2:
            return word[: -len(ending)] + stem
    return word


def _food_words(text: str) -> list[str]:
    # Hyphens join foods in titles ("Honey-Apple", "Sausage-and-Cheddar"); diet words name none.
    text = _DIET_PHRASE.sub(" ", text)
    return [_singular(p) for w in _words(text) for p in w.split("-") if p and p not in NON_FOOD]


def title_foods_missing(source_title: str, title: str, ingredients: list[str]) -> list[str]:
    """Words a rewritten title gained that name no diet and that no rewritten ingredient line holds."""
    held = {w for line in ingredients for w in _food_words(line)} | set(_food_words(source_title))
    return [w for w in _food_words(title) if w not in held]


def guide_rewrites(paths: list[str]) -> Iterator[tuple[Recipe, str, SubstitutionResult]]:
    """Every recipe of the files with each constraint it breaks and the guide's rewrite for it."""
    for recipe in read_recipes(paths):
        tags = tag_recipe(recipe)
        for constraint in CONSTRAINTS:
            if not tags.valid[constraint]:
                yield recipe, constraint, substitute_recipe(recipe, constraint)

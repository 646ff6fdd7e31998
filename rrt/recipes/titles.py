"""Titles read as titles: the stand-in the ingredient lines now have, short, or the diet named before the food.

A title's food takes the stand-in an ingredient line's food of the same name took, so title and
lines agree (Cheesy Beef Tacos over "1 pound ground beef" -> Cheesy Plant-Based Meat Tacos, not
Seitan Tacos); a food no line replaced keeps its name with the diet before it. The guide's stand-ins are written for the cook ("soymilk soured with lemon juice", "egg
replacer"); a title wants a name. A stand-in that names a food in a few words goes into the
title (Chicken Curry → Tofu Curry, Tuna Salad → Chickpea Salad); one that reads as an
instruction or a pantry helper leaves the food's name in place, and the diet is named before
it (Vegan Buttermilk Pancakes, Eggless Egg Fried Rice). Dish names the guide leaves alone
("Alfredo", "Pesto") get the diet word too. The diet word goes where the tagger reads it as
covering the food even when the title is read on its own, as reports read it.
"""

from __future__ import annotations

import itertools
import re

from rrt.recipes.line_foods import Replaced
from rrt.recipes.tagger import Mention, normalise_term, text_violations

# How each diet is named in a title; each is a modifier the tagger honours for every food
# category its constraint forbids. "Eggless" because "Egg-Free Egg Fried Rice" reads as a contradiction.
DIET_NAMES = {
    "vegan": "vegan",
    "vegetarian": "vegetarian",
    "dairy-free": "dairy-free",
    "egg-free": "eggless",
    "nut-free": "nut-free",
    "fish-free": "fish-free",
    "alcohol-free": "non-alcoholic",
}

# Longer stand-ins read as instructions in a title ("Soymilk soured with lemon juice Pancakes").
TITLE_WORDS = 3

# Title forms of guide stand-ins: a shorter name, or None for a pantry helper no dish is named
# after ("Egg Replacer Fried Rice", "Penne alla Water"), which leaves the food named with the diet.
TITLE_FORMS: dict[str, str | None] = {
    "egg replacer": None,
    "flax egg": None,
    "soured soymilk": None,
    "plant milk wash": None,
    "water": None,
    "lime juice": None,
    "rice vinegar": None,
    "rum extract": None,
    "almond extract": None,
    "vanilla extract": None,
    "vanilla syrup": None,
    # A spirit or fortified wine names the dish ("Chicken Marsala", "Bourbon Chicken"); its juice does not.
    "apple juice": None,
    "white grape juice": None,
    "agave nectar": "agave",
    "diced firm tofu": "tofu",
}

# Words that lead into a dish's name: the diet word follows them ("Easy Vegan Pancakes").
OPENERS = frozenset(
    (
        "easy",
        "quick",
        "simple",
        "best",
        "classic",
        "homemade",
        "healthy",
        "perfect",
        "ultimate",
        "traditional",
        "authentic",
        "old-fashioned",
        "favorite",
        "favourite",
        "the",
        "my",
        "our",
        "a",
    )
)
# Words a title keeps in lower case; the tagger's window also stops at the joining ones.
MINOR_WORDS = frozenset(
    (
        "a",
        "an",
        "and",
        "as",
        "at",
        "au",
        "by",
        "de",
        "for",
        "in",
        "into",
        "of",
        "on",
        "or",
        "over",
        "plus",
        "the",
        "then",
        "to",
        "with",
        "alla",
        "con",
    )
)
_WORD = re.compile(r"[^\W\d_][\w'’-]*")
_TOKEN = re.compile(r"[\w'’-]+")  # a word as the tagger's window counts it ("30-Minute" is one)


def is_title_case(title: str) -> bool:
    """Whether every word of a title but the minor ones and any aside in brackets is capitalised."""
    words = [
        w
        for w in _WORD.findall(re.sub(r"\([^)]*\)|\[[^\]]*\]", " ", title))
        if w.lower() not in MINOR_WORDS
    ]
    return bool(words) and all(w[0].isupper() for w in words)


def title_case(phrase: str) -> str:
    """A phrase with every word and hyphenated part capitalised, minor words after the first aside."""
    words = phrase.split(" ")
    return " ".join(
        w
        if i and w.lower() in MINOR_WORDS
        else "-".join(p[:1].upper() + p[1:] for p in w.split("-"))
        for i, w in enumerate(words)
    )


def title_stand_in(stand_in: str, original: str) -> str | None:
    """A guide stand-in as a title names it, or None where the title should name the diet instead."""
    form = TITLE_FORMS.get(stand_in.lower(), stand_in)
    if form is None or len(form.split()) > TITLE_WORDS:
        return None
    # A title names one kind of food: "Tuna Salad" is a Chickpea Salad, not a Chickpeas Salad.
    last = original.split()[-1].lower() if original.split() else ""
    if not last.endswith("s") and form.endswith("s") and not form.endswith(("ss", "us")):
        form = form[:-1]
    return form


# Title foods that stand for any food of their kind: "Fish Tacos" over "1 pound cod fillets".
KIND_NAMES = frozenset(
    (
        "fish",
        "seafood",
        "shellfish",
        "meat",
        "poultry",
        "nut",
        "cheese",
        "dairy",
        "liqueur",
        "liquor",
        "alcohol",
    )
)


def line_stand_in(text: str, head: str, category: str, replaced: list[Replaced]) -> Replaced | None:
    """The ingredient line food a title's food names: the same words, head or name, then one it is a
    part of ("beef" of "ground beef"), then, for a kind's name, the first of that kind."""
    word = head.split()[-1]
    for same in (
        lambda r: r.text == text,
        lambda r: r.head == head,
        lambda r: head in r.terms,
        lambda r: r.head.split()[-1] == word,
        lambda r: word in KIND_NAMES,
    ):
        for food in replaced:
            if food.category == category and same(food):
                return food
    return None


def title_form(food: Replaced, original: str) -> str | None:
    """A line's plain stand-in as the title names it, without words of the line's food the title's lacks
    ("plant-based ground meat" of "ground beef" names the title's "Beef" as "plant-based meat")."""
    form = title_stand_in(food.stand_in, original)
    if form is None:
        return None
    extra = set(food.text.split()) - set(normalise_term(original).split())
    kept = [w for w in form.split() if normalise_term(w) not in extra]
    return " ".join(kept or form.split())


def _opener(word: str) -> bool:
    return word.lower() in OPENERS or word[:1].isdigit()  # "30-Minute Vegan Chili", "5 Vegan Dips"


def _phrase_start(title: str, at: int) -> bool:
    before = title[:at].rstrip()
    if not before or not before[-1].isalnum():
        return True  # the title's start, or after punctuation
    previous = _TOKEN.findall(before)[-1]
    # After "to" comes a verb ("How to Bake Eggs"), not the dish.
    return previous.lower() != "to" and (_opener(previous) or previous.lower() in MINOR_WORDS)


def _heads(title: str, start: int) -> list[int]:
    # The phrase's start reads best ("Vegan Tofu Alfredo"), but the tagger only looks two words back.
    heads: list[int] = []
    for word in reversed(list(_TOKEN.finditer(title[:start]))[-2:]):
        if (
            title[word.end() : (heads or [start])[-1]].strip()
            or _opener(word.group())
            or word.group().lower() in MINOR_WORDS
        ):
            break  # punctuation between, or the phrase starts after this word
        heads.append(word.start())
    return [at for at in heads[::-1] if _phrase_start(title, at)] + [start]


def _with_diet_word(title: str, constraint: str, at: int) -> str:
    word, rest = DIET_NAMES[constraint], title[at:]
    if title.isupper():
        word = word.upper()
    elif at == 0 and not is_title_case(title):
        # It now opens a sentence-case title; the old first word loses its capital unless an acronym.
        word = word[:1].upper() + word[1:]
        first = rest.split(" ", 1)[0]
        rest = rest[:1].lower() + rest[1:] if first[1:] == first[1:].lower() else rest
    elif rest[:1].isupper():
        word = title_case(word)
    return title[:at] + word + " " + rest


def _cover(
    title: str, food: Mention, constraint: str
) -> tuple[str, tuple[str, str], list[Mention]] | None:
    # The new title's violations come back too: the next turn reads the same title.
    for at in _heads(title, food.start):
        new = _with_diet_word(title, constraint, at)
        moved = food.start + len(new) - len(title)
        found = text_violations(new, [constraint])
        if not any(m.start == moved for m in found):
            return new, (title[at : food.end], new[at : moved + food.end - food.start]), found
    return None


# Foods a title is named for at a time: twice the most any real title holds (benchmarks/RESULTS.md),
# so a real title is read whole, and a title of many foods costs time linear in its length.
TITLE_FOODS = 10


def name_diet(title: str, constraint: str) -> tuple[str, list[tuple[str, str]]]:
    """The title with the diet named before each food in it the constraint forbids, and each (from, to) change."""
    found = text_violations(title, [constraint])
    if len(found) <= TITLE_FOODS:
        return _name_foods(title, constraint, found)
    # Each turn re-reads the whole title, so a title of many foods is named in pieces of
    # TITLE_FOODS foods, each ending where its last food does; right to left, as the turns go.
    cuts, count, reach = [0], 0, 0
    for food in sorted(found, key=lambda m: m.start):
        if count >= TITLE_FOODS and food.start >= reach:
            cuts.append(reach)
            count = 0
        count += 1
        reach = max(reach, food.end)
    cuts.append(len(title))
    named, made = [], []
    for start, end in reversed(list(itertools.pairwise(cuts))):
        piece = title[start:end]
        piece, changes = _name_foods(piece, constraint, text_violations(piece, [constraint]))
        named.append(piece)
        made += changes
    return "".join(reversed(named)), made


def _name_foods(
    title: str, constraint: str, found: list[Mention]
) -> tuple[str, list[tuple[str, str]]]:
    made = []
    # Read as a lone text, as reports read a title. A covered food stays covered, so each turn covers
    # one more, right to left; the bound only guards against a tagger that reads no place as covering.
    for _ in range(len(title.split()) + 1):
        covered = _cover(title, max(found, key=lambda m: m.start), constraint) if found else None
        if covered is None:
            break
        title, change, found = covered
        made.append(change)
    return title, made

"""The foods a line names, each as one span: the words that go with it, and the names it is made of.

The tagger reports every lexicon term on its own, but a line names one food with several:
"shredded cheddar cheese" is one cheese, "ground turkey meat" one meat, "Shaoxing wine" one
wine. Replacing each term alone stacks stand-ins ("dairy-free cheddar vegan cheese",
"plant-based ground meat plant-based meat"), so the guide replaces each food once:

    line_foods("1 cup shredded cheddar cheese", hits)  -> [Food(cheddar + cheese, "cheddar cheese")]

A food's last name is its head ("cheese"); the names before it are kinds of it ("cheddar") or
describe it ("whole milk" of "whole milk kefir"). `Replaced` keeps what an ingredient line's food
became, so a title can name the same stand-in (rrt.recipes.titles).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rrt.recipes.lexicon import CATEGORIES
from rrt.recipes.tagger import Violation, normalise_term

# Words that belong to the replaced food and go with it ("goat milk" -> "soymilk", not "goat soymilk").
ABSORB_BEFORE = {
    "dairy": (
        "whole",
        "skim",
        "low-fat",
        "lowfat",
        "nonfat",
        "fat-free",
        "reduced-fat",
        "full-fat",
        "2%",
        "1%",
        "goat",
        "goat's",
        "cow's",
        "sheep's",
        "raw",
        "unsalted",
        "salted",
        "cultured",
        "sweet",
        "clarified",
    ),
    "egg": ("large", "medium", "small", "extra-large", "jumbo", "whole", "free-range", "organic"),
    "meat": (
        "boneless",
        "skinless",
        "lean",
        "extra-lean",
        "bone-in",
        "skin-on",
        "thick-cut",
        "center-cut",
    ),
    "fish": (
        "wild",
        "wild-caught",
        "farmed",
        "fresh",
        "skinless",
        "boneless",
        "skin-on",
        "jumbo",
        "large",
        "medium",
        "raw",
        "cooked",
        "peeled",
        "deveined",
    ),
    # A wine's style does not carry over to its juice ("dry vegetable broth").
    "alcohol": (
        "dry",
        "semi-dry",
        "off-dry",
        "sweet",
        "medium-sweet",
        "full-bodied",
        "medium-bodied",
        "light-bodied",
        "fruity",
        "crisp",
        "spiced",
        "aged",
    ),
}
ABSORB_AFTER = {
    "meat": (
        "breast",
        "breasts",
        "thigh",
        "thighs",
        "cutlet",
        "cutlets",
        "wing",
        "wings",
        "drumstick",
        "drumsticks",
        "leg",
        "legs",
        "chop",
        "chops",
        "fillet",
        "fillets",
        "tenderloin",
        "loin",
        "shoulder",
        "roast",
        "mince",
        "meat",
        "strips",
        "slices",
        "pieces",
        "bits",
    ),
    "fish": ("fillet", "fillets", "steak", "steaks", "meat", "pieces"),
}
# Words that say a food is free of something; a stand-in that is such words before the food's
# own name ("vegan cheese") keeps the line's name for it ("vegan cheddar cheese").
DIET_MODIFIERS = frozenset(normalise_term(m) for c in CATEGORIES.values() for m in c.modifiers)
# On an ingredient line one plain word may sit inside a food's name ("beef flank steak", "pork
# breakfast sausage"); a joining word may not ("chicken or beef broth").
JOINING = frozenset(
    (
        "a",
        "an",
        "and",
        "as",
        "at",
        "by",
        "for",
        "from",
        "in",
        "into",
        "like",
        "of",
        "on",
        "or",
        "over",
        "plus",
        "such",
        "than",
        "the",
        "then",
        "to",
        "until",
        "with",
    )
)
# Characters read each side of a term for the words that go with its food: many times the longest
# such words, and a line of many foods costs time linear in its length, not in its foods times it.
WORDS_REACH = 160
_INNER_WORD = re.compile(r"[\s-]+([^\W\d_]+)[\s-]+")
_BEFORE = {
    c: re.compile(r"(?:(?:" + "|".join(map(re.escape, words)) + r")[\s,]+)+$", re.IGNORECASE)
    for c, words in ABSORB_BEFORE.items()
}
_AFTER = {
    c: re.compile(r"(?:\s+(?:" + "|".join(map(re.escape, words)) + r"))+\b", re.IGNORECASE)
    for c, words in ABSORB_AFTER.items()
}


@dataclass
class Food:
    """One food a line names: its span (with the words that go with it), category and names, head last."""

    start: int
    end: int
    category: str
    names: list[Violation] = field(default_factory=list)

    @property
    def head(self) -> Violation:
        """The name that says what the food is ("cheese" of "cheddar cheese")."""
        return self.names[-1]


@dataclass(frozen=True)
class Replaced:
    """What an ingredient line's food was (its words, names, head term) and the stand-in it now has."""

    text: str
    terms: tuple[str, ...]
    head: str
    category: str
    stand_in: str
    diet: str | None


def widen(line: str, start: int, end: int, category: str) -> tuple[int, int]:
    """A term's span with the words before and after it that belong to the food."""
    if category in _BEFORE:
        near = max(0, start - WORDS_REACH)
        found = _BEFORE[category].search(line[near:start])
        start = near + found.start() if found else start
    if category in _AFTER:
        found = _AFTER[category].match(line[end : end + WORDS_REACH])
        end = end + found.end() if found else end
    return start, end


def _joins(gap: str, inner_word: bool) -> bool:
    if re.fullmatch(r"[\s-]+", gap):
        return True
    found = inner_word and _INNER_WORD.fullmatch(gap)
    return bool(found) and found.group(1).lower() not in JOINING


def line_foods(
    line: str, hits: list[tuple[Violation, str]], inner_word: bool = False
) -> list[Food]:
    """The foods of a line's violating terms: names of one category side by side make one food, and a
    term inside another food's span is part of it ("meat" of "turkey meat")."""
    spans = sorted(
        ((*widen(line, *v.span, category), v, category) for v, category in hits),
        key=lambda s: (s[0], -s[1]),
    )
    foods: list[Food] = []
    for start, end, violation, category in spans:
        last = foods[-1] if foods else None
        if last and start < last.end:
            continue  # inside a food already taken, of this category or another
        if last and last.category == category and _joins(line[last.end : start], inner_word):
            last.names.append(violation)
            last.end = end
            continue
        foods.append(Food(start, end, category, [violation]))
    return foods


def diet_words(stand_in: str, *names: str) -> str | None:
    """The diet words a stand-in puts before one of the food's own names ("vegan" of "vegan cheese"), else None."""
    words = stand_in.split()
    for name in {normalise_term(n) for n in names if n}:
        size = len(name.split())
        if (
            len(words) > size
            and normalise_term(" ".join(words[-size:])) == name
            and all(normalise_term(w) in DIET_MODIFIERS for w in words[:-size])
        ):
            return " ".join(words[:-size])
    return None

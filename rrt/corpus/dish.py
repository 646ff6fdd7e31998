"""Dish keys and dataset splits: which recipes are versions of one dish, and where a dish goes.

"Best Vegan Hot Cocoa" and "Homemade Hot Cocoa" share the key "hot cocoa": lowercase,
without parentheticals, diet words or puffery, plurals made singular. The `head` level
keeps the head noun ("Crispy Fish Tacos" → "taco"), with one modifier for broad heads
("Dark Rum Banana Bread" → "banana bread"): small corpora rarely repeat a title exactly.
"""

from __future__ import annotations

import hashlib
import re

from rrt.recipes.ingredients import content_words, ingredient_name, singular
from rrt.recipes.lexicon import CATEGORIES, CONSTRAINT_CATEGORIES, DIET_WORDS

PUFFERY = {
    "best",
    "easy",
    "easiest",
    "homemade",
    "home-made",
    "perfect",
    "ultimate",
    "classic",
    "simple",
    "quick",
    "favorite",
    "favourite",
    "my",
    "our",
    "the",
    "a",
    "an",
    "amazing",
    "delicious",
    "healthy",
    "healthier",
    "authentic",
    "super",
    "world's",
    "famous",
    "awesome",
    "traditional",
    "old-fashioned",
    "crazy",
    "skinny",
    "recipe",
    "recipes",
    "really",
    "very",
    "good",
    "great",
    "tasty",
    "yummy",
    "mom's",
    "grandma's",
    "copycat",
    "-",
    "&",
    "weeknight",
    "5-ingredient",
    "one-pot",
    "new",
}
DESCRIPTORS = {
    "crispy",
    "cheesy",
    "creamy",
    "smoky",
    "fluffy",
    "chewy",
    "fudgy",
    "hearty",
    "loaded",
    "warm",
    "spicy",
    "roasted",
    "baked",
    "grilled",
    "stuffed",
    "spiked",
    "rich",
    "light",
    "moist",
    "thick",
    "sweet",
    "savory",
    "tangy",
    "zesty",
    "fresh",
    "no-bake",
    "slow-cooker",
    "instant",
    "dark",
    "brown",
    "toasted",
    "fried",
    "mini",
    "style",
    "thai-style",
    "valencian-style",
    "german",
    "new",
    "york",
    "vegetable",
    "veggie",
    "green",
    "tropical",
    "maple",
    "peppermint",
    "lemon",
    "vanilla",
}
# Foods that tell a dish's versions apart rather than name the dish ("Tofu Pad Thai").
STAND_INS = {
    "tofu",
    "tempeh",
    "seitan",
    "bean",
    "lentil",
    "chickpea",
    "mushroom",
    "vegetable",
    "jackfruit",
    "eggplant",
    "cauliflower",
    "coconut",
    "aquafaba",
    "flax",
    "oat",
    "soy",
    "spinach",
    "kale",
    "butternut",
    "squash",
    "black",
    "red",
    "white",
    "sunflower",
    "seed",
    "basil",
    "raisin",
    "mango",
    "strawberry",
    "pineapple",
    "crumble",
    "paneer",
}
# Heads too broad alone: "carrot cake" and "coffee cake" stay apart.
GENERIC_HEADS = {
    "salad",
    "soup",
    "cake",
    "bread",
    "pie",
    "sauce",
    "cookie",
    "toast",
    "roll",
    "muffin",
    "bar",
    "pudding",
    "dressing",
    "tart",
    "sandwich",
    "bowl",
}
_DIET = sorted((w.replace("-", " ") for w in DIET_WORDS), key=len, reverse=True)
_FOOD_WORDS = {
    w for c in CATEGORIES.values() for t in c.terms for w in t.split() if len(t.split()) == 1
}
SPLITS = ("train", "dev", "test")


def normalise_title(title: str) -> str:
    """Lowercase title without parentheticals, diet words or puffery, plurals singular."""
    text = re.sub(r"\([^)]*\)|\[[^\]]*\]", " ", title.lower())
    text = text.replace("-", " ")
    for phrase in _DIET:
        text = re.sub(rf"\b{re.escape(phrase)}\b", " ", text)
    words = [w.strip(".,!?:;'\"") for w in text.split()]
    words = [w.replace(" ", "-") for w in words if w and w not in PUFFERY]
    return " ".join(singular(w) for w in words)


def dish_key(title: str, level: str = "title") -> str:
    """The key recipes of one dish share; `title` (the paper's) or the coarser `head`."""
    key = normalise_title(title)
    if level == "title":
        return key
    if level != "head":
        raise ValueError(f"dish key level must be 'title' or 'head', not {level!r}")
    words = re.split(r"\b(?:with|in|for|on|over)\b|:", key)[0].split()
    if not words:
        return key
    head = words[-1]
    before = [
        w
        for w in words[:-1]
        if w not in DESCRIPTORS
        and w not in STAND_INS
        and w not in _FOOD_WORDS
        and w not in ("and", "of")
    ]
    if head in GENERIC_HEADS and before:
        return f"{before[-1]} {head}"
    return head


# Words of a title that say how a dish is made or served, not which dish it is.
STYLE_WORDS = {
    "crispy",
    "cheesy",
    "creamy",
    "smoky",
    "fluffy",
    "chewy",
    "fudgy",
    "hearty",
    "loaded",
    "warm",
    "spicy",
    "roasted",
    "baked",
    "grilled",
    "rich",
    "light",
    "moist",
    "thick",
    "fresh",
    "no-bake",
    "slow-cooker",
    "instant",
    "mini",
    "style",
    "simple",
    "glazed",
    "glaze",
    "low",
    "fodmap",
    "high",
    "protein",
    "keto",
    "gluten-free",
    "gluten",
    "free",
    "minute",
    "one",
    "pan",
    "sheet",
    "skillet",
    "oven",
    "air",
    "fryer",
    "crockpot",
    "slow",
    "cooker",
    "pot",
    "stovetop",
    "and",
    "with",
    "of",
    "in",
    "on",
    "for",
    "over",
    "small",
}


def _forbidden_words(constraint: str | None) -> set[str]:
    if constraint is None:
        return _FOOD_WORDS
    return {
        w
        for c in CONSTRAINT_CATEGORIES[constraint]
        for t in CATEGORIES[c].terms
        for w in t.split()
        if len(t.split()) == 1
    }


def title_core(title: str, constraint: str | None = None) -> frozenset[str]:
    """The words of a title that name the dish itself: without diet words, puffery, styles, the
    foods the constraint forbids (any constraint's when None) and their stand-ins ("Crispy Salmon
    Tacos" and "Vegan Tofu Tacos" both give {"taco"} for fish-free; "Pumpkin Cheesecake" keeps
    "pumpkin"; names like "Emeril's" and what follows "with" go)."""
    forbidden = _forbidden_words(constraint)

    def core(text: str) -> frozenset[str]:
        return frozenset(
            w
            for w in text.split()
            if w not in STYLE_WORDS
            and w not in PUFFERY
            and w not in STAND_INS
            and w not in forbidden
            and not w[:1].isdigit()
            and not w.endswith(("'", "'s"))
        )

    whole = normalise_title(title)
    # What follows "with", "in" or a colon names a side or a garnish, not the dish; unless the
    # part before it is only a food ("Chicken with Mixed Vegetables").
    head = core(re.split(r"\b(?:with|in|over|on|for)\b|:", whole)[0])
    return head if head - _FOOD_WORDS else core(whole)


def titles_agree(a: str, b: str, extra_words: int = 0, constraint: str | None = None) -> bool:
    """Whether two titles name one dish for a constraint: the shorter core lies within the longer
    one, which adds at most `extra_words` ("Chicken Pot Pie" and "Chicken Pot Pie with Biscuits"
    at 1). Titles with no core left (only foods and styles, "Grilled Cheese") never agree:
    nothing says the dish; a core of foods alone ("Butter Chicken": {"chicken"}) takes no extra word."""
    small, large = sorted((title_core(a, constraint), title_core(b, constraint)), key=len)
    # A core of foods alone ("chicken") names an ingredient, not a dish: it must match exactly.
    extra = extra_words if small - _FOOD_WORDS else 0
    return bool(small) and small <= large and len(large - small) <= extra


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


def dish_similarity(a: dict, b: dict, steps: str = "steps") -> float:
    """How alike two recipes are as dishes (0-1): the mean overlap of their title words, their
    ingredients' head nouns and their method's content words. Recipes that only share a head
    noun ("Grilled Cheese" and "Mac and Cheese", "Salmon Tacos" and "Butternut Tacos") score low."""

    def ingredients(recipe: dict) -> set[str]:
        return {name.split()[-1] for name in map(ingredient_name, recipe["ingredients"]) if name}

    def method(recipe: dict) -> set[str]:
        return {w for line in recipe[steps] for w in content_words(line)}

    return (
        _jaccard(set(normalise_title(a["title"]).split()), set(normalise_title(b["title"]).split()))
        + _jaccard(ingredients(a), ingredients(b))
        + _jaccard(method(a), method(b))
    ) / 3


def split_of(key: str, train: float, dev: float, seed: int) -> str:
    """Stable split for a dish: the same key always lands in the same split (`train` and `dev`
    shares, the rest test)."""
    digest = hashlib.sha1(f"{seed}:{key}".encode()).digest()
    point = int.from_bytes(digest[:8], "big") / 2**64
    return "train" if point < train else "dev" if point < train + dev else "test"

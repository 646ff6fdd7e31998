"""Edit pairs: a real recipe that fits a constraint is the target, the same recipe with the
constraint's foods put back is the source.

Aligned pairs (rrt.corpus.pairing) join two recipes of one dish, so their target is some step
of the dish. Here the target step does its source step's job by construction: the source is
made from the target by the substitution guide run backwards ("vegan butter" -> "butter",
"oat milk" -> "milk", "tofu" -> "chicken"), on the title, the ingredient lines and every step
alike, so the source is a whole recipe that breaks the constraint. Steps the put-back leaves
alone become "copy" pairs, a bounded share of them, so the rewriter learns to leave an
untouched step as it is. With `edit_source: mask` the put-back foods of the source steps are
masked instead ([food]); title and ingredient lines still name them.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field, replace

from rrt.config import DataSettings
from rrt.corpus.pairing import valid_column
from rrt.recipes.lexicon import CONSTRAINT_CATEGORIES
from rrt.recipes.recipe import Recipe
from rrt.recipes.substitutions import match_case
from rrt.recipes.tagger import tag_recipe

# The guide backwards, per food category: stand-in -> the food it stands for. Only inverses a
# cook would believe as the original: "apple juice" stands for brandy in a pan sauce but is
# mostly just apple juice, so it has none. None keeps a longer phrase whole ("silken tofu" is
# no chicken; it stands in for eggs or cream, which no one would write back).
PUT_BACK: dict[str, dict[str, str | None]] = {
    "dairy": {
        "nondairy butter": "butter",
        "non-dairy butter": "butter",
        "dairy-free butter": "butter",
        "vegan butter": "butter",
        "plant-based butter": "butter",
        "browned nondairy butter": "brown butter",
        "olive oil": "butter",
        "extra virgin olive oil": "butter",
        "extra-virgin olive oil": "butter",
        "olive oil spray": None,
        "coconut oil": "butter",
        "coconut butter": None,
        "soymilk": "milk",
        "soy milk": "milk",
        "almond milk": "milk",
        "oat milk": "milk",
        "rice milk": "milk",
        "cashew milk": "milk",
        "plant milk": "milk",
        "nondairy milk": "milk",
        "non-dairy milk": "milk",
        "dairy-free milk": "milk",
        "soymilk soured with lemon juice": "buttermilk",
        "evaporated coconut milk": "evaporated milk",
        "condensed coconut milk": "condensed milk",
        "oat cream": "cream",
        "coconut whipped cream": "whipped cream",
        "vegan sour cream": "sour cream",
        "vegan cream cheese": "cream cheese",
        "dairy-free cream cheese": "cream cheese",
        "nondairy ice cream": "ice cream",
        "coconut yogurt": "yogurt",
        "soy yogurt": "yogurt",
        "vegan yogurt": "yogurt",
        "dairy-free yogurt": "yogurt",
        "vegan cheese": "cheese",
        "dairy-free cheese": "cheese",
        "vegan parmesan": "parmesan",
        "nutritional yeast": "parmesan",
        "dairy-free chocolate": "milk chocolate",
        "dairy-free white chocolate": "white chocolate",
    },
    "egg": {
        "egg replacer": "egg",
        "flax egg": "egg",
        "chia egg": "egg",
        "aquafaba": "egg whites",
        "aquafaba meringue": "meringue",
        "vegan mayonnaise": "mayonnaise",
        "vegan mayo": "mayo",
        "eggless mayonnaise": "mayonnaise",
        "vegan aioli": "aioli",
        "plant milk wash": "egg wash",
    },
    "meat": {
        "tofu": "chicken",
        "firm tofu": "chicken",
        "extra-firm tofu": "chicken",
        "extra firm tofu": "chicken",
        "silken tofu": None,
        "smoked tofu": "ham",
        "tofu skin": None,
        "seitan": "beef",
        "jackfruit": "pork",
        "imitation bacon": "bacon",
        "vegan bacon": "bacon",
        "vegetarian bacon": "bacon",
        "tempeh bacon": "bacon",
        "plant-based ground meat": "ground beef",
        "meatless crumbles": "ground beef",
        "vegan sausage": "sausage",
        "vegetarian sausage": "sausage",
        "vegetable broth": "chicken broth",
        "vegetable stock": "chicken stock",
        "vegetable bouillon": "chicken bouillon",
        "mushroom broth": "beef broth",
        "vegetable shortening": "lard",
    },
    "fish": {
        "vegan fish sauce": "fish sauce",
        "vegetarian fish sauce": "fish sauce",
        "vegetarian oyster sauce": "oyster sauce",
        "vegan oyster sauce": "oyster sauce",
        "mushroom oyster sauce": "oyster sauce",
        "vegan worcestershire sauce": "worcestershire sauce",
        "vegetarian worcestershire sauce": "worcestershire sauce",
        "kombu dashi": "dashi",
    },
    "gelatin": {
        "agar": "gelatin",
        "agar agar": "gelatin",
        "agar-agar": "gelatin",
        "agar jelly": "jello",
        "vegan marshmallow": "marshmallow",
    },
    "honey": {"agave nectar": "honey", "agave syrup": "honey"},
    "nuts": {
        "sunflower seed butter": "peanut butter",
        "sunbutter": "peanut butter",
        "sunflower seed flour": "almond flour",
        "oat milk": "almond milk",
        "nut-free pesto": "pesto",
        "toffee": "praline",
    },
    "alcohol": {
        "non-alcoholic beer": "beer",
        "nonalcoholic beer": "beer",
        "alcohol-free beer": "beer",
        "non-alcoholic wine": "wine",
        "dealcoholized wine": "wine",
        "red grape juice": "red wine",
        "white grape juice": "white wine",
        "rum extract": "rum",
        "sparkling grape juice": "champagne",
        "non-alcoholic irish cream": "irish cream",
    },
}

# Oils stand for butter only as a cooking fat: a recipe that whisks, blends or drizzles its olive
# oil (a dressing, a dip) or never says how it is used keeps it.
COOKING_FATS = frozenset({"olive oil", "extra virgin olive oil", "coconut oil"})
_HEATED = re.compile(
    r"\b(?:heat|melt|saut[eé]|fry|fried|brown|sear|roast|bake|grease|skillet|pan|pot|wok|"
    r"oven|sizzl|toast|cook)",
    re.IGNORECASE,
)
_RAW = re.compile(
    r"\b(?:whisk|blend|emulsif|dressing|vinaigrette|drizzl|dip|marinade|serve|garnish|toss|"
    r"process|puree|purée|food processor|blender)",
    re.IGNORECASE,
)
MASK = "[food]"
# Title words that name a diet: gone from a source title once its foods are back
# ("Vegan Butter Cookies" -> "Butter Cookies").
DIET_WORDS: dict[str, tuple[str, ...]] = {
    "dairy": ("vegan", "plant-based", "dairy-free", "dairy free", "non-dairy", "nondairy"),
    "egg": ("vegan", "plant-based", "egg-free", "egg free", "eggless"),
    "meat": ("vegan", "plant-based", "vegetarian", "meatless", "meat-free"),
    "fish": ("vegan", "plant-based", "vegetarian", "fish-free"),
    "gelatin": ("vegan", "plant-based", "vegetarian", "gelatin-free"),
    "honey": ("vegan", "plant-based"),
    "nuts": ("nut-free", "nut free", "peanut-free"),
    "alcohol": ("non-alcoholic", "alcohol-free", "alcohol free", "virgin"),
}
FULL_SCORE = 100.0


@dataclass
class Change:
    """One stand-in put back: where it was in the target, and the food it became."""

    field: str
    index: int
    span: tuple[int, int]
    stand_in: str
    food: str
    category: str


@dataclass
class PutBack:
    """The source recipe made from a target, and every change made."""

    recipe: Recipe
    changes: list[Change] = field(default_factory=list)


def _words(phrase: str) -> str:
    return r"[\s-]+".join(re.escape(w) for w in re.split(r"[\s-]+", phrase))


def _key(phrase: str) -> str:
    return re.sub(r"[\s-]+", " ", phrase.lower())


_PATTERNS: dict[str, tuple[re.Pattern, dict[str, tuple[str | None, str]]]] = {}


def _pattern(constraint: str) -> tuple[re.Pattern, dict[str, tuple[str | None, str]]]:
    if constraint not in _PATTERNS:
        table: dict[str, tuple[str | None, str]] = {}
        for category in CONSTRAINT_CATEGORIES[constraint]:
            for stand_in, food in PUT_BACK.get(category, {}).items():
                table.setdefault(_key(stand_in), (food, category))
        # Longest first, so "extra-firm tofu" is one food and "silken tofu" stays whole.
        alternation = "|".join(_words(k) for k in sorted(table, key=len, reverse=True))
        pattern = re.compile(rf"(?<![\w-])({alternation})(s?)(?![\w-])", re.IGNORECASE)
        _PATTERNS[constraint] = (pattern, table)
    return _PATTERNS[constraint]


def put_back_text(
    text: str,
    constraint: str,
    keep: frozenset[str] = frozenset(),
    listed: dict[str, str] | None = None,
) -> tuple[str, list[Change]]:
    """A text with the constraint's stand-ins put back (but those named in `keep`), and each
    change (its span in the given text; field and index left for the caller). `listed` maps a
    short name to the food its ingredient line got back ("tofu" -> "ham" when the line held
    smoked tofu), so a step names what the lines hold."""
    pattern, table = _pattern(constraint)
    out, changes, at = [], [], 0
    for match in pattern.finditer(text):
        key = _key(match.group(1))
        food, category = table[key]
        food = (listed or {}).get(key, food)
        if food is None or key in keep:
            continue
        if match.group(2) and not food.endswith("s"):
            food += "s"
        out.append(text[at : match.start()] + match_case(match.group(1), food))
        changes.append(Change("", 0, (match.start(), match.end()), match.group(0), food, category))
        at = match.end()
    return "".join(out) + text[at:], changes


def kept_fats(recipe: Recipe, constraint: str) -> frozenset[str]:
    """The cooking fats of a recipe that stay as they are: those not used only as a heated fat."""
    pattern, _ = _pattern(constraint)
    named: dict[str, list[str]] = {}
    for step in recipe.steps:
        for match in pattern.finditer(step):
            named.setdefault(_key(match.group(1)), []).append(step)
    fats = {_key(f) for f in COOKING_FATS}
    return frozenset(
        fat
        for fat in fats
        if not named.get(fat)
        or any(_RAW.search(step) or not _HEATED.search(step) for step in named[fat])
        or pattern.search(recipe.title)
        and fat in _key(recipe.title)
    )


def listed_foods(changes: list[Change], constraint: str) -> dict[str, str]:
    """The short names of the ingredient lines' put-back stand-ins, each with the food its line
    got back, where the lines agree ("smoked tofu" -> ham gives "tofu" -> ham)."""
    _, table = _pattern(constraint)
    found: dict[str, set[str]] = {}
    for change in changes:
        if change.field != "ingredients":
            continue
        words = _key(change.stand_in).split()
        if words[-1].endswith("s") and " ".join(words) not in table:
            words[-1] = words[-1][:-1]
        for k in range(len(words)):
            name = " ".join(words[k:])
            if name in table:
                found.setdefault(name, set()).add(change.food.removesuffix("s"))
    return {name: foods.pop() for name, foods in found.items() if len(foods) == 1}


# Separators left behind once a diet word goes: "(Gluten & Dairy Free, Vegan, Paleo)".
_EMPTY_ITEMS = re.compile(r"(\s*[,&/]\s*)(?:[,&/]\s*)+")
_EDGE_ITEMS = re.compile(r"\(\s*[,&/]\s*|\s*[,&/]\s*\)")


def _diet_title(title: str, categories: set[str]) -> str:
    words = {w for c in categories for w in DIET_WORDS.get(c, ())}
    if not words:
        return title
    alternation = "|".join(_words(w) for w in sorted(words, key=len, reverse=True))
    stripped = re.sub(rf"(?<![\w-])(?:{alternation})(?![\w-])\s*", "", title, flags=re.IGNORECASE)
    stripped = _EMPTY_ITEMS.sub(lambda m: m.group(1), stripped)
    stripped = _EDGE_ITEMS.sub(lambda m: "(" if "(" in m.group(0) else ")", stripped)
    stripped = re.sub(r"\s*\(\s*\)", "", stripped)
    stripped = re.sub(r"\s{2,}", " ", stripped).strip(" -,&/")
    if not stripped:
        return title
    return stripped[:1].upper() + stripped[1:] if title[:1].isupper() else stripped


def put_back_recipe(recipe: Recipe, constraint: str) -> PutBack:
    """The recipe with the constraint's foods put back in its title, ingredient lines and steps."""
    changes: list[Change] = []

    keep = kept_fats(recipe, constraint)
    listed: dict[str, str] = {}

    def back(text: str, field_name: str, index: int) -> str:
        new, made = put_back_text(text, constraint, keep, listed)
        changes.extend(replace(c, field=field_name, index=index) for c in made)
        return new

    ingredients = [back(line, "ingredients", i) for i, line in enumerate(recipe.ingredients)]
    listed.update(listed_foods(changes, constraint))
    steps = [back(step, "steps", i) for i, step in enumerate(recipe.steps)]
    title = back(recipe.title, "title", 0)
    if changes:
        title = _diet_title(title, {c.category for c in changes})
    return PutBack(replace(recipe, title=title, ingredients=ingredients, steps=steps), changes)


def mask_step(step: str, constraint: str, keep: frozenset[str] = frozenset()) -> str:
    """A step with each stand-in the put-back would change masked ([food])."""
    _, made = put_back_text(step, constraint, keep)
    for change in reversed(made):
        step = step[: change.span[0]] + MASK + step[change.span[1] :]
    return step


@dataclass(frozen=True)
class EditSettings:
    """How edit pairs are made: the source's steps (put back or masked), the share of copy
    pairs, and the seed that picks them."""

    edit_source: str
    copy_share: float
    seed: int

    @classmethod
    def from_config(cls, data: DataSettings) -> EditSettings:
        """The edit-pair settings of the `data` block."""
        return cls(data.edit_source, data.copy_share, data.seed)


def copy_steps(
    recipe_id: str,
    constraint: str,
    changed: list[int],
    unchanged: list[int],
    settings: EditSettings,
) -> list[int]:
    """The untouched steps kept as copy pairs: about `copy_share` of a recipe's edit pairs,
    a seeded sample, so small recipes add a copy now and then rather than never."""
    if not changed or not unchanged or settings.copy_share <= 0:
        return []
    key = f"{settings.seed}|{recipe_id}|{constraint}".encode()
    rng = random.Random(int.from_bytes(hashlib.sha1(key).digest()[:8], "big"))
    wanted = len(changed) * settings.copy_share / (1 - settings.copy_share)
    count = min(len(unchanged), int(wanted + rng.random()))
    return sorted(rng.sample(unchanged, count))


def edit_pairs(row: dict, constraints: list[str], settings: EditSettings) -> list[dict]:
    """Edit pairs of one prepared recipe (a `recipes/` row), one per constraint it fits whose
    foods can be put back so that the tagger calls the source a violation."""
    target = Recipe(row["id"], row["title"], list(row["ingredients"]), list(row["steps"]))
    pairs = []
    for constraint in constraints:
        if not row[valid_column(constraint)]:
            continue
        back = put_back_recipe(target, constraint)
        if not back.changes:
            continue
        if tag_recipe(back.recipe, [constraint], lenient=False).valid[constraint]:
            continue  # nothing put back that breaks the constraint: the source tag would lie
        changed = sorted({c.index for c in back.changes if c.field == "steps"})
        unchanged = [n for n in range(len(target.steps)) if n not in changed]
        copied = copy_steps(target.id, constraint, changed, unchanged, settings)
        source_steps = list(back.recipe.steps)
        if settings.edit_source == "mask":
            source_steps = [
                mask_step(step, constraint, kept_fats(target, constraint)) if n in changed else step
                for n, step in enumerate(target.steps)
            ]
        pairs.append(
            {
                "source_id": target.id,
                "target_id": target.id,
                "constraint": constraint,
                "split": row["split"],
                "dish": row["dish"],
                "pair_score": FULL_SCORE,
                "alignment": [
                    {"source_step": n, "target_steps": [n], "scores": [FULL_SCORE]}
                    for n in range(len(target.steps))
                ],
                "source_title": back.recipe.title,
                "source_ingredients": list(back.recipe.ingredients),
                "source_steps": source_steps,
                "target_title": target.title,
                "target_ingredients": list(target.ingredients),
                "target_steps": list(target.steps),
                "pair_source": "edit",
                "learned_steps": sorted(changed + copied),
                "copied_steps": copied,
            }
        )
    return pairs

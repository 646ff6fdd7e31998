"""Substitution guide: rewrite the violating spans of a recipe with compliant foods.

Rules come from a food substitution guide (butter → nondairy butter, milk → soymilk,
egg → flax egg, bacon → imitation bacon, chicken broth → vegetable broth …). Only
spans the tagger calls harmful are replaced, so "coconut milk" never becomes "coconut
soymilk"; adjectives of the replaced food go with it ("goat milk" → "soymilk", not
"goat soymilk"); and every replacement is itself harmless to the tagger, so a second
pass changes nothing (no "imitation imitation bacon"). The names a line gives one food are
replaced once (rrt.recipes.line_foods): "shredded cheddar cheese" -> "shredded vegan cheddar
cheese", not "dairy-free cheddar vegan cheese". Ingredient lines go first; the title names
what they now hold, in a short form, or names the diet instead (rrt.recipes.titles): "Vegan
Buttermilk Pancakes", not "Soymilk soured with lemon juice Pancakes"; and a step names the
stand-in its ingredient line holds, so title, lines and steps name one substitute.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from fractions import Fraction

from rrt.recipes.lexicon import CATEGORIES, CONSTRAINT_CATEGORIES, SYNONYMS
from rrt.recipes.line_foods import Food, Replaced, diet_words, line_foods
from rrt.recipes.recipe import Recipe
from rrt.recipes.tagger import (
    Violation,
    category_violations,
    normalise_term,
    parse_constraints,
)
from rrt.recipes.titles import (
    is_title_case,
    line_stand_in,
    name_diet,
    title_case,
    title_form,
)

# Replacement per lexicon term (canonical form), per food category.
CATEGORY_RULES: dict[str, dict[str, str]] = {
    "dairy": {
        "butter": "nondairy butter",
        "unsalted butter": "nondairy butter",
        "salted butter": "nondairy butter",
        "brown butter": "browned nondairy butter",
        "ghee": "coconut oil",
        "milk": "soymilk",
        "whole milk": "soymilk",
        "skim milk": "soymilk",
        "goat milk": "soymilk",
        "goat's milk": "soymilk",
        "cow's milk": "soymilk",
        "sheep's milk": "soymilk",
        "buttermilk": "soured soymilk",
        "evaporated milk": "evaporated coconut milk",
        "condensed milk": "condensed coconut milk",
        "milk powder": "soy milk powder",
        "powdered milk": "soy milk powder",
        "milk chocolate": "dairy-free chocolate",
        "white chocolate": "dairy-free white chocolate",
        "cream": "coconut cream",
        "heavy cream": "coconut cream",
        "whipping cream": "coconut cream",
        "heavy whipping cream": "coconut cream",
        "light cream": "oat cream",
        "double cream": "coconut cream",
        "single cream": "oat cream",
        "half and half": "oat cream",
        "half & half": "oat cream",
        "half n half": "oat cream",
        "half'n'half": "oat cream",
        "whipped cream": "coconut whipped cream",
        "sour cream": "vegan sour cream",
        "cream cheese": "vegan cream cheese",
        "ice cream": "nondairy ice cream",
        "creme fraiche": "coconut yogurt",
        "crème fraîche": "coconut yogurt",
        "yogurt": "soy yogurt",
        "greek yogurt": "soy yogurt",
        "cheese": "vegan cheese",
        "parmesan": "vegan parmesan",
        "irish cream": "dairy-free irish cream",
        "dairy": "plant milk",
        "ranch": "vegan ranch",
        "ranch dressing": "vegan ranch dressing",
        "caesar dressing": "vegan caesar dressing",
        "green goddess dressing": "vegan green goddess dressing",
        "pesto": "vegan pesto",
        "buttery": "rich",
        "nutella": "dairy-free chocolate spread",
    },
    "egg": {
        "egg": "flax egg",
        "eggs": "flax egg",
        "egg yolk": "flax egg",
        "yolk": "flax egg",
        "egg white": "aquafaba",
        "hard boiled egg": "diced firm tofu",
        "boiled egg": "diced firm tofu",
        "mayonnaise": "vegan mayonnaise",
        "aioli": "vegan aioli",
        "egg noodles": "rice noodles",
        "egg wash": "plant milk wash",
        "fresh pasta": "dried pasta",
        "egg pasta": "dried pasta",
        "fresh fettuccine": "dried fettuccine",
        "fresh tagliatelle": "dried tagliatelle",
        "fresh linguine": "dried linguine",
        "fresh pappardelle": "dried pappardelle",
        "meringue": "aquafaba meringue",
        "ranch": "vegan ranch",
        "ranch dressing": "vegan ranch dressing",
        "caesar dressing": "vegan caesar dressing",
        "thousand island": "vegan thousand island",
        "blue cheese dressing": "vegan blue cheese dressing",
        "thousand island dressing": "vegan thousand island dressing",
        "green goddess dressing": "vegan green goddess dressing",
        "tartar sauce": "vegan tartar sauce",
    },
    "meat": {
        "bacon": "imitation bacon",
        "pancetta": "imitation bacon",
        "guanciale": "imitation bacon",
        "lardons": "imitation bacon",
        "prosciutto": "imitation bacon",
        "ham": "smoked tofu",
        "chicken broth": "vegetable broth",
        "chicken stock": "vegetable stock",
        "beef broth": "vegetable broth",
        "beef stock": "vegetable stock",
        "bone broth": "vegetable broth",
        "veal stock": "vegetable stock",
        "chicken bouillon": "vegetable bouillon",
        "beef bouillon": "vegetable bouillon",
        "chicken boullion": "vegetable bouillon",
        "beef boullion": "vegetable bouillon",
        "ground beef": "plant-based ground meat",
        "ground turkey": "plant-based ground meat",
        "ground pork": "plant-based ground meat",
        "ground lamb": "plant-based ground meat",
        "hamburger": "plant-based ground meat",
        "goat": "seitan",
        "chicken": "tofu",
        "turkey": "tofu",
        "beef": "seitan",
        "steak": "seitan",
        "brisket": "seitan",
        "chuck roast": "seitan",
        "pot roast": "seitan",
        "rump roast": "seitan",
        "short rib": "seitan",
        "back ribs": "seitan",
        "pork": "jackfruit",
        # Pulled pork's cuts: only young green jackfruit shreds like them.
        "pork butt": "young green jackfruit",
        "pork shoulder": "young green jackfruit",
        "boston butt": "young green jackfruit",
        "picnic shoulder": "young green jackfruit",
        "lamb": "seitan",
        "meat": "plant-based meat",
        "lard": "vegetable shortening",
        "suet": "vegetable shortening",
        "tallow": "vegetable shortening",
        "schmaltz": "vegetable oil",
        "bacon fat": "vegetable oil",
        "bacon grease": "vegetable oil",
        "chicken fat": "vegetable oil",
        "duck fat": "vegetable oil",
        "goose fat": "vegetable oil",
        "drippings": "vegetable oil",
    },
    "fish": {
        "fish sauce": "soy sauce",
        "oyster sauce": "vegetarian oyster sauce",
        "shrimp paste": "miso paste",
        "worcestershire": "vegan worcestershire sauce",
        "anchovy": "capers",
        "anchovies": "capers",
        "anchovy paste": "miso paste",
        "dashi": "kombu dashi",
        "fish stock": "vegetable stock",
        "clam juice": "vegetable broth",
        "bonito": "shiitake flakes",
        "katsuobushi": "shiitake flakes",
        "caesar dressing": "vegan caesar dressing",
    },
    "nuts": {
        "peanut butter": "sunflower seed butter",
        "almond butter": "sunflower seed butter",
        "nut butter": "sunflower seed butter",
        "almond milk": "oat milk",
        "nut milk": "oat milk",
        "almond flour": "sunflower seed flour",
        "almond meal": "sunflower seed flour",
        "almond extract": "vanilla extract",
        "almond essence": "vanilla essence",
        "peanut sauce": "sunflower seed butter sauce",
        "peanut oil": "vegetable oil",
        "nutella": "chocolate spread",
        "pesto": "nut-free pesto",
        "amaretto": "vanilla syrup",
        "frangelico": "vanilla syrup",
        "marzipan": "sugar paste",
        "praline": "toffee",
        "romesco": "nut-free romesco",
        "dukkah": "nut-free dukkah",
    },
    "honey": {"honey": "agave nectar", "honeycomb": "agave nectar", "honeyed": "agave-glazed"},
    "gelatin": {
        "gelatin": "agar",
        "gelatin sheets": "agar",
        "marshmallow": "vegan marshmallow",
        "jello": "agar jelly",
        "jell o": "agar jelly",
    },
    "alcohol": {
        "white wine": "vegetable broth",
        "red wine": "red grape juice",
        "wine": "grape juice",
        "cooking wine": "grape juice",
        "rice wine": "rice vinegar",
        "shaoxing": "rice vinegar",
        "beer": "non-alcoholic beer",
        "rum": "rum extract",
        "dark rum": "rum extract",
        "brandy": "apple juice",
        "cognac": "apple juice",
        "calvados": "apple juice",
        "bourbon": "apple juice",
        "whiskey": "apple juice",
        "scotch": "apple juice",
        "sherry": "white grape juice",
        "marsala": "white grape juice",
        "madeira": "white grape juice",
        "port wine": "red grape juice",
        "vermouth": "white grape juice",
        "mirin": "rice vinegar with sugar",
        "sake": "rice vinegar",
        "vodka": "water",
        "gin": "water",
        "tequila": "lime juice",
        "coffee liqueur": "espresso",
        "kahlua": "espresso",
        "kahlúa": "espresso",
        "orange liqueur": "orange juice",
        "grand marnier": "orange juice",
        "cointreau": "orange juice",
        "triple sec": "orange juice",
        "amaretto": "almond extract",
        "kirsch": "cherry juice",
        "champagne": "sparkling grape juice",
        "prosecco": "sparkling grape juice",
        "irish cream": "non-alcoholic irish cream",
    },
}

# Where a constraint calls for a different stand-in than the category default.
CONSTRAINT_OVERRIDES: dict[str, dict[str, str]] = {
    "fish-free": {
        "fish": "chicken",
        "salmon": "chicken",
        "tuna": "chicken",
        "cod": "chicken",
        "shrimp": "chicken",
        "crab": "chicken",
        "lobster": "chicken",
        "scallop": "chicken",
        "seafood": "chicken",
        "smoked salmon": "smoked ham",
    },
    "vegan": {
        "fish": "tofu",
        "salmon": "tofu",
        "tuna": "chickpeas",
        "shrimp": "tofu",
        "crab": "hearts of palm",
        "lobster": "hearts of palm",
    },
    "vegetarian": {
        "fish": "tofu",
        "salmon": "tofu",
        "tuna": "chickpeas",
        "shrimp": "tofu",
        "crab": "hearts of palm",
        "lobster": "hearts of palm",
    },
}

# Stand-ins for terms with no rule: "{m}" is the matched text.
FALLBACKS: dict[tuple[str, str], str] = {
    ("dairy-free", "dairy"): "dairy-free {m}",
    ("egg-free", "egg"): "egg-free {m}",
    ("nut-free", "nuts"): "sunflower seeds",
    ("fish-free", "fish"): "chicken",
    ("alcohol-free", "alcohol"): "non-alcoholic {m}",
}
DEFAULT_FALLBACK = {
    "nuts": "sunflower seeds",
    "alcohol": "non-alcoholic {m}",
    "honey": "agave nectar",
    "gelatin": "agar",
    "fish": "tofu",
}

# Class names a kind's own rule beats ("Shaoxing wine" is rice vinegar, not grape juice).
CLASS_NAMES = frozenset(
    ("wine", "liqueur", "liquor", "spirits", "alcohol", "nut", "nuts", "meat", "fish", "seafood")
)
# Strictest first, nut-free last: other guides may bring nuts in (amaretto → almond extract).
CONSTRAINT_ORDER = (
    "vegan",
    "vegetarian",
    "fish-free",
    "dairy-free",
    "egg-free",
    "alcohol-free",
    "nut-free",
)


@dataclass
class Substitution:
    """One replaced span: what, by what, where, and for which constraint."""

    from_text: str
    to_text: str
    field: str
    index: int
    constraint: str

    def to_dict(self) -> dict:
        """JSON form, in the words every output uses (rewrites.jsonl, the service): `field`,
        `index`, `original`, `replacement`, `constraint`."""
        return {
            "field": self.field,
            "index": self.index,
            "original": self.from_text,
            "replacement": self.to_text,
            "constraint": self.constraint,
        }


@dataclass
class SubstitutionResult:
    """The rewritten recipe and every substitution made."""

    recipe: Recipe
    substitutions: list[Substitution] = field(default_factory=list)


def match_case(original: str, replacement: str) -> str:
    """Give the replacement the capitalisation of the text it replaces."""
    letters = [c for c in original if c.isalpha()]
    if letters and all(c.isupper() for c in letters) and len(letters) > 1:
        return replacement.upper()
    words = original.split()
    if len(words) > 1 and all(w[:1].isupper() for w in words if w[:1].isalpha()):
        return " ".join(w[:1].upper() + w[1:] for w in replacement.split())
    if original[:1].isupper():
        return replacement[:1].upper() + replacement[1:]
    return replacement


def replacement_for(term: str, matched: str, category: str, constraint: str) -> str:
    """The guide's stand-in for one term under one constraint."""
    overrides = CONSTRAINT_OVERRIDES.get(constraint, {})
    rules = CATEGORY_RULES.get(category, {})
    head = term.rsplit(" ", 1)[-1]
    for key in (term, head):
        rule = overrides.get(key) or rules.get(key)
        if rule:
            said = matched.lower()
            if key == term and rule.endswith(f" {term}") and SYNONYMS.get(said) == term:
                # The recipe's own word for the food ("mayo" -> "vegan mayo"), which it holds.
                return rule[: -len(term)] + said
            return rule
    template = (
        FALLBACKS.get((constraint, category)) or DEFAULT_FALLBACK.get(category) or "vegan {m}"
    )
    return template.format(m=matched.lower())


def _rule(term: str, category: str, constraint: str) -> str | None:
    return CONSTRAINT_OVERRIDES.get(constraint, {}).get(term) or CATEGORY_RULES.get(
        category, {}
    ).get(term)


def shared_head(stand_in: str, term: str, matched: str) -> str:
    """A list member's stand-in without the head the list names once: "fish" of "fish or soy sauce"
    (a fish sauce) becomes "soy", "ranch" of "ranch or blue cheese dressing" "vegan ranch"."""
    *lead, head = term.split()
    words = stand_in.split()
    if not lead or head in normalise_term(matched).split() or len(words) < 2:
        return stand_in
    return " ".join(words[:-1]) if normalise_term(words[-1]) in (head, head + "s") else stand_in


def _line_stand_in(line: str, food: Food, constraint: str) -> tuple[str, str | None]:
    head, matched = food.head, line[slice(*food.head.span)]
    new = shared_head(
        replacement_for(head.term, matched, food.category, constraint), head.term, matched
    )
    # "nondairy butter" keeps the name of "unsalted butter" too: a title's "Brown Butter" takes its diet word.
    diet = diet_words(new, head.term, matched, head.term.rsplit(" ", 1)[-1])
    if len(food.names) == 1:
        if diet is not None and _rule(head.term, food.category, constraint) is None:
            # The head's stand-in keeps the food's own kind: "blue cheese" -> "vegan blue cheese".
            return f"{diet} {matched}", diet
        return new, diet
    if diet is None:
        own = _rule(food.names[0].term, food.category, constraint)
        return (own if own and head.term.rsplit(" ", 1)[-1] in CLASS_NAMES else new), None
    # The diet words cover the names that are kinds of the food ("vegan cheddar cheese"); a name
    # with a stand-in of its own only describes the food and goes ("whole milk kefir" -> "vegan kefir").
    name = ""
    for lead, after in zip(food.names, food.names[1:]):
        said = line[slice(*lead.span)]
        own = replacement_for(lead.term, said, food.category, constraint)
        keep = diet_words(own, lead.term, said) is not None
        name += (
            line[lead.span[0] : after.span[0]]
            if keep
            else line[lead.span[1] : after.span[0]].lstrip(" -")
        )
    return f"{diet} {name}{matched}", diet


def _step_stand_in(line: str, food: Food, constraint: str, replaced: list[Replaced]) -> str:
    if normalise_term(food.head.term) in DERIVED:
        return _line_stand_in(line, food, constraint)[0]  # "cheesy" is no cheese of a line
    stand_in = _step_name(line, food, constraint, replaced)
    if stand_in.split()[0] == "flax":
        # "beat in the eggs", "whisk the yolks": the flax eggs
        return FLAX_EGG + ("s" if line[food.start : food.end].lower().endswith("s") else "")
    return stand_in


def _step_name(line: str, food: Food, constraint: str, replaced: list[Replaced]) -> str:
    # A step names the food its ingredient line now holds ("Brown the ground beef" over "plant-based ground
    # meat" -> "Brown the plant-based ground meat"), less the words of the line's food the step lacks ("the
    # beef" -> "the plant-based meat"), or the line's diet words before the step's own name; a food no line
    # replaced as a line would.
    original = line[food.start : food.end]
    source = line_stand_in(normalise_term(original), food.head.term, food.category, replaced)
    # Foods of the same kind that all became one stand-in count as one ("pork belly (700g skinless pork belly)").
    kind = list({(r.stand_in, r.diet): r for r in replaced if r.category == food.category}.values())
    own = _rule(food.head.term, food.category, constraint)
    if source is None and len(kind) == 1 and (own is None or _names_part(food, kind[0])):
        # "the steak" of a recipe whose one meat line was "1 pound flank steak"; but a step's
        # mayonnaise or egg wash with a rule of its own is no part of the line's eggs.
        source = kind[0]
    if source is None:
        return _line_stand_in(line, food, constraint)[0]
    if source.diet is not None:
        return f"{source.diet} {original}"  # "the pork belly" over "vegan pork belly": "the vegan pork belly"
    # The first word stays: "egg replacer" for "the yolks" of "egg yolks" is no "replacer".
    extra = set(source.text.split()) - set(normalise_term(original).split())
    first, *rest = source.stand_in.split()
    return " ".join([first] + [w for w in rest if normalise_term(w) not in extra])


def _names_part(food: Food, line_food: Replaced) -> bool:
    return food.head.term.split()[-1] in line_food.text.split()


def _title_stand_in(line: str, food: Food, replaced: list[Replaced]) -> str | None:
    # The title names what the lines now hold; a food no line replaced keeps its name and the diet is named.
    source = line_stand_in(
        normalise_term(line[food.start : food.end]), food.head.term, food.category, replaced
    )
    if source is None or source.diet is None:
        return title_form(source, line[food.start : food.end]) if source else None
    # "Chicken Bacon" over lines of tofu and imitation bacon: each name takes its own line's stand-in.
    forms, rest = [], food.start
    for lead, after in zip(food.names, food.names[1:]):
        said = line[slice(*lead.span)]
        own = line_stand_in(normalise_term(said), lead.term, food.category, replaced)
        form = title_form(own, said) if own and own.diet is None else None
        if form is None:
            break
        forms.append(form)
        rest = after.span[0]
    return " ".join(forms + [f"{source.diet} {line[rest : food.end]}"])


# Words after a food that show it is no modifier of a noun ("the pecan and the oats").
_NOT_A_NOUN = re.compile(
    r"\s+(?:and|or|to|in|into|with|on|for|until|over|from|at|of|then|are|is|if|as|by|so|but)\b"
)


def as_modifier(line: str, end: int, original: str, new: str) -> str:
    """A plural stand-in of a singular food that names another noun's kind takes the singular:
    "the pecan coconut mixture" -> "the sunflower seed coconut mixture"."""
    if (
        new.endswith("seeds")
        and not original.lower().endswith("s")
        and re.match(r"\s+[a-z]", line[end:])
        and not _NOT_A_NOUN.match(line[end:])
    ):
        return new[:-1]
    return new


def _line_case(line: str, start: int, original: str, new: str) -> str:
    # Capitals mark a sentence's start, a Title Case line or a proper name; a stand-in is none of
    # them mid-sentence ("2 tablespoons Shaoxing wine" -> "2 tablespoons rice vinegar").
    if len(original) > 1 and original.isupper():
        return new.upper()
    if not original[:1].isupper():
        return new
    if is_title_case(line) or (len(original.split()) > 1 and is_title_case(original)):
        return title_case(new)
    before = line[:start].rstrip()
    if not re.search(r"[^\W\d_]", before) or before.endswith((".", "!", "?", ":")):
        return new[:1].upper() + new[1:]
    return new


# What joins the foods of a list on one line: "cod, halibut", "shrimp or scallops", "fish such as cod".
_LIST_JOIN = r"(?:\s*,\s*(?:(?:or|and)\s+)?|\s+(?:or|and|such as|like)\s+|\s*/\s*)"


def collapse_repeats(line: str, stand_ins: list[str]) -> str:
    """A list whose foods all became one stand-in names it once: "tofu or tofu", "tofu such as
    tofu, tofu" and "tofu (or tofu)" read "tofu", and "rice or rice noodles" "rice noodles"."""
    for stand_in in sorted({s for s in stand_ins if s.strip()}, key=len, reverse=True):
        name = re.escape(stand_in)
        *lead, _ = stand_in.split()
        if lead:
            # A member that is the stand-in less its head: "rice or rice noodles" of "rice or egg noodles".
            member = re.escape(" ".join(lead))
            line = re.sub(rf"\b{member}{_LIST_JOIN}({name})\b", r"\1", line, flags=re.IGNORECASE)
        line = re.sub(rf"\b({name})(?:{_LIST_JOIN}{name}\b)+", r"\1", line, flags=re.IGNORECASE)
        line = re.sub(
            rf"\b({name})\s*\((?:or|such as|like|e\.g\.,?)?\s*{name}\s*\)",
            r"\1",
            line,
            flags=re.IGNORECASE,
        )
    return line


DERIVED = frozenset(normalise_term(t) for c in CATEGORIES.values() for t in c.derived)
# Derived words that need the noun after them: what a buttered thing becomes.
GREASED_THINGS = (
    "pan",
    "skillet",
    "dish",
    "baking dish",
    "casserole",
    "tin",
    "mould",
    "mold",
    "sheet",
    "tray",
    "ramekin",
    "pie plate",
    "bowl",
    "loaf pan",
)
SPREAD_ON = ("toast", "bread", "roll", "bun", "bagel", "muffin", "crumpet", "slice", "sandwich")
TOSSED_WITH = ("noodles", "pasta", "rice", "popcorn", "peas", "corn", "carrots", "potatoes")
_NOUN = re.compile(r"\s+([^\W\d_]+)")
_GREASED = re.compile(
    r"(?=\s+(?:[\w/\"-]+\s+){0,2}(?:"
    + "|".join(sorted(map(re.escape, GREASED_THINGS), key=len, reverse=True))
    + r")(?:s|es)?\b)",
    re.IGNORECASE,
)
# "Butter a baking dish", "butter and flour the pan": the verb, at a clause's start.
_BUTTER_VERB = re.compile(
    r"(?=\s+(?:and\s+flour\s+)?(?:a|an|the|two|both|\d|your)\b)", re.IGNORECASE
)


def _derived(line: str, food: Food, field_name: str) -> tuple[str, int] | None:
    """A derived word's or the verb butter's rewrite, with the end of the words it replaces."""
    term, end = food.head.term, food.end
    if term == "butter" and field_name == "steps" and _BUTTER_VERB.match(line, end):
        before = line[: food.start].rstrip()
        if not before or before.endswith((".", ";", ":", "!", "?")):
            return "grease", end  # the verb: grease the pan with no butter at all
    if term != "buttered":
        return None
    if _GREASED.match(line, end):
        return "greased", end
    noun = _NOUN.match(line, end)
    if noun and noun.group(1).lower().rstrip("s") in {w.rstrip("s") for w in SPREAD_ON}:
        return f"{noun.group(1)} spread with nondairy butter", noun.end()
    if noun and noun.group(1).lower() in TOSSED_WITH:
        tossed = "and" if re.search(r"\btoss", line[: food.start], re.IGNORECASE) else "tossed with"
        return f"{noun.group(1)} {tossed} nondairy butter", noun.end()
    return "nondairy-buttered", end


_COUNT_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_COUNT = re.compile(
    r"(?:^|(?<=[\s(]))(?:\d+\s*(?:-|–|to)\s*)?(\d+|" + "|".join(_COUNT_WORDS) + r")\s+(dozen\s+)?$",
    re.IGNORECASE,
)
_CUPS = re.compile(r"(\d+\s+\d+/\d+|\d+/\d+|\d+(?:\.\d+)?|[½¼¾⅓⅔])\s*(?:cups?|c\.)\s+$")
_VULGAR = {"½": "1/2", "¼": "1/4", "¾": "3/4", "⅓": "1/3", "⅔": "2/3"}
# What a flax egg is not: beaten or warmed like an egg.
_EGG_STATE = re.compile(
    r",?\s*(?:lightly\s+|well\s+)?(?:beaten|whisked)|,?\s*(?:at\s+)?room\s+temperature",
    re.IGNORECASE,
)
FLAX_EGG = "flax egg"


def _spoons(amount: Fraction, unit: str) -> str:
    whole, part = divmod(amount, 1)
    said = " ".join(p for p in (str(whole) if whole else "", str(part) if part else "") if p) or "0"
    return f"{said} {unit}{'s' if amount > 1 else ''}"


def _cups(said: str) -> Fraction:
    said = _VULGAR.get(said, said)
    return sum((Fraction(p) for p in said.split()), Fraction(0))


def flax_eggs(count: int, each: bool = False) -> str:
    """Flax eggs for a count of eggs (or a range, made one at a time: `each`), with what they are
    made of: 1 egg is 1 tablespoon ground flaxseed and 3 tablespoons water."""
    name = FLAX_EGG + ("s" if count > 1 or each else "")
    flax, water = _spoons(Fraction(count), "tablespoon"), _spoons(Fraction(3 * count), "tablespoon")
    return f"{name} ({flax} ground flaxseed + {water} water{' each' if each else ''})"


def soured_soymilk(cups: Fraction) -> str:
    """Soymilk soured with lemon juice for an amount of buttermilk (1 tablespoon a cup)."""
    lemon = _spoons(cups, "tablespoon") if cups >= 1 else _spoons(cups * 3, "teaspoon")
    return f"soymilk with {lemon} lemon juice"


def _measured(line: str, food: Food, new: str) -> tuple[int, str, int]:
    """An ingredient line's stand-in with the amounts a cook needs, scaled by the line's count or
    cups, and the span of the words it replaces."""
    start, end = food.start, food.end
    count = _COUNT.search(line[:start])
    n = (_COUNT_WORDS.get(count.group(1).lower()) or int(count.group(1))) if count else 1
    if new == FLAX_EGG:
        state = _EGG_STATE.match(line, end)
        if count and count.start(1) > count.start():
            # "2-3 eggs": flax eggs made one at a time.
            return start, flax_eggs(1, each=True), state.end() if state else end
        if count and count.group(2):
            start, n = count.start(1), 12 * n  # "1 dozen eggs" -> "12 flax eggs (...)"
            return start, f"{n} {flax_eggs(n)}", state.end() if state else end
        return start, flax_eggs(max(n, 1)), state.end() if state else end
    if new == "aquafaba" and count and not count.group(2):
        # 3 tablespoons of aquafaba a white: "4 egg whites" -> "12 tablespoons aquafaba".
        return count.start(1), f"{_spoons(Fraction(3 * n), 'tablespoon')} aquafaba", end
    if new == "soured soymilk":
        cups = _CUPS.search(line[:start])
        if cups:
            return start, soured_soymilk(_cups(cups.group(1))), end
        return start, "soured soymilk (1 tablespoon lemon juice a cup)", end
    return start, new, end


def _apply(
    line: str,
    hits: list[tuple[Violation, str]],
    field_name: str,
    index: int,
    constraint: str,
    replaced: list[Replaced],
) -> tuple[str, list[Substitution], list[Replaced]]:
    made, done = [], []
    titled = field_name == "title" and is_title_case(line)
    for food in reversed(line_foods(line, hits, inner_word=field_name == "ingredients")):
        original, start, end = line[food.start : food.end], food.start, food.end
        derived = _derived(line, food, field_name) if field_name != "title" else None
        if derived:
            new, end = derived
            original = line[food.start : end]
            new = _line_case(line, food.start, original, new)
        elif field_name == "title":
            new = _title_stand_in(line, food, replaced)
            if new is None:
                continue  # the title names the diet instead
            new = match_case(original, new)
        elif field_name == "steps":
            new = _line_case(
                line,
                food.start,
                original,
                as_modifier(line, end, original, _step_stand_in(line, food, constraint, replaced)),
            )
        else:
            new, diet = _line_stand_in(line, food, constraint)
            done.append(
                Replaced(
                    normalise_term(original),
                    tuple(n.term for n in food.names),
                    food.head.term,
                    food.category,
                    new,
                    diet,
                )
            )
            start, new, end = _measured(line, food, new)
            original = line[start:end]
            new = _line_case(line, start, original, new)
        new = title_case(new) if titled else new
        line = line[:start] + new + line[end:]
        made.append(Substitution(original, new, field_name, index, constraint))
    return collapse_repeats(line, [m.to_text for m in made]), made[::-1], done[::-1]


def substitute_once(recipe: Recipe, constraint: str) -> SubstitutionResult:
    """Apply one constraint's guide to every harmful span of the recipe."""
    hits: dict[tuple[str, int], list[tuple[Violation, str]]] = {}
    for category in CONSTRAINT_CATEGORIES[constraint]:
        for v in category_violations(recipe, category, lenient=False):
            hits.setdefault((v.field, v.index), []).append((v, category))
    title, ingredients, steps = recipe.title, list(recipe.ingredients), list(recipe.steps)
    made: list[Substitution] = []
    replaced: list[Replaced] = []
    # Lines first, so the title can name what they now hold.
    for (field_name, index), found in sorted(
        hits.items(), key=lambda h: (h[0][0] == "title", h[0])
    ):
        if field_name == "title":
            title, subs, _ = _apply(title, found, field_name, index, constraint, replaced)
        elif field_name == "ingredients":
            ingredients[index], subs, done = _apply(
                ingredients[index], found, field_name, index, constraint, []
            )
            replaced += done
        else:
            steps[index], subs, _ = _apply(
                steps[index], found, field_name, index, constraint, replaced
            )
        made += subs
    if made:
        # Once a recipe is rewritten for a diet its title says so wherever a food is left named.
        title, named = name_diet(title, constraint)
        made += [Substitution(old, new, "title", 0, constraint) for old, new in named]
    return SubstitutionResult(
        replace(recipe, title=title, ingredients=ingredients, steps=steps), made
    )


def substitute_recipe(recipe: Recipe, constraints: str | list[str]) -> SubstitutionResult:
    """Rewrite a recipe to obey every given constraint (`vegan,nut-free` composes)."""
    names = parse_constraints(constraints)
    ordered = [c for c in CONSTRAINT_ORDER if c in names]
    result = SubstitutionResult(recipe)
    for _ in range(2):  # a second round catches what one guide brought in for another
        changed = False
        for constraint in ordered:
            step = substitute_once(result.recipe, constraint)
            if step.substitutions:
                changed = True
                result = SubstitutionResult(step.recipe, result.substitutions + step.substitutions)
        if not changed:
            break
    return result

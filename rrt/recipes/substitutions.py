"""Substitution guide: rewrite the violating spans of a recipe with compliant foods.

Rules come from a food substitution guide (butter → nondairy butter, milk → soymilk,
egg → egg replacer, bacon → imitation bacon, chicken broth → vegetable broth …). Only
spans the tagger calls harmful are replaced, so "coconut milk" never becomes "coconut
soymilk"; adjectives of the replaced food go with it ("goat milk" → "soymilk", not
"goat soymilk"); and every replacement is itself harmless to the tagger, so a second
pass changes nothing (no "imitation imitation bacon"). Titles take a short form of the
stand-in or name the diet instead (rrt.recipes.titles): "Vegan Buttermilk Pancakes", not "Soymilk soured
with lemon juice Pancakes".
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace

from rrt.recipes.lexicon import CONSTRAINT_CATEGORIES
from rrt.recipes.recipe import Recipe
from rrt.recipes.tagger import Violation, category_violations, parse_constraints
from rrt.recipes.titles import is_title_case, name_diet, title_case, title_stand_in

# Replacement per lexicon term (canonical form), per food category.
CATEGORY_RULES: dict[str, dict[str, str]] = {
    "dairy": {
        "butter": "nondairy butter", "unsalted butter": "nondairy butter", "salted butter": "nondairy butter",
        "brown butter": "browned nondairy butter", "ghee": "coconut oil", "milk": "soymilk",
        "whole milk": "soymilk", "skim milk": "soymilk", "goat milk": "soymilk", "goat's milk": "soymilk",
        "cow's milk": "soymilk", "sheep's milk": "soymilk", "buttermilk": "soymilk soured with lemon juice",
        "evaporated milk": "evaporated coconut milk", "condensed milk": "condensed coconut milk",
        "milk powder": "soy milk powder", "powdered milk": "soy milk powder",
        "milk chocolate": "dairy-free chocolate", "white chocolate": "dairy-free white chocolate",
        "cream": "coconut cream", "heavy cream": "coconut cream", "whipping cream": "coconut cream",
        "heavy whipping cream": "coconut cream", "light cream": "oat cream", "double cream": "coconut cream",
        "single cream": "oat cream", "half and half": "oat cream", "whipped cream": "coconut whipped cream",
        "sour cream": "vegan sour cream", "cream cheese": "vegan cream cheese",
        "ice cream": "nondairy ice cream", "creme fraiche": "coconut yogurt", "crème fraîche": "coconut yogurt",
        "yogurt": "soy yogurt", "greek yogurt": "soy yogurt", "cheese": "vegan cheese",
        "parmesan": "vegan parmesan", "irish cream": "dairy-free irish cream", "dairy": "plant milk",
    },
    "egg": {
        "egg": "egg replacer", "eggs": "egg replacer", "egg yolk": "egg replacer", "yolk": "egg replacer",
        "egg white": "aquafaba", "hard boiled egg": "diced firm tofu", "boiled egg": "diced firm tofu",
        "mayonnaise": "vegan mayonnaise", "aioli": "vegan aioli", "egg noodles": "rice noodles",
        "egg wash": "plant milk wash", "fresh pasta": "dried pasta", "egg pasta": "dried pasta",
        "fresh fettuccine": "dried fettuccine", "fresh tagliatelle": "dried tagliatelle",
        "fresh linguine": "dried linguine", "fresh pappardelle": "dried pappardelle",
        "meringue": "aquafaba meringue",
    },
    "meat": {
        "bacon": "imitation bacon", "pancetta": "imitation bacon", "guanciale": "imitation bacon",
        "lardons": "imitation bacon", "prosciutto": "imitation bacon", "ham": "smoked tofu",
        "chicken broth": "vegetable broth", "chicken stock": "vegetable stock", "beef broth": "vegetable broth",
        "beef stock": "vegetable stock", "bone broth": "vegetable broth", "veal stock": "vegetable stock",
        "chicken bouillon": "vegetable bouillon", "beef bouillon": "vegetable bouillon",
        "ground beef": "plant-based ground meat", "ground turkey": "plant-based ground meat",
        "ground pork": "plant-based ground meat", "ground lamb": "plant-based ground meat",
        "hamburger": "plant-based ground meat", "chicken": "tofu", "turkey": "tofu", "beef": "seitan",
        "steak": "seitan", "pork": "jackfruit", "lamb": "seitan", "meat": "plant-based meat",
        "lard": "vegetable shortening", "suet": "vegetable shortening", "tallow": "vegetable shortening",
        "schmaltz": "vegetable oil", "bacon fat": "vegetable oil", "bacon grease": "vegetable oil",
        "chicken fat": "vegetable oil", "drippings": "vegetable oil",
    },
    "fish": {
        "fish sauce": "soy sauce", "oyster sauce": "vegetarian oyster sauce", "shrimp paste": "miso paste",
        "worcestershire": "vegan worcestershire sauce", "anchovy": "capers", "anchovies": "capers",
        "anchovy paste": "miso paste", "dashi": "kombu dashi", "fish stock": "vegetable stock",
        "clam juice": "vegetable broth", "bonito": "shiitake flakes", "katsuobushi": "shiitake flakes",
    },
    "nuts": {
        "peanut butter": "sunflower seed butter", "almond butter": "sunflower seed butter",
        "nut butter": "sunflower seed butter", "almond milk": "oat milk", "nut milk": "oat milk",
        "almond flour": "sunflower seed flour", "almond meal": "sunflower seed flour",
        "almond extract": "vanilla extract", "peanut oil": "vegetable oil", "nutella": "chocolate spread",
        "pesto": "nut-free pesto", "amaretto": "vanilla syrup", "frangelico": "vanilla syrup",
        "marzipan": "sugar paste", "praline": "toffee",
    },
    "honey": {"honey": "agave nectar", "honeycomb": "agave nectar"},
    "gelatin": {"gelatin": "agar", "gelatin sheets": "agar", "marshmallow": "vegan marshmallow",
                "jello": "agar jelly", "jell o": "agar jelly"},
    "alcohol": {
        "white wine": "vegetable broth", "red wine": "red grape juice", "wine": "grape juice",
        "cooking wine": "grape juice", "rice wine": "rice vinegar", "shaoxing": "rice vinegar",
        "beer": "non-alcoholic beer", "rum": "rum extract", "dark rum": "rum extract",
        "brandy": "apple juice", "cognac": "apple juice", "calvados": "apple juice",
        "bourbon": "apple juice", "whiskey": "apple juice", "scotch": "apple juice",
        "sherry": "white grape juice", "marsala": "white grape juice", "madeira": "white grape juice",
        "port wine": "red grape juice", "vermouth": "white grape juice", "mirin": "rice vinegar with sugar",
        "sake": "rice vinegar", "vodka": "water", "gin": "water", "tequila": "lime juice",
        "coffee liqueur": "espresso", "kahlua": "espresso", "kahlúa": "espresso",
        "orange liqueur": "orange juice", "grand marnier": "orange juice", "cointreau": "orange juice",
        "triple sec": "orange juice", "amaretto": "almond extract", "kirsch": "cherry juice",
        "champagne": "sparkling grape juice", "prosecco": "sparkling grape juice",
        "irish cream": "non-alcoholic irish cream",
    },
}

# Where a constraint calls for a different stand-in than the category default.
CONSTRAINT_OVERRIDES: dict[str, dict[str, str]] = {
    "fish-free": {"fish": "chicken", "salmon": "chicken", "tuna": "chicken", "cod": "chicken",
                  "shrimp": "chicken", "crab": "chicken", "lobster": "chicken", "scallop": "chicken",
                  "seafood": "chicken", "smoked salmon": "smoked ham"},
    "vegan": {"fish": "tofu", "salmon": "tofu", "tuna": "chickpeas", "shrimp": "tofu",
              "crab": "hearts of palm", "lobster": "hearts of palm"},
    "vegetarian": {"fish": "tofu", "salmon": "tofu", "tuna": "chickpeas", "shrimp": "tofu",
                   "crab": "hearts of palm", "lobster": "hearts of palm"},
}

# Stand-ins for terms with no rule: "{m}" is the matched text.
FALLBACKS: dict[tuple[str, str], str] = {
    ("dairy-free", "dairy"): "dairy-free {m}", ("egg-free", "egg"): "egg-free {m}",
    ("nut-free", "nuts"): "sunflower seeds", ("fish-free", "fish"): "chicken",
    ("alcohol-free", "alcohol"): "non-alcoholic {m}",
}
DEFAULT_FALLBACK = {"nuts": "sunflower seeds", "alcohol": "non-alcoholic {m}", "honey": "agave nectar",
                    "gelatin": "agar", "fish": "tofu"}

# Words that belong to the replaced food and go with it.
ABSORB_BEFORE = {
    "dairy": ("whole", "skim", "low-fat", "lowfat", "nonfat", "fat-free", "reduced-fat", "full-fat",
              "2%", "1%", "goat", "goat's", "cow's", "sheep's", "raw", "unsalted", "salted", "cultured",
              "sweet"),
    "egg": ("large", "medium", "small", "extra-large", "jumbo", "whole", "free-range", "organic"),
    "meat": ("boneless", "skinless", "lean", "extra-lean", "bone-in", "skin-on", "thick-cut", "center-cut"),
    "fish": ("wild", "wild-caught", "farmed", "fresh", "skinless", "boneless", "skin-on", "jumbo",
             "large", "medium", "raw", "cooked", "peeled", "deveined"),
}
ABSORB_AFTER = {
    "meat": ("breast", "breasts", "thigh", "thighs", "cutlet", "cutlets", "wing", "wings", "drumstick",
             "drumsticks", "leg", "legs", "chop", "chops", "fillet", "fillets", "tenderloin", "loin",
             "shoulder", "roast", "mince", "meat", "strips", "slices", "pieces", "bits"),
    "fish": ("fillet", "fillets", "steak", "steaks", "meat", "pieces"),
}
# Strictest first, nut-free last: other guides may bring nuts in (amaretto → almond extract).
CONSTRAINT_ORDER = ("vegan", "vegetarian", "fish-free", "dairy-free", "egg-free", "alcohol-free", "nut-free")


@dataclass
class Substitution:
    """One replaced span: what, by what, where, and for which constraint."""

    from_text: str
    to_text: str
    field: str
    index: int
    constraint: str

    def to_dict(self) -> dict:
        """JSON form (`from`, `to`, `field`, `index`, `constraint`)."""
        row = asdict(self)
        return {"from": row.pop("from_text"), "to": row.pop("to_text"), **row}


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
        if key in overrides:
            return overrides[key]
        if key in rules:
            return rules[key]
    template = FALLBACKS.get((constraint, category)) or DEFAULT_FALLBACK.get(category) or "vegan {m}"
    return template.format(m=matched.lower())


def _widen(line: str, start: int, end: int, category: str) -> tuple[int, int]:
    before = ABSORB_BEFORE.get(category, ())
    after = ABSORB_AFTER.get(category, ())
    if before:
        pattern = re.compile(r"(?:(?:" + "|".join(map(re.escape, before)) + r")[\s,]+)+$", re.I)
        found = pattern.search(line[:start])
        if found:
            start = found.start()
    if after:
        found = re.match(r"(?:\s+(?:" + "|".join(map(re.escape, after)) + r"))+\b", line[end:], re.I)
        if found:
            end += found.end()
    return start, end


def _apply(line: str, hits: list[tuple[Violation, str]], field_name: str, index: int,
           constraint: str) -> tuple[str, list[Substitution]]:
    made = []
    taken: list[tuple[int, int]] = []
    titled = field_name == "title" and is_title_case(line)
    for violation, category in sorted(hits, key=lambda h: h[0].span[0], reverse=True):
        start, end = _widen(line, *violation.span, category)
        if any(start < b and a < end for a, b in taken):
            continue  # overlaps a span already replaced on this line
        original = line[start:end]
        new = replacement_for(violation.term, line[slice(*violation.span)], category, constraint)
        if field_name == "title":
            new = title_stand_in(new, original)
            if new is None:
                continue  # no dish is named after this stand-in: the title names the diet instead
        new = match_case(original, new)
        new = title_case(new) if titled else new
        line = line[:start] + new + line[end:]
        taken = [(a + len(new) - (end - start), b + len(new) - (end - start)) if a >= end else (a, b)
                 for a, b in taken] + [(start, start + len(new))]
        made.append(Substitution(original, new, field_name, index, constraint))
    return line, made[::-1]


def substitute_once(recipe: Recipe, constraint: str) -> SubstitutionResult:
    """Apply one constraint's guide to every harmful span of the recipe."""
    hits: dict[tuple[str, int], list[tuple[Violation, str]]] = {}
    for category in CONSTRAINT_CATEGORIES[constraint]:
        for v in category_violations(recipe, category, lenient=False):
            hits.setdefault((v.field, v.index), []).append((v, category))
    title, ingredients, steps = recipe.title, list(recipe.ingredients), list(recipe.steps)
    made: list[Substitution] = []
    for (field_name, index), found in sorted(hits.items()):
        if field_name == "title":
            title, subs = _apply(title, found, field_name, index, constraint)
        elif field_name == "ingredients":
            ingredients[index], subs = _apply(ingredients[index], found, field_name, index, constraint)
        else:
            steps[index], subs = _apply(steps[index], found, field_name, index, constraint)
        made += subs
    if made:
        # Once a recipe is rewritten for a diet its title says so wherever a food is left named.
        title, named = name_diet(title, constraint)
        made += [Substitution(old, new, "title", 0, constraint) for old, new in named]
    return SubstitutionResult(replace(recipe, title=title, ingredients=ingredients, steps=steps), made)


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

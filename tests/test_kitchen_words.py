"""Kitchen words named after food: utensils, papers and cloths, moulds and size comparisons are
classes, each with a violating twin that names the food itself."""

from __future__ import annotations

import pytest
from conftest import make_recipe
from hypothesis import given, settings
from hypothesis import strategies as st

from rrt.recipes.lexicon import (
    CATEGORIES,
    CONSTRAINTS,
    FILLED_MOULDS,
    MOULDS,
    NOT_A_MEASURE,
    SIZE_COMPARISONS,
    UTENSILS,
    WRAPPINGS,
)
from rrt.recipes.recipe import Recipe
from rrt.recipes.tagger import normalise_term, tag_recipe

FEW = settings(max_examples=120, deadline=None, derandomize=True, database=None)


def _singular_terms(category: str) -> list[str]:
    """A category's terms a step names as food (no dish terms, no derived words: a buttered pan is
    butter) and that are no plural of another term."""
    cat = CATEGORIES[category]
    keys = {normalise_term(t) for t in cat.terms}
    dishes = {normalise_term(t) for t in cat.dish_terms + cat.derived}
    return sorted(
        t.lower()
        for t in cat.terms
        if (n := normalise_term(t)) not in dishes
        and not (n.endswith("s") and {n[:-1], n[:-2], n[:-3] + "y"} & keys)
    )


FOODS = st.sampled_from(sorted(CATEGORIES)).flatmap(
    lambda c: st.tuples(st.just(c), st.sampled_from(_singular_terms(c)))
)
NOUNS = st.sampled_from(UTENSILS + WRAPPINGS + MOULDS)
JOIN = st.sampled_from([" ", "-"])


def _flagged(step: str, category: str, ingredients=("1 cup flour", "1 pinch salt")) -> list[str]:
    """The text of each span of one category's violations in a step, in order."""
    result = tag_recipe(Recipe("p", "Dish", list(ingredients), [step, "Serve."]), CONSTRAINTS)
    spans = {
        v.span
        for vs in result.violations.values()
        for v in vs
        if v.category == category and v.field == "steps" and v.index == 0
    }
    return [step[slice(*span)] for span in sorted(spans)]


@FEW
@given(food=FOODS, noun=NOUNS, join=JOIN, plural=st.booleans())
def test_a_food_word_before_a_kitchen_noun_names_the_thing_not_the_food(food, noun, join, plural):
    category, word = food
    if noun in MOULDS and normalise_term(word) in {normalise_term(f) for f in FILLED_MOULDS}:
        return  # a jello mould is the dish itself: see the filled-mould test
    thing = (
        word + join + noun + ("s" if plural and noun != "knife" and not noun.endswith("s") else "")
    )
    assert _flagged(f"Use a {thing}.", category) == []
    assert _flagged(f"Add the {word}.", category) == [word]
    # The thing hides nothing else on its line: the food named again still counts.
    assert _flagged(f"Use a {thing}, then add the {word}.", category) == [word]


@FEW
@given(
    food=FOODS,
    comparison=st.sampled_from(SIZE_COMPARISONS),
    article=st.sampled_from(["", "a", "an", "one", "a large", "a small"]),
)
def test_a_food_that_measures_a_size_is_not_the_food(food, comparison, article):
    category, word = food
    measure = f"{comparison} {article} {word}".replace("  ", " ")
    assert _flagged(f"Roll into balls {measure}.", category) == []
    assert _flagged(f"Roll into {word}-sized balls.", category) == []
    assert _flagged(f"Roll into {word} sized balls.", category) == []
    assert _flagged(f"Roll into balls {measure} and add the {word}.", category) == [word]


@FEW
@given(
    food=FOODS,
    comparison=st.sampled_from(SIZE_COMPARISONS),
    determiner=st.sampled_from([w for w in NOT_A_MEASURE if w != "or"]),
)  # "or X" offers X as an alternative
def test_a_size_of_a_determined_food_is_that_food(food, comparison, determiner):
    category, word = food
    assert _flagged(f"Cut the tofu {comparison} {determiner} {word}.", category) == [word]


@FEW
@given(
    food=FOODS,
    thing=st.sampled_from(["{}-sized knob of ginger", "{} grater", "{} paper", "{} mould"]),
)
def test_a_tool_or_size_on_an_ingredient_line_does_not_excuse_the_food_in_a_step(food, thing):
    category, word = food
    line = "1 " + thing.format(word)
    if thing.endswith("mould") and normalise_term(word) in {
        normalise_term(f) for f in FILLED_MOULDS
    }:
        return
    assert _flagged(f"Scatter over the {word}.", category, [line, "1 cup flour"]) == [word]


@pytest.mark.parametrize("word", FILLED_MOULDS)
def test_a_filled_mould_is_the_food(word):
    category = next(
        c for c, cat in CATEGORIES.items() if normalise_term(word) in map(normalise_term, cat.terms)
    )
    assert _flagged(f"Unmould the {word} mould onto a plate.", category) == [word]
    assert _flagged(f"Drain the {word} tin.", category) == [word]


# Held-out-like probes, (step, constraint, expected validity), each class beside its twins.
UTENSIL_PROBES = [
    ("Grate with a cheese grater.", "dairy-free", True),
    ("Grate the cheese with a grater.", "dairy-free", False),
    ("Beat the batter with an egg beater.", "egg-free", True),
    ("Beat the eggs with a beater.", "egg-free", False),
    ("Lift the fritters with a fish slice.", "fish-free", True),
    ("Fry the fish slices.", "fish-free", False),
    ("Crack the shells with a nutcracker.", "nut-free", True),
    ("Crack the shells with a nut-cracker.", "nut-free", True),
    ("Crack the walnuts.", "nut-free", False),
    ("Crush the seeds in a nut grinder.", "nut-free", True),
    ("Grind the nuts.", "nut-free", False),
    ("Pick out the flesh with a lobster pick.", "fish-free", True),
    ("Pick out the lobster meat.", "fish-free", False),
    ("Lift the squash with a meat fork.", "vegetarian", True),
    ("Lift the meat with a fork.", "vegetarian", False),
    ("Cook the beef until fork tender.", "vegetarian", False),
    ("Baste the squash with a turkey baster.", "vegetarian", True),
    ("Baste the turkey.", "vegetarian", False),
    ("Whip the aquafaba in a cream whipper.", "dairy-free", True),
    ("Whip the cream.", "dairy-free", False),
    ("Open the bottle with a beer opener.", "alcohol-free", True),
    ("Open the beer.", "alcohol-free", False),
    ("Pour the juice into wine glasses.", "alcohol-free", True),
    ("Pour the wine into glasses.", "alcohol-free", False),
    ("Spread the jam with butter knives.", "dairy-free", True),
    ("Spread with a butter knife, then brush with butter.", "dairy-free", False),
    ("Spread butter with a butter knife.", "dairy-free", False),
    ("Cut the quince paste with a cheese knife and add the cheese.", "dairy-free", False),
    ("Slice the cheese paper thin.", "dairy-free", False),
    ("Serve with cheese crackers.", "dairy-free", False),
]

WRAPPING_PROBES = [
    ("Line the tin with butter paper.", "dairy-free", True),
    ("Brush the tin with butter.", "dairy-free", False),
    ("Line with butter paper and brush with butter.", "dairy-free", False),
    ("Strain through a cheese cloth.", "dairy-free", True),
    ("Strain through cheese-cloth.", "dairy-free", True),
    ("Strain through a cloth, then add the cheese.", "dairy-free", False),
    ("Wrap the tofu in butter muslin.", "dairy-free", True),
    ("Wrap the butter in muslin.", "dairy-free", False),
    ("Keep the vegan block in cheese paper.", "dairy-free", True),
    ("Wrap the cheese in paper.", "dairy-free", False),
    ("Sow the seeds in an egg carton.", "egg-free", True),
    ("Keep the eggs in their carton.", "egg-free", False),
    ("Cut the top off a milk carton to use as a mould.", "dairy-free", True),
    ("Pour the milk from the carton.", "dairy-free", False),
]

MOULD_PROBES = [
    ("Press the rice into an egg mould.", "egg-free", True),
    ("Press into egg-shaped moulds.", "egg-free", True),
    ("Press the eggs into a mould.", "egg-free", False),
    ("Bake in a fish-shaped pan.", "fish-free", True),
    ("Bake the cake in a fish pan.", "fish-free", True),
    ("Bake the fish in a pan.", "fish-free", False),
    ("Pour the jelly into a fish mold.", "fish-free", True),
    ("Pour into a fish mould and add the fish.", "fish-free", False),
    ("Bake the sponge in a lamb mould.", "vegetarian", True),
    ("Bake the lamb in a tin.", "vegetarian", False),
    ("Form the rice into a fish shape.", "fish-free", True),
    ("Add the cheese and shape into a log.", "dairy-free", False),
    ("Cut out with a fish cutter.", "fish-free", True),
    ("Cut the fish with a cutter.", "fish-free", False),
    ("Press the dough into walnut moulds.", "nut-free", True),
    ("Press a walnut into each mould.", "nut-free", False),
    ("Unmould the jello mold onto a plate.", "vegetarian", False),
    ("Drain the sardine tin.", "fish-free", False),
    ("Spoon the chicken pan juices over the squash.", "vegetarian", False),
    ("Serve the salmon pan-seared.", "fish-free", False),
    ("Add the eggs pan by pan.", "egg-free", False),
]

SIZE_PROBES = [
    ("Shape into walnut-sized balls.", "nut-free", True),
    ("Shape into walnut sized balls.", "nut-free", True),
    ("Add a walnut.", "nut-free", False),
    ("Roll into balls the size of a walnut.", "nut-free", True),
    ("Roll into balls the size of walnuts.", "nut-free", True),
    ("Roll the balls in walnuts.", "nut-free", False),
    ("Roll into balls about the size of an egg.", "egg-free", True),
    ("Roll into balls the size of a large egg.", "egg-free", True),
    ("Form egg-sized balls.", "egg-free", True),
    ("Roll the balls in egg.", "egg-free", False),
    ("Pinch off pieces as big as a hazelnut.", "nut-free", True),
    ("Add a hazelnut.", "nut-free", False),
    ("Cut into pieces no bigger than an almond.", "nut-free", True),
    ("Add an almond.", "nut-free", False),
    ("Cut the tofu into pieces about the size of a prawn.", "fish-free", True),
    ("Cut the tofu to the size of the shrimp.", "fish-free", False),
    ("Roll into balls, walnut size.", "nut-free", True),
    ("Roll into balls the size of a walnut and roll them in walnuts.", "nut-free", False),
    ("Roll into balls the size of a walnut, then add the walnuts.", "nut-free", False),
    ("Add a knob of butter the size of a walnut.", "nut-free", True),
    ("Add a knob of butter the size of a walnut.", "dairy-free", False),
    ("Add an egg-sized lump of butter.", "egg-free", True),
    ("Add an egg-sized lump of butter.", "dairy-free", False),
]

PROBES = {
    "utensils": UTENSIL_PROBES,
    "wrappings": WRAPPING_PROBES,
    "moulds": MOULD_PROBES,
    "sizes": SIZE_PROBES,
}


@pytest.mark.parametrize(
    "kind,step,constraint,expected", [(kind, *row) for kind, rows in PROBES.items() for row in rows]
)
def test_kitchen_word_probes_and_their_twins(kind, step, constraint, expected):
    recipe = make_recipe(["1 cup flour", "1 pinch salt"], steps=[step, "Serve."])
    result = tag_recipe(recipe, [constraint])
    assert result.valid[constraint] is expected, (kind, result.to_dict())


@pytest.mark.parametrize(
    "line,step,constraint,expected",
    [
        ("1 walnut-sized knob of ginger", "Scatter over the walnuts.", "nut-free", False),
        ("1 piece cheese cloth", "Sprinkle with cheese.", "dairy-free", False),
        ("1 piece cheese cloth", "Strain through the cheese cloth.", "dairy-free", True),
        ("1 egg-sized lump of dough", "Beat in the eggs.", "egg-free", False),
        (
            "1 cup coconut milk",
            "Add the milk.",
            "dairy-free",
            True,
        ),  # a harmless food still refers back
    ],
)
def test_a_kitchen_word_on_an_ingredient_line_excuses_no_step(line, step, constraint, expected):
    result = tag_recipe(make_recipe([line, "1 cup flour"], steps=[step, "Serve."]), [constraint])
    assert result.valid[constraint] is expected, result.to_dict()

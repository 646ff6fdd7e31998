"""The words of an ingredient line that a swap makes untrue: no deveined tofu, no split tofu."""

from __future__ import annotations

import pytest
from conftest import make_recipe
from hypothesis import given
from hypothesis import strategies as st

from rrt.recipes.cook_dishes import scrambles_its_eggs, tofu_scramble
from rrt.recipes.cook_lines import adapt_lines
from rrt.recipes.cook_notes import adapt_steps
from rrt.recipes.substitutions import substitute_recipe
from rrt.recipes.tagger import text_violations


def _lines(lines, constraint):
    guided = substitute_recipe(make_recipe(lines, ["Cook."]), constraint)
    return adapt_lines(guided.recipe.ingredients, guided.substitutions, [constraint])


@pytest.mark.parametrize(
    "line,constraint,expected",
    [
        (
            "4 ounces raw shrimp, thawed, peeled, deveined and cut into 3/4-inch chunks",
            "vegan",
            "4 ounces tofu, cut into 3/4-inch chunks",
        ),
        # Chicken in place of shrimp may come frozen, but is never deveined.
        (
            "4 ounces raw shrimp, thawed, peeled, deveined and cut into chunks",
            "fish-free",
            "4 ounces chicken, thawed, cut into chunks",
        ),
        ("2 lbs salmon, (skin removed)", "vegetarian", "2 lbs tofu"),
        ("16 ounces of canned salmon (drained)", "vegetarian", "16 ounces of tofu (drained)"),
        ("8 ounces lump crab meat", "vegetarian", "8 ounces hearts of palm"),
        ("1 lb chicken thighs, skin-on, bone-in, cut up", "vegan", "1 lb tofu, cut up"),
        # A count of pieces becomes blocks a cook can buy.
        ("1 split chicken breast", "vegan", "1 (14-ounce) block firm tofu"),
        ("4 boneless, skinless chicken breasts", "vegan", "3 (14-ounce) blocks firm tofu"),
        # Two meats that became one stand-in, and a note on where to buy the meat.
        ("2 lbs short ribs (bone in) (or back ribs bone in )", "vegan", "2 lbs seitan"),
        ("2 cups shredded chicken (we use rotisserie chicken)", "vegan", "2 cups shredded tofu"),
        ("3 1/2 pounds pork shoulder (pork butt)", "vegan", "3 1/2 pounds young green jackfruit"),
        # Other swaps' lines stay as the guide wrote them.
        ("2 cups milk", "vegan", "2 cups soymilk"),
        ("1 lb shrimp, peeled", "dairy-free", "1 lb shrimp, peeled"),
    ],
)
def test_a_line_loses_the_words_its_swap_makes_untrue(line, constraint, expected):
    assert _lines([line], constraint) == [expected]
    assert not text_violations(expected, [constraint])


@given(
    st.lists(
        st.sampled_from(
            [
                "1 lb shrimp, peeled and deveined",
                "2 salmon fillets, skin on",
                "1 cup milk",
                "3 eggs, beaten",
                "1 onion, peeled",
                "4 chicken thighs, boneless",
            ]
        ),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(["vegan", "vegetarian", "fish-free", "egg-free"]),
)
def test_adapting_lines_keeps_their_number_and_their_other_foods(lines, constraint):
    adapted = _lines(lines, constraint)
    assert len(adapted) == len(lines)
    for source, line in zip(lines, adapted, strict=True):
        if "onion" in source:
            assert line == source
        assert line and not line.endswith(",")


SCRAMBLE = {
    "title": "Breakfast Tacos",
    "ingredients": ["8 large eggs", "1 tsp salt", "8 tortillas"],
    "steps": [
        "Whisk eggs and salt in a large bowl.",
        "Add eggs to the skillet; scramble until softly set, 3 to 4 minutes.",
        "Top the tortillas with the scrambled eggs.",
    ],
}


def _scrambled(source, constraint):
    from rrt.modelling.rewriter import guide_rewrite

    rewritten, subs = guide_rewrite(source, [constraint])
    rewritten, subs = tofu_scramble(source, rewritten, subs)
    steps = adapt_steps(source["steps"], rewritten["steps"], subs, [constraint])
    return rewritten, [s for s, _ in steps], [n for _, notes in steps for n in notes]


@pytest.mark.parametrize("constraint", ["egg-free", "vegan"])
def test_scrambled_eggs_become_a_tofu_scramble_not_flax_eggs(constraint):
    rewritten, steps, notes = _scrambled(SCRAMBLE, constraint)
    assert rewritten["ingredients"][0] == "16 ounces firm tofu, crumbled"
    assert steps == [
        "Mash tofu and salt in a large bowl.",
        (
            "Add tofu to the skillet; cook, stirring, until heated through and lightly golden, "
            "3 to 4 minutes."
        ),
        "Top the tortillas with the scrambled tofu.",
    ]
    assert not any("flax" in n for n in notes)
    assert not text_violations(" ".join(steps + rewritten["ingredients"]), [constraint])


def test_eggs_a_recipe_bakes_stay_flax_eggs():
    baked = {
        **SCRAMBLE,
        "steps": ["Whisk the eggs into the batter.", "Bake 20 minutes; serve with scrambled tofu."],
    }
    assert not scrambles_its_eggs(baked["steps"])
    rewritten, _, notes = _scrambled(baked, "egg-free")
    assert rewritten["ingredients"][0].startswith("8 flax eggs") and notes

"""Ingredient matcher: line → name, and step → ingredients it mentions."""

from __future__ import annotations

import pytest

from rrt.recipes.ingredients import ingredient_name, recipe_ingredients, step_ingredients


@pytest.mark.parametrize(
    "line,name",
    [
        ("1/2 cup (2 3/8 ounces) all-purpose flour", "all-purpose flour"),
        ("2 large eggs", "eggs"),
        ("1 can (14 ounces) coconut milk", "coconut milk"),
        ("½ teaspoon ground nutmeg", "nutmeg"),
        ("1½ cups whole milk", "whole milk"),
        ("3 cloves garlic, smashed", "garlic"),
        ("2-3 large heads of broccoli (~1 1/2 lb.), cut into small florets", "broccoli"),
        ("1 tablespoon unsalted butter, melted", "unsalted butter"),
        ("1 (8 oz) package cream cheese, softened", "cream cheese"),
        ("4 1/2 cups water", "water"),
        ("Kosher salt, to taste", "kosher salt"),
        ("1 lb Sausage", "sausage"),
        ("24 ladyfingers", "ladyfingers"),
        ("¼ cup finely chopped fresh parsley", "parsley"),
    ],
)
def test_ingredient_name(line, name):
    assert ingredient_name(line) == name


def test_step_ingredients_in_order_of_appearance():
    names = ["all-purpose flour", "granulated sugar", "eggs", "unsalted butter", "milk"]
    found = step_ingredients("Beat the butter and sugar, then add the eggs one at a time.", names)
    assert [f.name for f in found] == ["unsalted butter", "granulated sugar", "eggs"]


def test_longest_match_claims_the_span():
    names = ["soy sauce", "tomato sauce", "olive oil"]
    found = step_ingredients("Stir in the tomato sauce and heat the oil.", names)
    assert [f.name for f in found] == ["tomato sauce", "olive oil"]


def test_stop_words_and_units_do_not_match():
    names = ["1 cup of water"]
    assert (
        step_ingredients(
            "Cut it into cups of the size you like.", [ingredient_name(n) for n in names]
        )
        == []
    )


def test_recipe_ingredients_shape():
    out = recipe_ingredients(
        ["2 cups milk", "3 tablespoons cocoa powder"], ["Warm the milk.", "Whisk in the cocoa."]
    )
    assert out == {"names": ["milk", "cocoa powder"], "steps": [["milk"], ["cocoa powder"]]}

"""Ingredient matcher: line → name, and step → ingredients it mentions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rrt.recipes import ingredients
from rrt.recipes.ingredients import (
    NAME_WORDS,
    content_words,
    ingredient_name,
    recipe_ingredients,
    step_ingredients,
)
from testing.work_count import lines_run


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


# ---------------------------------------------------------------- the matcher against every pair of places


def longest_run_everywhere(name: list[str], step: list[str]) -> tuple[int, int]:
    """(start in step, length) of the longest run of name's words in step, tried from every pair
    of places; the earliest start of equal length, (0, 0) when they share no word."""
    best = (0, 0)
    for i in range(len(step)):
        for j in range(len(name)):
            k = 0
            while i + k < len(step) and j + k < len(name) and step[i + k] == name[j + k]:
                k += 1
            if k > best[1]:
                best = (i, k)
    return best


def step_ingredients_everywhere(step: str, names: list[str]) -> list[tuple[int, str, int, int]]:
    """What step_ingredients finds, by the plain method: each name's longest run, then the longest
    claims its words first (ties to the earlier line); in order of appearance."""
    words = content_words(step)
    runs = [(i, n, *longest_run_everywhere(content_words(n), words)) for i, n in enumerate(names)]
    claimed: list[tuple[int, str, int, int]] = []
    for run in sorted((r for r in runs if r[3]), key=lambda r: (-r[3], r[0])):
        span = set(range(run[2], run[2] + run[3]))
        if not any(span & set(range(c[2], c[2] + c[3])) for c in claimed):
            claimed.append(run)
    return sorted(claimed, key=lambda c: (c[2], c[0]))


# Few words, so runs repeat and overlap, the shapes a shortcut would get wrong; a long step of
# them pairs a name's words with many places (the automaton), a short one with few.
WORDS = st.sampled_from(["salt", "pepper", "oil", "the", "2"])


@settings(max_examples=100, deadline=None)
@given(
    step=st.integers(0, 40)
    .flatmap(lambda n: st.lists(WORDS, min_size=n, max_size=n))
    .map(" ".join),
    names=st.lists(st.lists(WORDS, min_size=1, max_size=6).map(" ".join), max_size=8),
)
def test_step_ingredients_is_the_longest_run_from_every_pair_of_places(step, names):
    found = [(f.index, f.name, f.start, f.length) for f in step_ingredients(step, names)]
    assert found == step_ingredients_everywhere(step, names)


def _matching(scale: int):
    """Eight ingredient names and a step, each one word repeated, `scale` times a base length."""
    names = [" ".join(["salt"] * (12 * scale - i)) for i in range(8)]
    step = " ".join(["salt"] * 25 * scale)
    return lambda: step_ingredients(step, names)


def test_matching_work_grows_with_the_words_not_with_their_pairs():
    small, large = _matching(1), _matching(8)
    small(), large()  # the word caches
    few = lines_run(small, [ingredients])
    # Extending a run from every pair of equal words ran about 500 times the lines at 8x.
    many = lines_run(large, [ingredients], limit=8 * few)
    assert many <= 8 * few, (few, many)


def test_a_name_is_matched_by_its_first_name_words():
    long_name = " ".join(["salt"] * NAME_WORDS + ["pepper"])
    found = step_ingredients("Add the salt pepper.", [long_name])
    assert [(f.start, f.length) for f in found] == [(1, 1)]  # "pepper" lies past the cap

"""The guide's titles and ingredient lines read naturally and agree, on real recipes and composed diets."""

from __future__ import annotations

import pytest
from conftest import SAMPLE, WEB_RECIPES, make_recipe, needs_shared_data
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rrt.recipes.lexicon import CONSTRAINTS
from rrt.recipes.loaders import read_recipes
from rrt.recipes.substitutions import substitute_recipe
from rrt.recipes.tagger import tag_recipe
from testing.guide_reading import (
    guide_rewrites,
    repeated_words,
    stacked_diet_words,
    title_foods_missing,
)

# Derandomized: the same examples on every run, so a failure in CI is never a matter of luck.
FAST = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _reading_faults(source, constraints, result) -> list[str]:
    faults = []
    for old, new in zip(source.ingredients, result.recipe.ingredients):
        if old != new and stacked_diet_words(new):
            faults.append(f"stacked diet words: {old!r} -> {new!r}")
        if repeated_words(new) and not repeated_words(old):
            faults.append(f"a word twice in a row: {old!r} -> {new!r}")
    missing = title_foods_missing(source.title, result.recipe.title, result.recipe.ingredients)
    if missing:
        faults.append(
            f"title names {missing} that no line holds: {source.title!r} -> {result.recipe.title!r}"
        )
    tags = tag_recipe(result.recipe, constraints)
    if not all(tags.valid.values()):
        faults.append(f"{source.title!r} still breaks {constraints}")
    return faults


def _corpus_faults(path) -> list[str]:
    return [
        f"{constraint}: {fault}"
        for source, constraint, result in guide_rewrites([str(path)])
        for fault in _reading_faults(source, [constraint], result)
    ]


def test_sample_rewrites_read_naturally_and_agree():
    assert _corpus_faults(SAMPLE) == []


@needs_shared_data
def test_web_rewrites_read_naturally_and_agree():
    faults = _corpus_faults(WEB_RECIPES)
    assert not faults, f"{len(faults)} faults, first: " + "\n".join(faults[:15])


def _real(kind: str) -> list:
    paths = [str(SAMPLE)] + ([str(WEB_RECIPES)] if WEB_RECIPES.exists() else [])
    return sorted(
        {x for r in read_recipes(paths) for x in ([r.title] if kind == "title" else r.ingredients)}
    )


TITLES, LINES = _real("title"), _real("ingredients")


@FAST
@given(
    title=st.sampled_from(TITLES),
    lines=st.lists(st.sampled_from(LINES), min_size=1, max_size=6, unique=True),
    constraints=st.lists(st.sampled_from(CONSTRAINTS), min_size=1, max_size=3, unique=True),
)
def test_any_real_title_and_lines_read_naturally_under_composed_diets(title, lines, constraints):
    steps = [f"Combine the {', '.join(lines)}.", "Cook and serve."]
    source = make_recipe(lines, steps, title=title)
    assert _reading_faults(source, constraints, substitute_recipe(source, constraints)) == []


@pytest.mark.parametrize(
    "line,constraints,expected",
    [
        ("1 cup shredded cheddar cheese", "dairy-free", "1 cup shredded vegan cheddar cheese"),
        (
            "0.5 cup freshly grated Parmesan cheese",
            "vegan",
            "0.5 cup freshly grated vegan Parmesan cheese",
        ),
        (
            "8 ounces feta cheese, crumbled",
            "vegan,nut-free",
            "8 ounces vegan feta cheese, crumbled",
        ),
        ("1/2 lb (220g) ground turkey meat", "vegetarian", "1/2 lb (220g) plant-based ground meat"),
        (
            "4 ounces bulk Mexican chorizo sausage",
            "vegan",
            "4 ounces bulk Mexican vegan chorizo sausage",
        ),
        ("1kg beef flank steak", "vegetarian", "1kg seitan"),
        ("2 cups whole milk kefir", "dairy-free", "2 cups dairy-free kefir"),
        ("2 tablespoons Shaoxing wine", "alcohol-free", "2 tablespoons rice vinegar"),
        (
            "1 bottle (12 ounces) lager beer",
            "alcohol-free",
            "1 bottle (12 ounces) non-alcoholic lager beer",
        ),
        ("1 1/2 cups dry white wine", "alcohol-free", "1 1/2 cups vegetable broth"),
    ],
)
def test_one_diet_word_per_food_and_the_line_kept(line, constraints, expected):
    assert substitute_recipe(make_recipe([line]), constraints).recipe.ingredients == [expected]


@pytest.mark.parametrize(
    "title,lines,constraints,expected",
    [
        (
            "Cheesy Beef Tacos",
            ["1 pound ground beef", "8 taco shells"],
            "vegetarian",
            "Cheesy Plant-Based Meat Tacos",
        ),
        (
            "Roujiamo (Chinese Hamburger)",
            ["1 pound pork belly"],
            "vegan",
            "Roujiamo (Vegan Chinese Hamburger)",
        ),
        (
            "Classic Beef Chili",
            ["2 pounds ground beef", "1 can kidney beans"],
            "vegan",
            "Classic Plant-Based Meat Chili",
        ),
        (
            "Brown Butter Cookies",
            ["1 cup butter", "2 cups flour"],
            "dairy-free",
            "Nondairy Brown Butter Cookies",
        ),
        (
            "Cheddar Cornbread",
            ["1 cup shredded cheddar cheese"],
            "dairy-free",
            "Vegan Cheddar Cornbread",
        ),
    ],
)
def test_the_title_names_the_substitute_its_lines_have(title, lines, constraints, expected):
    out = substitute_recipe(make_recipe(lines, title=title), constraints).recipe
    assert out.title == expected
    assert title_foods_missing(title, out.title, out.ingredients) == []

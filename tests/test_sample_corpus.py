"""The bundled sample corpus: size, dishes, and coverage of every constraint."""

from __future__ import annotations

from collections import defaultdict

from conftest import SAMPLE

from rrt.recipes.lexicon import CONSTRAINTS
from rrt.recipes.loaders import LoadReport, read_recipes
from rrt.recipes.tagger import tag_recipe


def _dish(recipe_id: str) -> str:
    return recipe_id.removeprefix("sample-").rsplit("-", 1)[0]


def test_sample_is_large_and_clean():
    report = LoadReport()
    recipes = list(read_recipes([str(SAMPLE)], report))
    assert len(recipes) >= 120 and not report.rejected
    assert len({r.id for r in recipes}) == len(recipes)
    assert len({_dish(r.id) for r in recipes}) >= 25


def test_every_constraint_has_ten_valid_and_ten_invalid_recipes_and_dishes_mix():
    recipes = list(read_recipes([str(SAMPLE)]))
    tags = {r.id: tag_recipe(r).valid for r in recipes}
    for constraint in CONSTRAINTS:
        valid = sum(t[constraint] for t in tags.values())
        assert valid >= 10 and len(recipes) - valid >= 10, constraint
    mixes = defaultdict(set)
    for recipe in recipes:
        for constraint in CONSTRAINTS:
            mixes[_dish(recipe.id)].add((constraint, tags[recipe.id][constraint]))
    mixed = [
        d
        for d, seen in mixes.items()
        if any((c, True) in seen and (c, False) in seen for c in CONSTRAINTS)
    ]
    assert len(mixed) >= 0.8 * len(mixes)

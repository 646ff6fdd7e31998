"""Rows of the prepared recipes table: a clean recipe with its dish, split and validity flags."""

from __future__ import annotations

from rrt.corpus.dish import dish_key, split_of
from rrt.corpus.pairing import valid_column
from rrt.recipes.recipe import Recipe
from rrt.recipes.tagger import tag_recipe


def recipe_row(
    recipe: Recipe,
    constraints: list[str],
    dish_level: str = "title",
    train: float = 0.8,
    dev: float = 0.1,
    seed: int = 0,
) -> dict:
    """One Parquet row: id, text fields, the method lines that are not steps, source, dish key,
    split and one flag per constraint."""
    key = dish_key(recipe.title, dish_level) or recipe.id
    # Strict: a recipe that names a forbidden food even as optional is a source, never a target.
    valid = tag_recipe(recipe, constraints, lenient=False).valid
    row = {
        "id": recipe.id,
        "title": recipe.title,
        "ingredients": list(recipe.ingredients),
        "steps": list(recipe.steps),
        "non_steps": list(recipe.metadata.get("non_steps") or []),
        "source": recipe.source,
        "dish": key,
        "split": split_of(key, train, dev, seed),
    }
    row.update({valid_column(c): valid[c] for c in constraints})
    return row

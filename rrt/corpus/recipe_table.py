"""Rows of the prepared recipes table: a clean recipe with its dish, split and validity flags."""

from __future__ import annotations

from rrt.config import DataSettings
from rrt.corpus.dish import dish_key, split_of
from rrt.corpus.pairing import valid_column
from rrt.recipes.recipe import Recipe
from rrt.recipes.tagger import tag_recipe


def recipe_row(recipe: Recipe, constraints: list[str], data: DataSettings) -> dict:
    """One Parquet row: id, text fields, the method lines that are not steps, source, dish key
    (`data.dish_key`), split (`data.split`, `data.seed`) and one flag per constraint."""
    key = dish_key(recipe.title, data.dish_key) or recipe.id
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
        "split": split_of(key, data.split.train, data.split.dev, data.seed),
    }
    row.update({valid_column(c): valid[c] for c in constraints})
    return row

"""Shared fixtures: the bundled sample corpus and the real data in ../shared/data."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from rrt.recipe import Recipe

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "sample" / "recipes.jsonl"
SHARED_DATA = Path(os.environ.get("RRT_SHARED_DATA", ROOT.parent / "shared" / "data"))
WEB_RECIPES = SHARED_DATA / "web_recipes" / "recipes.jsonl"
PAPER_SAMPLE = SHARED_DATA / "paper_sample"

needs_shared_data = pytest.mark.skipif(
    not WEB_RECIPES.exists() or not PAPER_SAMPLE.exists(),
    reason=f"real recipes and paper samples not found in {SHARED_DATA} (a fresh clone has no ../shared)",
)


def make_recipe(ingredients, steps=("Mix everything.", "Serve."), title="Test Dish", rid="t1") -> Recipe:
    """A small recipe for table-driven tests."""
    return Recipe(rid, title, list(ingredients), list(steps), "test")

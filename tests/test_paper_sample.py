"""The paper's released samples parse in full, with ids from their tsv files."""

from __future__ import annotations

from conftest import PAPER_SAMPLE, needs_shared_data

from rrt.recipes.loaders import LoadReport, expand_inputs, read_recipes
from rrt.recipes.loaders.paper_text import StepPair, read_paper_pairs, read_step_pairs
from rrt.recipes.recipe import RecipePair


@needs_shared_data
def test_recipe_pairs_parse_with_ids_and_both_directions():
    pairs = [
        p
        for f in ("full_recipe_test.txt", "full_recipe_train.txt")
        for p in read_paper_pairs(str(PAPER_SAMPLE / f))
    ]
    lines = sum(
        1
        for f in ("full_recipe_test.txt", "full_recipe_train.txt")
        for line in open(PAPER_SAMPLE / f, encoding="utf-8")
        if line.strip()
    )
    assert len(pairs) == lines >= 48 and all(isinstance(p, RecipePair) for p in pairs)
    assert pairs[0].source.id == "allrecipes_42567" and pairs[0].target.id == "mealmaster_612"
    tags = {p.target_tag for p in pairs}
    assert "vegetarian" in tags and "non-vegetarian" in tags
    assert all(p.source.steps and p.target.steps and p.source.title for p in pairs)


@needs_shared_data
def test_step_pairs_parse_with_alignment_ids():
    pairs = [p for p in read_step_pairs(str(PAPER_SAMPLE / "style_transfer_test.txt"))]
    assert len(pairs) >= 246 and all(isinstance(p, StepPair) for p in pairs)
    first = pairs[0]
    assert (first.source.id, first.source_step, first.target_id, first.target_step) == (
        "allrecipes_42567",
        0,
        "mealmaster_612",
        0,
    )
    assert first.target_text == "Heat oven to 350 degrees." and first.alignment == "aligned"


@needs_shared_data
def test_folder_load_accounts_for_every_line():
    report = LoadReport()
    recipes = list(read_recipes(expand_inputs([str(PAPER_SAMPLE)]), report))
    assert recipes and report.read == report.kept + sum(report.rejected.values())
    assert set(report.rejected) <= {"step_pair_line", "duplicate_recipe", "too_few_steps"}
    assert not any("Â" in s for r in recipes for s in r.steps)

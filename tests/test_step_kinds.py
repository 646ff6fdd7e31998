"""Method lines that are not instructions: serving counts, headers, notes and storage tips."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, WEB_RECIPES, make_recipe, needs_shared_data

from rrt.corpus.link_labels import load_labels
from rrt.recipes.clean import clean_recipe
from rrt.recipes.recipe import Reject
from rrt.recipes.step_kinds import classify, line_kind, split_method

LABELS = ROOT / "tests" / "fixtures" / "alignment" / "real_pairs.jsonl"


@pytest.mark.parametrize(
    "line, kind",
    [
        ("Makes 1 serving.", "serving"),
        ("Serves 4-6", "serving"),
        ("Yield: 12 muffins", "serving"),
        ("Note: the dough keeps its shape better when cold.", "note"),
        ("Enjoy!", "note"),
        ("Serve and enjoy!", "note"),
        ("Adapted from a recipe by my grandmother.", "note"),
        ("Store leftovers in an airtight container in the fridge for up to 5 days.", "storage"),
        (
            "Best when fresh. Store leftover cheese in the refrigerator for up to 5-7 days.",
            "storage",
        ),
        ("To reheat, warm gently in a pan.", "storage"),
        # Real steps that only look like the kinds above stay steps.
        ("Refrigerate for 2 hours until set.", "step"),
        ("Transfer to an airtight container, cover and freeze until firm, about 4 hours.", "step"),
        ("Serve with rice, share with friends, and enjoy!", "step"),
        ("Make the dough. Keep the leftover scraps covered while you roll the rest.", "step"),
        ("Preheat oven to 350F", "step"),
    ],
)
def test_a_line_on_its_own(line, kind):
    assert line_kind(line) == kind


def test_headers_are_found_from_their_neighbours():
    method = [
        "For the sauce:",
        "Whisk the oil, vinegar and mustard until smooth.",
        "MAKE THE NOODLES",
        "Boil the noodles for 8 minutes, then drain them well.",
        "Make the topping",
        "Toast the sesame seeds in a dry pan until golden.",
        "Serve",
    ]
    assert classify(method) == ["header", "step", "header", "step", "header", "step", "step"]
    # One-word lines used as headings throughout a method, each before its longer step.
    sections = [
        "Sauté",
        "Sauté the onion in the butter until soft.",
        "Simmer",
        "Add the stock and simmer for 20 minutes.",
    ]
    assert classify(sections) == ["header", "step", "header", "step"]


def test_a_method_of_short_unpunctuated_steps_keeps_them_all():
    method = ["Preheat oven to 350F", "Mix flour and sugar", "Add the eggs", "Bake 30 minutes"]
    assert classify(method) == ["step"] * 4


def test_non_steps_keep_their_place_before_the_next_instruction():
    steps, others = split_method(
        [
            "For the cake:",
            "Beat the butter and sugar.",
            "Bake for 30 minutes.",
            "Makes 12 slices.",
            "Store covered for up to 3 days.",
        ]
    )
    assert steps == ["Beat the butter and sugar.", "Bake for 30 minutes."]
    assert [(o.kind, o.before) for o in others] == [("header", 0), ("serving", 2), ("storage", 2)]


def test_cleaning_sets_non_steps_aside_and_counts_only_instructions():
    recipe = clean_recipe(
        make_recipe(
            ["1 cup milk"],
            steps=[
                "Make the Broth",
                "Simmer the bones for 6 hours.",
                "Strain the broth.",
                "Makes 1 serving.",
            ],
        )
    )
    assert recipe.steps == ["Simmer the bones for 6 hours.", "Strain the broth."]
    assert [o["kind"] for o in recipe.metadata["non_steps"]] == ["header", "serving"]
    rejected = clean_recipe(make_recipe(["1 cup milk"], steps=["Stir the milk.", "Serves 2."]))
    assert isinstance(rejected, Reject) and rejected.reason == "too_few_steps"
    assert "1 line(s) that are not instructions" in rejected.detail


@needs_shared_data
def test_non_steps_of_real_recipes_match_the_hand_labels():
    corpus = {row["id"]: row for row in map(json.loads, open(WEB_RECIPES, encoding="utf-8"))}
    right = predicted = labelled = 0
    seen = set()
    for pair in load_labels(str(LABELS), corpus):
        for side, gold in (
            (pair.source, pair.source_not_steps),
            (pair.target, pair.target_not_steps),
        ):
            if side["id"] in seen:
                continue
            seen.add(side["id"])
            found = {i for i, kind in enumerate(classify(side["lines"])) if kind != "step"}
            right, predicted, labelled = (
                right + len(found & set(gold)),
                predicted + len(found),
                labelled + len(gold),
            )
    assert labelled > 50
    assert right / predicted >= 0.95 and right / labelled >= 0.8, (right, predicted, labelled)

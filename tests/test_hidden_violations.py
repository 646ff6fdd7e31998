"""Hidden violations, labelled: list members that share a head, derived words, compound foods and
their harmless twins (tests/fixtures/hidden_violations.tsv), each read as a lone text, as a
generated step is read."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest
from conftest import make_recipe

from rrt.recipes.lexicon import CONSTRAINTS
from rrt.recipes.substitutions import substitute_recipe
from rrt.recipes.tagger import tag_recipe, text_violations

PROBES = Path(__file__).parent / "fixtures" / "hidden_violations.tsv"
CLASSES = ("coordinated", "derived", "compound", "twin")


def _probes() -> list[dict]:
    with PROBES.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


ROWS = _probes()


def test_the_probes_cover_every_constraint_and_class_both_ways():
    assert len(ROWS) >= 150
    assert {r["constraint"] for r in ROWS} == set(CONSTRAINTS)
    assert {r["class"] for r in ROWS} == set(CLASSES)
    assert {r["violating"] for r in ROWS} == {"yes", "no"}
    for kind in ("coordinated", "derived", "compound"):
        said = Counter(r["violating"] for r in ROWS if r["class"] == kind)
        assert said["yes"] and said["no"], kind


def test_the_tagger_has_no_miss_and_no_false_alarm_on_the_probes():
    misses, false_alarms = [], []
    for row in ROWS:
        flagged = bool(text_violations(row["text"], [row["constraint"]]))
        if row["violating"] == "yes" and not flagged:
            misses.append((row["class"], row["constraint"], row["text"]))
        elif row["violating"] == "no" and flagged:
            false_alarms.append((row["class"], row["constraint"], row["text"]))
    assert (misses, false_alarms) == ([], []), f"misses: {misses}\nfalse alarms: {false_alarms}"


def _recipe(text: str):
    # A sentence is a step; anything else an ingredient line.
    return (
        make_recipe([text], steps=["Serve."])
        if not text.endswith(".")
        else make_recipe(["1 cup flour"], steps=[text, "Serve."])
    )


@pytest.mark.parametrize(
    "row",
    [r for r in ROWS if r["violating"] == "yes"],
    ids=lambda r: f"{r['constraint']}:{r['text']}",
)
def test_the_guide_repairs_every_violating_probe_in_one_pass(row):
    constraint = row["constraint"]
    out = substitute_recipe(_recipe(row["text"]), constraint)
    # Strict: no forbidden food left even where an alternative is offered. A dish a step names
    # (meringue) is made from the recipe's lines, so only lines are read on their own.
    assert tag_recipe(out.recipe, [constraint], lenient=False).valid[constraint], out.recipe
    for line in out.recipe.ingredients:
        assert not text_violations(line, [constraint]), line
    again = substitute_recipe(out.recipe, constraint)
    assert again.recipe == out.recipe and not again.substitutions

"""Step flags: the faults a reader marks, found by rules, on the demo's own failures and on the
guide's rewrites, which do each step's job by construction."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rrt.evaluation.baselines import rule_based
from rrt.evaluation.step_flags import FLAG_MARKS, absurd_action, record_flags, step_marks_predicted

TACOS = {
    "id": "tacos",
    "title": "Beef Tacos",
    "ingredients": ["1 lb ground beef", "8 hard taco shells", "1 cup shredded lettuce"],
    "steps": [
        "Brown the ground beef in a skillet.",
        "Warm the taco shells in the oven at 350°F for a few minutes.",
        "Fill the shells with the beef and top with lettuce.",
    ],
}


def tacos_rewrite(steps: list[str]) -> dict:
    """A vegan rewrite record of the tacos with these steps."""
    return {
        "constraint": "vegan",
        "source": TACOS,
        "rewrite": {
            "title": "Vegan Tacos",
            "ingredients": ["1 lb plant-based ground meat", *TACOS["ingredients"][1:]],
            "steps": steps,
        },
    }


@pytest.mark.parametrize(
    "step, absurd",
    [
        ("Melt the hard taco shells in a heavy pot.", True),
        ("Whisk the flour tortillas, then add the tofu.", True),
        ("Melt the butter in a pan.", False),
        ("Pour the batter into the pan.", False),
        ("Knead the dough until smooth.", False),
    ],
)
def test_an_action_that_cannot_act_on_its_object_makes_no_sense(step, absurd):
    assert absurd_action(step) is absurd


def test_the_demo_s_failures_are_flagged_as_readers_marked_them():
    record = tacos_rewrite(
        [
            "Brown the plant-based ground meat in a skillet.",
            "Stir in the taco seasoning and water, then bake at 350°F for 5 minutes.",
            "Melt the hard taco shells in a heavy pot.",
        ]
    )
    flags = record_flags(record)
    assert flags[0] == set()
    assert "another_action" in flags[1]
    assert {"absurd_action", "another_action", "heat_changed", "lost_food"} <= flags[2]
    assert step_marks_predicted(record)[2] == {"another_job", "no_sense"}


def test_a_repeated_step_and_an_unlisted_food_are_flagged():
    record = tacos_rewrite(
        [
            "Brown the plant-based ground meat in a skillet.",
            "Brown the plant-based ground meat in a skillet.",
            "Fill the shells with the plant-based ground meat and top with lettuce and peanuts.",
        ]
    )
    flags = record_flags(record)
    assert "repeated" in flags[1] and "unlisted_food" in flags[2]


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(["vegan", "vegetarian", "dairy-free", "egg-free", "nut-free"]))
def test_the_guide_s_own_rewrite_raises_no_flag(constraint):
    source = {
        "id": "pancakes",
        "title": "Pancakes",
        "ingredients": ["2 cups flour", "2 eggs", "1 cup milk", "2 tablespoons butter"],
        "steps": [
            "Whisk the flour, eggs and milk in a bowl.",
            "Melt the butter in a skillet over medium heat.",
            "Pour in the batter and cook until golden.",
        ],
    }
    from rrt.modelling.rewriter import RewriteTask

    record = rule_based(RewriteTask("pancakes", [constraint], source))
    assert all(not found for found in record_flags(record)), record_flags(record)
    assert set(FLAG_MARKS.values()) <= {
        "another_job",
        "no_sense",
        "unlisted_food",
        "breaks_constraint",
    }


def test_agreement_with_readers_counts_each_reader_s_mark_of_each_step():
    from rrt.evaluation.step_flags import flag_agreement

    record = tacos_rewrite(
        [
            "Brown the plant-based ground meat in a skillet.",
            "Warm the taco shells in the oven at 350°F for a few minutes.",
            "Melt the hard taco shells in a heavy pot.",
        ]
    )
    key = ("product", "tacos", "vegan")
    marks = [
        {
            "system": key[0],
            "recipe": key[1],
            "constraint": key[2],
            "step": step,
            "judge": j,
            "mark": m,
        }
        for step, by in enumerate([("ok", "ok"), ("ok", "another_job"), ("no_sense", "no_sense")])
        for j, m in zip(("a", "b"), by)
    ]
    result = flag_agreement({key: record}, marks)
    assert result["pairs"] == 6
    caught = result["targets"]["another_job or no_sense"]["marks:another_job or no_sense"]
    # Three (step, reader) pairs are marked; the flags catch both readers' no_sense and miss the
    # step one reader called another job; of the three ok pairs none is flagged.
    assert caught == {
        "recall": 0.667,
        "precision": 1.0,
        "ok_flagged": 0.0,
        "marked": 3,
        "flagged": 2,
    }
    # A step of another recipe or past the record's end is not counted.
    stray = {**marks[0], "recipe": "other"}
    assert flag_agreement({key: record}, [*marks, stray, {**marks[0], "step": 9}])["pairs"] == 6


def test_the_fault_model_flags_an_absurd_step_and_not_the_guide_s_version():
    from rrt.evaluation.step_flags import FAULT_FEATURES, fault_features, faulty_steps

    record = tacos_rewrite(
        [
            "Brown the plant-based ground meat in a skillet.",
            TACOS["steps"][1],
            "Melt the hard taco shells in a heavy pot.",
        ]
    )
    assert all(len(row) == len(FAULT_FEATURES) for row in fault_features(record))
    assert faulty_steps(record) == [False, False, True]

"""The product's edit: untouched steps kept, the guide's version the floor of an affected step,
a sample chosen only where it does the same step and repairs the guide's."""

from __future__ import annotations

import pytest
from conftest import needs_dictionary
from hypothesis import given, settings
from hypothesis import strategies as st

from rrt.modelling.editing import (
    choose_edit,
    keeps_step,
    leading_action,
    same_action,
    step_affected,
)
from rrt.modelling.selection import StepContext, source_word_set

TACOS = {
    "title": "Beef Tacos",
    "ingredients": ["1 lb ground beef", "8 hard taco shells", "1 cup shredded lettuce"],
    "steps": [
        "Brown the ground beef in a skillet and drain off the fat.",
        "Warm the taco shells in the oven at 350°F for a few minutes.",
    ],
}
GUIDE_STEP = "Brown the plant-based ground meat in a skillet."


def vegan_ctx(source_step: str) -> StepContext:
    """A vegan context for one taco step, with the grounded rules and the recipe's held foods."""
    from rrt.recipes.foods import held_words

    rewritten = {
        "title": "Vegan Tacos",
        "ingredients": ["1 lb plant-based ground meat", *TACOS["ingredients"][1:]],
    }
    return StepContext(
        ["vegan"],
        source_step,
        ["plant-based ground meat", "hard taco shells", "shredded lettuce"],
        source_word_set(TACOS),
        held_words(rewritten, TACOS),
        "grounded",
    )


@given(st.text(max_size=80))
def test_a_step_the_guide_leaves_alone_is_untouched_and_any_change_affects_it(step):
    assert not step_affected(step, step)
    assert not step_affected(step, f"  {step} ")
    assert step_affected(step, step + " Press the tofu first.")


@pytest.mark.parametrize(
    "step, action",
    [
        ("Brown the ground beef in a skillet.", "brown"),
        ("In a large bowl, whisk the flour and sugar.", "whisk"),
        ("Once cool, slice and serve.", "slice"),
        ("In a large bowl whisk the eggs.", "whisk"),
        ("Preheat the oven to 350°F.", "preheat"),
        ("", ""),
    ],
)
def test_the_leading_action_is_the_first_word_or_the_one_after_an_opening_phrase(step, action):
    assert leading_action(step) == action


def test_equivalent_actions_count_as_one_and_others_do_not():
    assert same_action("warm", "heat") and same_action("whisk", "stir")
    assert not same_action("warm", "melt") and not same_action("bake", "whisk")


def test_a_sample_keeps_the_step_only_with_its_action_and_its_foods():
    ctx = vegan_ctx(TACOS["steps"][0])
    assert keeps_step("Brown the plant-based ground meat in a large skillet.", GUIDE_STEP, ctx)
    # Another action: the taco shells melted, not warmed.
    assert not keeps_step(
        "Melt the hard taco shells in a heavy pot.",
        "Warm the taco shells in the oven at 350°F for a few minutes.",
        ctx,
    )
    # The same action, but the food the step works on is gone.
    assert not keeps_step("Brown the onions in a skillet.", GUIDE_STEP, ctx)
    # A forbidden food the guide left need not be kept: a repair drops it.
    assert keeps_step(
        "Brown the ground meat in olive oil.", "Brown the ground meat in butter.", ctx
    )


@needs_dictionary
def test_the_guide_stays_when_it_passes_every_gate_however_good_a_sample_looks():
    source = TACOS["steps"][0]
    samples = ["Brown the plant-based ground meat in a large skillet until crisp.", "Stir it."]
    chosen, scores, decision = choose_edit(GUIDE_STEP, samples, vegan_ctx(source))
    assert (chosen, decision) == (0, "guide")
    assert len(scores) == 3 and scores[1]["keeps_step"] == 1.0 and scores[2]["keeps_step"] == 0.0


@needs_dictionary
def test_a_sample_replaces_the_guide_only_where_it_repairs_it_and_does_the_same_step():
    source = "Brown the ground beef in butter."
    # A guide that left a forbidden food (a rule it lacked): the floor fails a gate.
    broken_guide = "Brown the plant-based ground meat in butter."
    repaired = "Brown the plant-based ground meat in olive oil."
    another_job = "Bake the taco shells in olive oil."
    ctx = vegan_ctx(source)
    chosen, scores, decision = choose_edit(broken_guide, [another_job, repaired], ctx)
    assert decision == "model" and chosen == 2
    assert scores[0]["no_violation"] == 0.0 and scores[2]["no_violation"] == 1.0
    # No sample that does the same step: the guide's version stays, flawed as it is.
    assert choose_edit(broken_guide, [another_job], ctx)[::2] == (0, "guide")


@needs_dictionary
@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(["Stir.", "Melt the taco shells.", "", GUIDE_STEP]), max_size=4))
def test_the_guide_s_version_is_always_a_candidate_and_the_floor(samples):
    chosen, scores, decision = choose_edit(GUIDE_STEP, samples, vegan_ctx(TACOS["steps"][0]))
    assert len(scores) == len(samples) + 1
    assert decision == "guide" and chosen == 0


@pytest.fixture(scope="module")
def tiny():
    """A tokenizer trained on the bundled sample and a 2-layer GPT-2 with random weights."""
    from conftest import tiny_random_lm

    return tiny_random_lm()


PANCAKES = {
    "title": "Pancakes",
    "ingredients": ["2 cups flour", "1 cup milk", "1 tablespoon sugar"],
    "steps": [
        "Sift the flour and sugar into a bowl.",
        "Whisk in the milk.",
        "Cook on a hot griddle until golden.",
        "Serve warm.",
    ],
}


@needs_dictionary
@pytest.mark.parametrize("system", ["grounded_rule", "contextual"])
def test_the_product_keeps_untouched_steps_and_offers_the_guide_s_version_first(tiny, system):
    from conftest import make_rewriter, sampling

    from rrt.modelling.rewriter import RewriteTask, guide_rewrite

    lm, tok = tiny
    rewriter = make_rewriter(
        system, lm, tok, 256, sampling(candidates=3, max_new_tokens=8), steps="affected"
    )
    [record] = rewriter.rewrite([RewriteTask("p", ["vegan"], PANCAKES, 5)])
    guide = guide_rewrite(PANCAKES, ["vegan"])[0]["steps"]
    decisions = [entry["decision"] for entry in record["steps"]]
    # Only the step with milk is touched by the guide; the other three come back as they were.
    assert decisions[0] == decisions[2] == decisions[3] == "kept"
    assert [record["rewrite"]["steps"][i] for i in (0, 2, 3)] == [
        PANCAKES["steps"][i] for i in (0, 2, 3)
    ]
    changed = record["steps"][1]
    assert changed["decision"] in ("guide", "model") and len(changed["candidates"]) == 4
    assert (
        changed["candidates"][0]["text"] == guide[1]
        and changed["candidates"][0]["ended"] == "guide"
    )
    # A random model's samples never do the step and repair the guide: the guide's version stays.
    assert changed["decision"] == "guide" and record["rewrite"]["steps"][1] == guide[1]
    assert rewriter.stats["steps_kept"] == 3 and rewriter.stats["steps_sampled"] == 1


@needs_dictionary
def test_the_paper_s_setting_still_samples_every_step(tiny):
    from conftest import make_rewriter, sampling

    from rrt.modelling.rewriter import RewriteTask

    lm, tok = tiny
    rewriter = make_rewriter(
        "contextual", lm, tok, 256, sampling(candidates=2, max_new_tokens=8), steps="every"
    )
    [record] = rewriter.rewrite([RewriteTask("p", ["vegan"], PANCAKES, 5)])
    assert [e["decision"] for e in record["steps"]] == ["model"] * 4
    assert all(len(e["candidates"]) == 2 for e in record["steps"])
    assert rewriter.stats["steps_kept"] == 0 and rewriter.stats["steps_sampled"] == 4


def test_rrt_show_marks_whose_version_each_step_is_and_old_runs_show_none():
    from rrt.evaluation.side_by_side import LEGEND, side_by_side

    record = {
        "system": "grounded_rule",
        "constraint": "vegan",
        "source": {"title": "T", "ingredients": ["1 cup milk"], "steps": ["Stir.", "Add milk."]},
        "rewrite": {
            "title": "T",
            "ingredients": ["1 cup soymilk"],
            "steps": ["Stir.", "Add soymilk."],
        },
        "steps": [{"decision": "kept"}, {"decision": "guide"}],
    }
    shown = side_by_side(record, width=40)
    assert "2. [guide] Add soymilk." in shown and "1. Stir." in shown and LEGEND in shown
    older = side_by_side({**record, "steps": [{}, {}]}, width=40)
    assert "[guide]" not in older and LEGEND not in older


@needs_dictionary
def test_the_product_s_guide_version_drops_a_cue_the_swap_made_untrue(tiny):
    from conftest import make_rewriter, sampling

    from rrt.modelling.rewriter import RewriteTask

    lm, tok = tiny
    source = {
        **TACOS,
        "steps": [
            "Brown the ground beef in a skillet and drain off the fat.",
            TACOS["steps"][1],
        ],
    }
    for steps, floor in (
        ("affected", "Brown the plant-based ground meat in a skillet."),
        ("every", None),
    ):
        rewriter = make_rewriter(
            "grounded_rule", lm, tok, 256, sampling(candidates=2, max_new_tokens=8), steps=steps
        )
        [record] = rewriter.rewrite([RewriteTask("t", ["vegan"], source, 5)])
        if floor:
            assert record["steps"][0]["candidates"][0]["text"] == floor
            assert record["rewrite"]["steps"][1] == source["steps"][1]
        else:
            assert all(c.get("ended") != "guide" for c in record["steps"][0]["candidates"])


@needs_dictionary
def test_a_flaw_the_guide_inherits_from_the_source_step_is_no_reason_for_a_sample():
    # No full stop in the user's step, so none in the guide's version: the user's own writing.
    source = "Add flour to the egg mixture, add in melted butter"
    guide = "Add flour to the flax egg mixture, add in melted butter"
    sample = "Add the flour to the flax egg mixture and the melted butter."
    ctx = StepContext(
        ["egg-free"], source, ["flour", "flax egg", "melted butter"], source_word_set(TACOS)
    )
    assert choose_edit(guide, [sample], ctx)[::2] == (0, "guide")

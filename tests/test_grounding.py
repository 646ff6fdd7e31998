"""A rewrite stays the user's recipe: invented foods, same job and consistency measured, the
closed food set refused while sampling, and the grounded selection rules."""

from __future__ import annotations

import random

import pytest
from conftest import SAMPLE, dictionary_missing
from hypothesis import given, settings
from hypothesis import strategies as st
from test_constrained import sample_step, stop_ids, tokenizer  # noqa: F401 - fixtures

from rrt.corpus import formats
from rrt.evaluation.grounding import (
    consistent,
    grounding_counts,
    invented_foods,
    title_consistent,
)
from rrt.modelling.constrained import ViolationGuard, guard_text
from rrt.modelling.selection import RULES, SELECTIONS, StepContext, select_best
from rrt.recipes.foods import (
    PANTRY,
    known_foods,
    mentions,
    recipe_food_words,
    unlisted_foods,
)
from rrt.recipes.loaders import read_recipes
from rrt.recipes.tagger import text_violations

TACOS = {
    "title": "Cheesy Beef Tacos",
    "ingredients": [
        "1 pound ground beef",
        "10 hard taco shells",
        "1 cup shredded cheddar cheese",
        "2 cups shredded lettuce",
        "1 tomato, diced",
        "1/2 cup sour cream",
    ],
    "steps": [
        "Brown the ground beef in a skillet and drain off the fat.",
        "Fill the shells with the beef and top with cheddar cheese, lettuce, tomato, and sour cream.",
    ],
}
REWRITTEN = {
    "title": "Cheesy Seitan Tacos",
    "ingredients": [
        "1 pound plant-based ground meat",
        "10 hard taco shells",
        "1 cup shredded cheddar cheese",
        "2 cups shredded lettuce",
        "1 tomato, diced",
        "1/2 cup sour cream",
    ],
}


def record(steps, rewritten=REWRITTEN, source=TACOS):
    return {
        "constraint": "vegetarian",
        "source": source,
        "rewrite": {**rewritten, "steps": steps},
        "steps": [{"source_step": i} for i in range(len(steps))],
    }


def held():
    return recipe_food_words(
        [REWRITTEN["title"]],
        REWRITTEN["ingredients"],
        [TACOS["title"]],
        TACOS["ingredients"],
        TACOS["steps"],
    )


def test_the_demo_s_inventions_are_found_and_the_recipe_s_own_foods_are_not():
    steps = [
        "Heat the black sesame seeds together and simmer on low heat for 10 minutes.",
        "Stir in the crushed tofu, then mix in the tofu, peanuts, and seasoning.",
        "Spoon in the shells and top with the cheddar cheese and lettuce.",
        "Season with salt, pepper and a splash of water.",
    ]
    found = invented_foods(record(steps))
    assert [[s[m.start : m.end] for m in f] for s, f in zip(steps, found)] == [
        ["sesame seeds"],
        ["tofu", "tofu", "peanuts"],
        [],
        [],
    ]
    assert grounding_counts(record(steps))["invented_steps"] == 2


def test_a_named_cheese_must_be_the_recipe_s_cheese():
    assert [m.words for m in unlisted_foods("Top with parmesan cheese.", held())] == [("parmesan",)]
    assert unlisted_foods("Top with the cheese.", held()) == []


def test_same_job_compares_kinds_of_work():
    counts = grounding_counts(
        record(
            ["Brown the plant-based meat in a skillet.", "Stir in the crushed tofu and peanuts."]
        )
    )
    assert (counts["same_job_steps"], counts["paired_steps"]) == (1, 2)


def test_a_title_naming_another_substitute_than_its_lines_is_inconsistent():
    assert not title_consistent(record([]))
    assert title_consistent(record([], {**REWRITTEN, "title": "Cheesy Tacos"}))
    # A step naming a new food the lines lack breaks the whole recipe's consistency.
    fine = {**REWRITTEN, "title": "Cheesy Tacos"}
    assert consistent(record(["Brown the plant-based ground meat."], fine))
    assert not consistent(record(["Brown the seitan."], fine))


def test_the_pantry_is_held_by_any_recipe():
    assert all(unlisted_foods(f"Add the {name}.", recipe_food_words([])) == [] for name in PANTRY)
    assert "peanut" not in {w for name in PANTRY for w in name.split()}


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_source_recipe_s_own_steps_never_name_an_invented_food(data):
    recipe = data.draw(st.sampled_from(SAMPLE_RECIPES))
    source = {
        "title": recipe.title,
        "ingredients": list(recipe.ingredients),
        "steps": list(recipe.steps),
    }
    assert grounding_counts(record(list(recipe.steps), source, source))["invented_steps"] == 0


SAMPLE_RECIPES = list(read_recipes([str(SAMPLE)]))
FOODS = sorted(" ".join(name) for name in known_foods().names if len(name) <= 2)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(FOODS), st.sampled_from(["the", "with", "and", ",", ".", "Stir", "in"])
        ),
        max_size=20,
    ),
    st.sampled_from(SAMPLE_RECIPES),
)
def test_guard_text_leaves_no_unlisted_food(words, recipe):
    food_words = recipe_food_words([recipe.title], recipe.ingredients, recipe.steps)
    text = guard_text(" ".join(words), ["vegan"], food_words)
    assert unlisted_foods(text, food_words) == [] and text_violations(text, ["vegan"]) == []


ATTACK_FOODS = [
    " peanuts",
    " sesame seeds",
    " eggplant",
    " tofu",
    " bentonite",
    " parmesan",
    " chicken",
    " rice",
]


def test_a_guarded_step_cannot_name_an_unlisted_food(tokenizer, stop_ids, monkeypatch):  # noqa: F811
    import test_constrained

    monkeypatch.setattr(test_constrained, "ATTACKS", ATTACK_FOODS + test_constrained.ATTACKS)
    rng = random.Random(11)
    guard = ViolationGuard(tokenizer, ["vegetarian"], stop_ids).closed(held())
    loose = [sample_step(rng, tokenizer, guard, stop_ids, obey=False)[0] for _ in range(80)]
    assert sum(bool(unlisted_foods(t, held())) for t in loose) > 10  # the attacks do name foods
    texts = [sample_step(rng, tokenizer, guard, stop_ids)[0] for _ in range(80)]
    assert [
        t for t in texts if unlisted_foods(t, held()) or text_violations(t, ["vegetarian"])
    ] == []
    assert sum(len(t) for t in texts) > 80 * 20


def test_a_closed_guard_takes_an_unlisted_food_back_and_keeps_the_recipe_s_own(tokenizer, stop_ids):  # noqa: F811
    guard = ViolationGuard(tokenizer, ["vegetarian"], stop_ids).closed(held())
    assert guard.violation_start("Toss with the peanuts") == len("Toss with the ")
    assert [m.words for m in guard.violations("Top with lettuce and tomato")] == []
    # The open guard (the paper's) lets any food that obeys the constraint through.
    assert (
        ViolationGuard(tokenizer, ["vegetarian"], stop_ids).violations("Toss with the peanuts")
        == []
    )


def test_paper_selection_is_the_paper_s_rules_and_grounded_adds_the_recipe_s_own():
    assert SELECTIONS["paper"] is RULES
    grounded = SELECTIONS["grounded"]
    # The paper's rules all stay, but its 100-character length, which a length relative to the
    # source step replaces.
    assert set(RULES) - set(grounded) == {"short"} and "in_proportion" in grounded
    # Each tier outweighs everything below it together.
    order = list(grounded)
    for tier in (
        "no_violation",
        "no_disguised_food",
        "no_invented_food",
        "well_formed",
        "closeness",
    ):
        below = sum(grounded[name][1] for name in order[order.index(tier) + 1 :])
        assert grounded[tier][1] > below, tier


@pytest.mark.skipif(bool(dictionary_missing()), reason="the en_US dictionary is not installed")
def test_grounded_selection_keeps_a_long_step_whole_and_refuses_made_up_words():
    source = (
        "Heat a large skillet over medium-high heat, add the oil, and cook the onions and peppers "
        "for 5 minutes until soft."
    )
    ctx = StepContext(
        ["vegetarian"],
        source,
        ["onions", "peppers", "oil"],
        frozenset(),
        held_foods=held(),
        rules="grounded",
    )
    whole = "Heat a large skillet over medium-high heat, add the oil, and cook the onions and peppers until they are soft."
    cut = "Heat the oil and cook the onions."
    garbled = "Heat a large skillet over medium-high heat, add the oil, and cook the onions and zorax until soft."
    assert len(whole) > 100
    # The paper's rules prefer the cut step for its length; the grounded ones the whole step.
    assert (
        select_best([cut, whole], StepContext(["vegetarian"], source, ["onions"], frozenset()))[0]
        == 0
    )
    assert select_best([cut, whole], ctx)[0] == 1
    # A made-up word loses to a real-word step, however close it stays.
    assert select_best([garbled, cut], ctx)[0] == 1
    # A step twice its source's length runs out of proportion.
    scores = select_best([whole + " " + whole], ctx)[1][0]
    assert scores["in_proportion"] == 0.0 and scores["well_formed"] == 1.0


@pytest.mark.skipif(bool(dictionary_missing()), reason="the en_US dictionary is not installed")
def test_grounded_selection_prefers_the_recipe_s_foods_then_the_source_step():
    ctx = StepContext(
        ["vegetarian"],
        TACOS["steps"][0],
        ["plant-based ground meat", "taco shells"],
        frozenset(),
        held_foods=held(),
        rules="grounded",
    )
    candidates = [
        "Heat the black sesame seeds and simmer for 10 minutes.",
        "Cook the onions in a pan.",
        "Brown the plant-based ground meat in a skillet and drain off the fat.",
    ]
    assert select_best(candidates, ctx)[0] == 2
    paper = StepContext(["vegetarian"], TACOS["steps"][0], [], frozenset())
    assert "no_invented_food" not in select_best(candidates, paper)[1][0]


def test_grounded_formats_carry_the_target_lines_and_the_source_step_before_the_output():
    text = formats.grounded_ing(
        TACOS["title"],
        TACOS["ingredients"],
        TACOS["steps"],
        REWRITTEN["title"],
        REWRITTEN["ingredients"],
        ["Brown the meat.", "Fill the shells."],
        "vegetarian",
        ["taco shells"],
    )
    parts = formats.parse_text("grounded_ing", text)
    assert parts.target == {
        "title": REWRITTEN["title"],
        "ingredients": formats.grounded_foods(REWRITTEN["ingredients"]),
    }
    assert parts.target["ingredients"][:2] == ["plant-based meat", "hard taco shells"]
    assert parts.source_steps == TACOS["steps"] and parts.target_steps == [
        "Brown the meat.",
        "Fill the shells.",
    ]
    assert parts.prompt_ingredients == ["taco shells"]
    assert (
        text.index(f"{TACOS['steps'][-1]} <endofinst> taco shells <endofprompt> Fill the shells.")
        > 0
    )


def test_every_food_name_is_matched_as_itself():
    names = known_foods().names
    assert all(
        mentions(" ".join(name), known_foods())[0].words == name for name in sorted(names)[:500]
    )


def test_a_grounded_prompt_with_a_long_ingredient_list_is_cut_as_training_cuts_it(tokenizer):  # noqa: F811
    from rrt.modelling.prompts import (
        SPECIAL_NAMES,
        fit_prompt,
        protected_span,
        step_prompt,
    )
    from rrt.recipes.paper_format import INST

    special = {name: tokenizer.convert_tokens_to_ids(name) for name in SPECIAL_NAMES}
    long_list = {
        **REWRITTEN,
        "ingredients": REWRITTEN["ingredients"] + [f"1 cup food number {i}" for i in range(60)],
    }
    text = step_prompt(
        "grounded_ing", TACOS, 1, ["Brown the meat."], "vegetarian", long_list, ["taco shells"]
    )
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    head, tail, steps_from = protected_span("grounded_ing", ids, special)
    fitted = fit_prompt(ids, head, tail, 120, steps_from, {special[INST]})
    assert fitted is not None and len(fitted) <= 120
    # BOS and the tag, then the nearest context; the target tag, the rewritten step and the source step whole.
    assert fitted[:2] == ids[:2] and fitted[-(len(ids) - tail) :] == ids[tail:]


@pytest.mark.parametrize(
    "line, step",
    [
        ("1 lime, juiced", "Squeeze the lime juice over the tacos."),
        ("2 lemons, zested and juiced", "Stir in the lemon zest and lemon juice."),
    ],
)
def test_a_line_holds_what_its_preparation_yields(line, step):
    held = recipe_food_words([line])
    assert unlisted_foods(step, held) == []
    assert [m.words for m in unlisted_foods("Add the orange juice.", held)] == [("orange", "juice")]

"""Edit pairs: a recipe that fits a constraint, its foods put back as the source."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rrt.corpus.edit_pairs import (
    COOKING_FATS,
    MASK,
    PUT_BACK,
    EditSettings,
    edit_pairs,
    put_back_recipe,
    put_back_text,
)
from rrt.corpus.formats import parse_text
from rrt.corpus.held_out import read_held_out
from rrt.corpus.pairing import step_pair_rows, valid_column
from rrt.recipes.lexicon import CONSTRAINT_CATEGORIES, CONSTRAINTS
from rrt.recipes.recipe import Recipe
from rrt.recipes.substitutions import substitute_recipe
from rrt.recipes.tagger import tag_recipe

ENTRIES = [
    (constraint, stand_in)
    for constraint in CONSTRAINTS
    for category in CONSTRAINT_CATEGORIES[constraint]
    for stand_in, food in PUT_BACK.get(category, {}).items()
    if food is not None
]


def valid(recipe: Recipe, constraint: str) -> bool:
    return tag_recipe(recipe, [constraint], lenient=False).valid[constraint]


def row_of(recipe: Recipe, split: str = "train") -> dict:
    flags = {valid_column(c): valid(recipe, c) for c in CONSTRAINTS}
    return {**recipe.to_dict(), "split": split, "dish": "dish", **flags}


@pytest.mark.parametrize("constraint,stand_in", ENTRIES)
def test_each_put_back_turns_an_allowed_food_into_a_forbidden_one(constraint, stand_in):
    line = f"1 cup {stand_in}"
    assert valid(Recipe("t", "Dish", [line], ["Mix.", "Serve."]), constraint), line
    back, changes = put_back_text(line, constraint)
    assert changes and not valid(Recipe("s", "Dish", [back], ["Mix.", "Serve."]), constraint), back


VERBS = ("Stir in", "Add", "Whisk in", "Pour in", "Spoon in")
TAILS = ("with the flour.", "until smooth.", "and season with salt.", "over the onions.")
PLAIN = ("Preheat the oven.", "Chop the onions finely.", "Serve warm.", "Let it rest.")


def vocabulary(constraint: str) -> list[str]:
    # Cooking fats are put back only by how their steps use them (a test of their own below).
    return sorted(
        {
            s
            for c, s in ENTRIES
            if c == constraint and not any(fat in s.replace("-", " ") for fat in COOKING_FATS)
        }
    )


@st.composite
def fitting_recipes(draw):
    constraint = draw(st.sampled_from([c for c in CONSTRAINTS if vocabulary(c)]))
    foods = draw(st.lists(st.sampled_from(vocabulary(constraint)), min_size=1, max_size=3))
    steps = draw(
        st.lists(
            st.one_of(
                st.sampled_from(PLAIN),
                st.builds(
                    lambda v, f, t: f"{v} the {f} {t}",
                    st.sampled_from(VERBS),
                    st.sampled_from(foods),
                    st.sampled_from(TAILS),
                ),
            ),
            min_size=2,
            max_size=6,
        )
    )
    lines = [f"1 cup {food}" for food in dict.fromkeys(foods)] + ["2 onions", "1 cup flour"]
    return constraint, Recipe("r1", "Onion Bake", lines, steps)


def words(text: str) -> list[str]:
    return text.lower().replace(".", " ").split()


def is_subsequence(part: list[str], whole: list[str]) -> bool:
    it = iter(whole)
    return all(word in it for word in part)


@settings(max_examples=150, deadline=None)
@given(fitting_recipes())
def test_put_back_breaks_the_constraint_and_the_guide_brings_the_target_back(case):
    constraint, target = case
    assert valid(target, constraint)
    back = put_back_recipe(target, constraint)
    assert back.changes  # every line names a stand-in
    assert not valid(back.recipe, constraint)
    assert valid(target, constraint)  # the target itself is untouched
    forward = substitute_recipe(back.recipe, constraint).recipe
    assert valid(forward, constraint)
    changed = {c.index for c in back.changes if c.field == "steps"}
    for n, (step, again) in enumerate(zip(target.steps, forward.steps)):
        if n not in changed:
            assert again == step == back.recipe.steps[n]
            continue
        # Outside the foods, the guide's step says what the target step says.
        spans = sorted(c.span for c in back.changes if c.field == "steps" and c.index == n)
        kept, at = [], 0
        for start, end in spans:
            kept += words(step[at:start])
            at = end
        kept += words(step[at:])
        assert is_subsequence(kept, words(again)), (step, again)


@settings(max_examples=60, deadline=None)
@given(fitting_recipes(), st.sampled_from([0.0, 0.3, 0.5, 0.9]), st.sampled_from([1, 2]))
def test_edit_pairs_learn_the_changed_steps_and_a_bounded_share_of_copies(case, share, seed):
    constraint, target = case
    pairs = [
        p
        for p in edit_pairs(
            row_of(target), list(CONSTRAINTS), EditSettings("put_back", share, seed)
        )
        if p["constraint"] == constraint
    ]
    assert len(pairs) == 1
    pair = pairs[0]
    copied, learned = pair["copied_steps"], pair["learned_steps"]
    changed = [n for n in learned if n not in copied]
    assert changed == [
        n for n, (s, t) in enumerate(zip(pair["source_steps"], pair["target_steps"])) if s != t
    ]
    assert all(pair["source_steps"][n] == pair["target_steps"][n] for n in copied)
    assert len(copied) <= math.ceil(len(changed) * share / (1 - share))
    assert pair["target_steps"] == target.steps and pair["split"] == "train"


def test_a_step_names_what_its_ingredient_line_got_back():
    target = Recipe(
        "r1",
        "Vegan Tofu Ramen",
        ["225g smoked tofu, drained", "2 cups vegetable broth", "1 tbsp soy sauce"],
        ["Press the tofu.", "Fry the tofu in a hot pan.", "Add the vegetable broth and soy sauce."],
    )
    back = put_back_recipe(target, "vegan").recipe
    assert back.ingredients[:2] == ["225g ham, drained", "2 cups chicken broth"]
    assert back.steps == [
        "Press the ham.",
        "Fry the ham in a hot pan.",
        "Add the chicken broth and soy sauce.",
    ]
    assert back.title == "Ham Ramen"  # the diet word goes with the foods it promised away


def test_olive_oil_stands_for_butter_only_as_a_cooking_fat():
    fried = Recipe(
        "r1",
        "Greens",
        ["2 tbsp olive oil", "1 lb greens"],
        ["Heat the olive oil in a pan.", "Add the greens."],
    )
    dressed = Recipe(
        "r2",
        "Salad",
        ["2 tbsp olive oil", "1 lb greens"],
        ["Whisk the olive oil with lemon.", "Toss the greens."],
    )
    assert put_back_recipe(fried, "dairy-free").recipe.ingredients[0] == "2 tbsp butter"
    assert not put_back_recipe(dressed, "dairy-free").changes


def test_a_recipe_with_nothing_to_put_back_makes_no_pair():
    plain = Recipe(
        "r1", "Rice", ["1 cup rice", "2 cups water"], ["Boil the water.", "Add the rice."]
    )
    assert edit_pairs(row_of(plain), list(CONSTRAINTS), EditSettings("put_back", 0.3, 1)) == []


def test_edit_rows_use_the_grounded_format_and_say_where_they_came_from():
    target = Recipe(
        "r1",
        "Dairy-Free Pancakes",
        ["1 cup flour", "1 cup oat milk", "2 tbsp vegan butter"],
        ["Whisk the flour.", "Whisk in the oat milk.", "Melt the vegan butter in a pan.", "Serve."],
    )
    for source in ("put_back", "mask"):
        (pair,) = [
            p for p in edit_pairs(row_of(target), ["dairy-free"], EditSettings(source, 0.0, 1))
        ]
        rows = step_pair_rows(pair, "grounded")
        assert [r["source_step"] for r in rows] == [1, 2]
        assert {r["pair_source"] for r in rows} == {"edit"}
        for row in rows:
            parts = parse_text("grounded", row["text"])
            n = row["source_step"]
            assert parts.title == "Pancakes" and parts.target["title"] == target.title
            assert parts.target_steps[-1] == target.steps[n]
            assert parts.source_steps[-1] == pair["source_steps"][n]
        masked = pair["source_steps"][1]
        assert (MASK in masked) == (source == "mask")
        assert ("the milk" in masked) == (source == "put_back")
        assert pair["source_ingredients"][1] == "1 cup milk"  # the lines name the food either way


def test_held_out_lists_are_read_by_id_and_bad_ones_are_named(tmp_path):
    good = tmp_path / "set.tsv"
    good.write_text("id\tconstraint\twhy\na1\tvegan\tx\nb2\tegg-free\ty\n")
    assert read_held_out([str(good)]) == {"a1", "b2"}
    bad = tmp_path / "bad.tsv"
    bad.write_text("recipe\twhy\na1\tx\n")
    with pytest.raises(ValueError, match="no id column"):
        read_held_out([str(bad)])
    with pytest.raises(ValueError, match="held-out list not found"):
        read_held_out([str(tmp_path / "missing.tsv")])

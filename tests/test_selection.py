"""Best-of-N selection: each rule on passing and failing steps, weights, ties and contexts."""

from __future__ import annotations

import json

import pytest
from conftest import make_recipe, needs_dictionary

from rrt.modelling.selection import (
    RULES,
    StepContext,
    capitalised,
    clean_chars,
    dictionary_words,
    disguised_foods,
    ends_with_punctuation,
    ingredient_overlap,
    is_english,
    no_disguised_food,
    no_violation,
    recipe_words,
    score_candidate,
    select_best,
    short,
    step_context,
)

RECIPE = make_recipe(
    ["2 cups whole milk", "3 tablespoons cocoa powder", "2 large eggs", "1 tablespoon za'atar"],
    [
        "Whisk the eggs with the cocoa powder.",
        "Pour in the milk and sprinkle with za'atar.",
        "Serve warm.",
    ],
    title="Spiced Cocoa Custard",
)

pytestmark = needs_dictionary


@pytest.fixture
def vegan_ctx():
    return step_context(RECIPE, 0, ["vegan"])


@pytest.mark.parametrize(
    "text,expected",
    [
        ("Whisk the flax seeds with the cocoa powder.", 1.0),
        ("Slice the eggplant and grate the nutmeg.", 1.0),
        ("Whisk the eggs with the cocoa powder.", 0.0),
        ("Drizzle with honey.", 0.0),
        ("Stir in the coconut milk.", 1.0),
    ],
)
def test_no_violation(text, expected, vegan_ctx):
    assert no_violation(text, vegan_ctx) == expected


def test_no_violation_checks_every_constraint():
    ctx = step_context(RECIPE, 0, ["egg-free", "nut-free"])
    assert no_violation("Whisk the flax seeds.", ctx) == 1.0
    assert no_violation("Fold in the walnuts.", ctx) == 0.0  # only nut-free forbids it
    assert no_violation("Fold in the eggs.", ctx) == 0.0  # only egg-free forbids it
    assert no_violation("Fold in the walnuts.", step_context(RECIPE, 0, "egg-free")) == 1.0


@pytest.mark.parametrize(
    "constraints,text,found",
    [
        # What constrained decoding wrote once "chicken", "beef" or "meatball" had to go on with letters.
        ("vegan", "Toss the chickenocks with the granny tomato.", ["chickenocks"]),
        (
            "vegetarian",
            "Simmer the ground beefockward, then the meatballsiless.",
            ["beefockward", "meatballsiless"],
        ),
        (
            "vegan",
            "Blend the tofu with the MayoCal and the cheddarsweet potato.",
            ["MayoCal", "cheddarsweet"],
        ),
        ("vegan", "Fold in the tofuegg.", ["tofuegg"]),  # a food at the end too
        ("nut-free", "A walnutty crumble.", ["walnutty"]),
        ("vegan", "Slice the eggplant, grate the nutmeg and serve it eggless and dairyfree.", []),
        ("vegan", "Whisk the zqxv and blorpt.", []),  # non-words that hide no food
        ("egg-free", "A walnutty crumble.", []),  # walnuts are not what egg-free forbids
        ("vegan", "Season with the za'atar.", []),
    ],
)
def test_disguised_foods_are_non_words_that_begin_or_end_with_a_forbidden_food(
    constraints, text, found
):
    ctx = step_context(RECIPE, 0, constraints)
    assert disguised_foods(text, ctx) == found
    assert no_disguised_food(text, ctx) == float(not found)
    assert no_violation(text, ctx) == 1.0  # the tagger's word boundaries miss every one of them


def test_a_word_of_the_source_recipe_is_no_disguise():
    recipe = make_recipe(["1 Honeycrisp apple"], ["Slice the Honeycrisp."])
    assert disguised_foods("Slice the Honeycrisp.", step_context(recipe, 0, "vegan")) == []
    assert disguised_foods("Slice the Honeycrisp.", step_context(RECIPE, 0, "vegan")) == [
        "Honeycrisp"
    ]


def test_a_clean_step_beats_a_disguised_food_which_beats_a_named_one(vegan_ctx):
    clean, disguised, named = (
        "Whisk the flax with the cocoa.",
        "Whisk the eggocks with the cocoa.",
        "Whisk the eggs with the cocoa.",
    )
    best, scores = select_best([named, disguised, clean], vegan_ctx)
    assert best == 2 and scores[2]["total"] > scores[1]["total"] > scores[0]["total"]
    assert select_best([named, disguised], vegan_ctx)[0] == 1


@pytest.mark.parametrize(
    "text,expected",
    [
        ("Mix.", 1.0),
        ("x" * 99, 1.0),
        ("x" * 100, 0.0),
        ("Stir " * 40, 0.0),
    ],
)
def test_short(text, expected, vegan_ctx):
    assert short(text, vegan_ctx) == expected


@pytest.mark.parametrize(
    "text,expected",
    [
        ("Bake at 350 F for 20-25 minutes (until set).", 1.0),
        ("Add 50% of the flour.", 0.0),
        ("Top with *fresh* herbs.", 0.0),
        ("Costs $3.", 0.0),
        ("Season #2.", 0.0),
        ("Mix ^ well.", 0.0),
        ("Sugar = sweet.", 0.0),
        ("Flour + water.", 0.0),
        ("Stir well. <inst> Bake.", 0.0),
        ("Serve.<|endoftext|>", 0.0),
        ("Bake. <tgt:vegan>", 0.0),
        ("Serve with rice <|endo", 0.0),  # the broken first half of a special token
        ("Serve in a 9 < 13 inch dish.", 1.0),
    ],
)
def test_clean_chars(text, expected, vegan_ctx):
    assert clean_chars(text, vegan_ctx) == expected


@pytest.mark.parametrize(
    "text,expected",
    [
        ("Preheat the oven.", 1.0),
        ("  Preheat the oven.", 1.0),
        ("preheat the oven.", 0.0),
        ("350 degrees.", 0.0),
        ("(Optional) garnish.", 0.0),
    ],
)
def test_capitalised(text, expected, vegan_ctx):
    assert capitalised(text, vegan_ctx) == expected


@pytest.mark.parametrize(
    "text,expected",
    [
        ("Serve.", 1.0),
        ("Enjoy!", 1.0),
        ("Is it done?", 1.0),
        ('Say "cheers."', 1.0),
        ("Bake (about 20 minutes.)", 1.0),
        ("Serve. ", 1.0),
        ("Serve", 0.0),
        ("Add the salt,", 0.0),
        ("Mix and", 0.0),
    ],
)
def test_ends_with_punctuation(text, expected, vegan_ctx):
    assert ends_with_punctuation(text, vegan_ctx) == expected


def test_dictionary_words_scores_the_fraction_of_known_words(vegan_ctx):
    assert dictionary_words("Whisk the flour and sugar.", vegan_ctx) == 1.0
    assert dictionary_words("Whisk the zqxv and blorpt.", vegan_ctx) == pytest.approx(3 / 5)
    assert dictionary_words("Bake 350 200", vegan_ctx) == 1.0  # numbers are not words to check
    assert dictionary_words("350 200", vegan_ctx) == 0.0


def test_dictionary_words_accepts_recipe_words_and_the_source_recipe():
    assert {"tahini", "sauté", "tempeh", "aquafaba"} <= recipe_words()
    ctx = step_context(RECIPE, 1, ["vegan"])
    assert dictionary_words("Sauté the tempeh, then stir in tahini and aquafaba.", ctx) == 1.0
    assert (
        dictionary_words("Sprinkle with za’atar.", ctx) == 1.0
    )  # from the source recipe, either apostrophe
    bare = StepContext(["vegan"], "Pour in the milk.", ["whole milk"])
    assert dictionary_words("Sprinkle with za'atar.", bare) == pytest.approx(2 / 3)


def test_dictionary_words_accepts_ingredient_names():
    ctx = StepContext(["vegan"], "Add the milk.", ["oatly barista"])
    assert dictionary_words("Add the oatly.", ctx) == 1.0
    assert is_english("Whisk") and not is_english("oatly")


@pytest.mark.parametrize(
    "text,expected",
    [
        ("Whisk the flax eggs with the cocoa powder.", 1.0),  # "flax eggs" still names ingredient 2
        ("Whisk the cocoa powder.", 0.5),
        ("Whisk the cocoa powder with the milk.", pytest.approx(1 / 3)),
        ("Whisk everything.", 0.0),
    ],
)
def test_ingredient_overlap(text, expected, vegan_ctx):
    assert vegan_ctx.source_ingredients == {1, 2}
    assert ingredient_overlap(text, vegan_ctx) == expected


def test_ingredient_overlap_is_1_when_the_source_step_names_none():
    ctx = step_context(RECIPE, 2, ["vegan"])
    assert ctx.source_step == "Serve warm."
    assert ingredient_overlap("Serve with the cocoa powder.", ctx) == 1.0


def test_no_violation_dominates_every_other_rule(vegan_ctx):
    weights = {name: weight for name, (_, weight) in RULES.items()}
    assert weights["no_violation"] > sum(w for n, w in weights.items() if n != "no_violation")
    assert weights["no_disguised_food"] > sum(
        w for n, w in weights.items() if n not in ("no_violation", "no_disguised_food")
    )
    clean_but_ugly = "whisk zqx blorp %% <inst> " * 6
    perfect_but_violating = "Whisk the eggs with the cocoa powder."
    best, scores = select_best([perfect_but_violating, clean_but_ugly], vegan_ctx)
    assert best == 1
    assert scores[0]["no_violation"] == 0.0 and scores[0]["total"] == 56.0
    assert (
        scores[1]["no_violation"] == 1.0 and scores[1]["short"] == scores[1]["clean_chars"] == 0.0
    )


def test_scores_are_every_rule_plus_total_and_json_floats(vegan_ctx):
    scores = score_candidate("Whisk the flax eggs with the cocoa powder.", vegan_ctx)
    assert list(scores) == list(RULES) + ["total"]
    assert all(type(v) is float for v in scores.values())
    assert scores["total"] == sum(RULES[n][1] * scores[n] for n in RULES) == 156.0
    assert json.loads(json.dumps(scores)) == scores


@pytest.mark.parametrize("empty", ["", "   ", "\n"])
def test_empty_candidate_scores_zero_and_loses(empty, vegan_ctx):
    scores = score_candidate(empty, vegan_ctx)
    assert scores["total"] == 0.0 and set(scores.values()) == {0.0}
    best, _ = select_best([empty, "whisk the eggs"], vegan_ctx)
    assert best == 1  # even a violating step is a rewrite; an empty one is not


def test_ties_go_to_the_lowest_index(vegan_ctx):
    same = ["Whisk the cocoa powder.", "Stir the cocoa powder.", "Whisk the cocoa powder."]
    for _ in range(3):
        best, scores = select_best(same, vegan_ctx)
        assert best == 0 and scores[0]["total"] == scores[1]["total"] == scores[2]["total"]
    assert select_best(["Whisk the eggs.", *same], vegan_ctx)[0] == 1


def test_select_best_needs_candidates(vegan_ctx):
    with pytest.raises(ValueError):
        select_best([], vegan_ctx)


def test_step_context_from_dict_and_recipe():
    row = {"title": RECIPE.title, "ingredients": RECIPE.ingredients, "steps": RECIPE.steps}
    from_dict, from_recipe = (
        step_context(row, 1, "vegan,nut-free"),
        step_context(RECIPE, 1, ["vegan", "nut-free"]),
    )
    assert from_dict == from_recipe
    assert from_dict.constraints == ["vegan", "nut-free"]
    assert from_dict.source_step == RECIPE.steps[1]
    assert from_dict.ingredient_names == ["whole milk", "cocoa powder", "eggs", "za'atar"]
    assert {"spiced", "custard", "za'atar", "whisk"} <= from_dict.source_words
    rewritten = step_context(RECIPE, 1, "vegan", ingredient_names=["oat milk", "cocoa powder"])
    assert rewritten.ingredient_names == ["oat milk", "cocoa powder"]
    with pytest.raises(ValueError):
        step_context(RECIPE, 0, "keto")


def test_multi_constraint_selection_prefers_the_step_that_obeys_both():
    ctx = step_context(RECIPE, 0, ["vegan", "nut-free"])
    candidates = [
        "Whisk the almonds with the cocoa powder.",
        "Whisk the eggs with the cocoa powder.",
        "Whisk the flax eggs with the cocoa powder and pecans.",
        "Whisk the cocoa powder with water.",
    ]
    best, scores = select_best(candidates, ctx)
    assert best == 3
    assert [s["no_violation"] for s in scores] == [0.0, 0.0, 0.0, 1.0]


def test_a_repeated_candidate_is_scored_once_and_keeps_its_own_scores(vegan_ctx, monkeypatch):
    from rrt.modelling import selection

    scored = []

    def counted(text, ctx):
        scored.append(text)
        return score_candidate(text, ctx)

    monkeypatch.setattr(selection, "score_candidate", counted)
    same, other = "Whisk the cocoa powder.", "Whisk the eggs."
    best, scores = selection.select_best([other, same, other, same, same], vegan_ctx)
    assert scored == [other, same] and best == 1
    assert scores == [score_candidate(t, vegan_ctx) for t in (other, same, other, same, same)]
    scores[1]["total"] = -1.0  # each candidate's scores are its own record
    assert scores[3]["total"] == scores[4]["total"] == score_candidate(same, vegan_ctx)["total"]


def test_missing_dictionary_names_the_packages(monkeypatch):
    import enchant

    from rrt.modelling import selection

    def no_dictionary(tag):
        raise enchant.errors.DictNotFoundError(
            f"Dictionary for language '{tag}' could not be found"
        )

    monkeypatch.setattr(enchant, "Dict", no_dictionary)
    selection._english.cache_clear()
    selection._known_word.cache_clear()
    try:
        with pytest.raises(selection.DictionaryMissing, match="libenchant-2-2 hunspell-en-us"):
            is_english("whisk")
    finally:
        selection._english.cache_clear()
        selection._known_word.cache_clear()


def test_sampled_steps_skip_unsampled_steps_and_name_each_candidates_hidden_foods():
    from rrt.evaluation.rewrite_records import sampled_steps

    source = {"title": RECIPE.title, "ingredients": RECIPE.ingredients, "steps": RECIPE.steps}
    record = {
        "source": source,
        "constraint": "vegan",
        "steps": [
            {
                "source_step": 0,
                "chosen": 0,
                "candidates": [{"text": "Whisk the flax."}, {"text": "Whisk the eggocks."}],
            },
            {
                "source_step": 1,
                "chosen": 0,
                "candidates": [{"text": "Pour in the oat milk."}],
            },  # one candidate: a guide's
            {
                "source_step": 2,
                "chosen": 1,
                "candidates": [{"text": "Serve the tofuegg."}, {"text": "Serve warm."}],
            },
        ],
    }
    found = [
        (entry["source_step"], ctx.source_step, words)
        for _, entry, ctx, words in sampled_steps([record])
    ]
    assert found == [
        (0, RECIPE.steps[0], [[], ["eggocks"]]),
        (2, RECIPE.steps[2], [["tofuegg"], []]),
    ]

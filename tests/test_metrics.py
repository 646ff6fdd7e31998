"""Rewrite metrics checked by hand: ROUGE-L recall, trigram diversity, adherence, perplexity."""

from __future__ import annotations

import math

import pytest
from conftest import needs_dictionary

from rrt.corpus.formats import no_source
from rrt.evaluation.metrics import (
    adherence_counts,
    encode_recipe,
    fit_block,
    hidden_food_steps,
    mention_verdicts,
    percent,
    perplexity,
    read_foods,
    rouge_l_recall,
    step_nll,
    summarise,
    trigram_diversity,
)
from rrt.modelling.models import lm_block_size
from rrt.recipes.foods import food_mentions, food_vocabulary
from rrt.recipes.paper_format import END_INGS

RECIPES = [
    {
        "title": "Butter Cake",
        "ingredients": ["1 cup butter", "2 cups flour", "1 cup sugar"],
        "steps": ["Cream the butter and sugar.", "Fold in the flour.", "Bake for 30 minutes."],
    },
    {"title": "Toast", "ingredients": ["2 slices bread"], "steps": ["Toast the bread."]},
    {
        "title": "Long Soup",
        "ingredients": [f"{i} cups stock number {i}" for i in range(1, 30)],
        "steps": [f"Simmer the stock for {i} minutes and stir it well." for i in range(1, 20)],
    },
]


def tiny_lm(vocab_texts: list[str] | None = None, n_positions: int = 256, seed: int = 0):
    """A one-layer GPT-2 and its BPE tokenizer, trained on nothing but these texts' vocabulary."""
    from rrt.modelling.models import build_model, train_tiny_tokenizer

    texts = vocab_texts or [no_source(r["title"], r["ingredients"], r["steps"]) for r in RECIPES]
    tokenizer = train_tiny_tokenizer(texts * 5, 1000)
    lm = build_model(
        "tiny",
        len(tokenizer),
        {"n_layer": 1, "n_head": 2, "n_embd": 32, "n_positions": n_positions},
        seed=seed,
        pad_token_id=tokenizer.pad_token_id,
    )
    return lm, tokenizer


def export_tiny_lm(folder) -> None:
    """An exported untrained No-Source LM (enough for plumbing tests)."""
    from rrt.modelling.models import export_model

    lm, tokenizer = tiny_lm()
    export_model(lm, tokenizer, str(folder), {"variant": "no_source", "block_size": 256})


def zeroed(lm):
    """Every weight and bias set to zero: each next-token distribution is uniform."""
    import torch

    with torch.no_grad():
        for parameter in lm.parameters():
            parameter.zero_()
    return lm


# ---- closeness and diversity -------------------------------------------------------------


def test_rouge_l_recall_is_the_lcs_over_the_source_length():
    # source: the cat sat on the mat (6 words); rewrite: the cat lay on a mat; LCS: the cat on mat = 4.
    assert rouge_l_recall(["The cat lay on a mat."], ["The cat sat on the mat."]) == pytest.approx(
        400 / 6
    )
    # Steps are joined: preheat the oven bake the cake (6) vs preheat oven bake the vegan cake; LCS 5.
    assert rouge_l_recall(
        ["Preheat oven.", "Bake the vegan cake."], ["Preheat the oven.", "Bake the cake."]
    ) == pytest.approx(500 / 6)
    assert rouge_l_recall(["Copy it."], ["Copy it."]) == pytest.approx(100.0)
    assert rouge_l_recall([], ["Bake."]) == 0.0


def test_trigram_diversity_counts_unique_over_all_within_steps():
    # (a b c), (b c d), (a b c): two unique of three; "x y" has no trigram.
    assert trigram_diversity(["a b c d", "A b c.", "x y"]) == pytest.approx(2 / 3)
    # mix the flour | the flour mix | flour mix the | mix the flour: 3 unique of 4.
    assert trigram_diversity(["Mix the flour, mix the flour."]) == pytest.approx(0.75)
    # Trigrams never cross a step boundary.
    assert trigram_diversity(["a b", "c d"]) is None


# ---- adherence ---------------------------------------------------------------------------


def test_adherence_three_of_four_mentions_obey():
    vocabulary = food_vocabulary(["butter", "flour", "sugar", "peanut butter"])
    counts = adherence_counts(
        ["1 cup butter", "2 cups flour", "1/2 cup sugar"],
        ["Stir in the peanut butter."],
        "dairy-free",
        vocabulary,
    )
    assert counts == (3, 4)
    assert percent(*counts) == 75.0


def test_peanut_butter_is_not_dairy_but_is_a_nut():
    vocabulary = food_vocabulary(["butter"])  # even when only "butter" is a known food
    text = "Spread the peanut butter on toast."
    assert [ok for _, _, ok in mention_verdicts(text, vocabulary, ["dairy-free"])] == [True]
    verdicts = mention_verdicts(text, vocabulary, ["nut-free"])
    assert [(text[a:b], ok) for a, b, ok in verdicts] == [("peanut butter", False)]


def test_a_violation_the_vocabulary_misses_still_counts():
    vocabulary = food_vocabulary(["milk"])
    # "soy milk" obeys vegan; bacon is not in the vocabulary but the tagger finds it.
    assert adherence_counts(["1 cup soy milk"], ["Fry the bacon."], "vegan", vocabulary) == (1, 2)
    assert adherence_counts([], ["Fry the bacon."], "vegan,nut-free", vocabulary) == (0, 1)


def test_longest_food_name_wins_and_plurals_match():
    vocabulary = food_vocabulary(["cream", "cream of tartar", "tomato", "Milk (Cow)"])
    text = "Add 2 tomatoes, the cream of tartar and cow milk."
    assert [text[a:b] for a, b in food_mentions(text, vocabulary)] == [
        "tomatoes",
        "cream of tartar",
        "milk",
    ]


def test_recipes_without_mentions_leave_the_adherence_mean():
    records = [
        {"constraint": "vegan", "rewrite": {"steps": ["Stir."]}},
        {"constraint": "vegan", "rewrite": {"steps": ["Fry the bacon.", "Add tofu."]}},
        {"constraint": "nut-free", "rewrite": {"steps": []}},
    ]
    measures = [
        {
            "obeying": 0,
            "mentions": 0,
            "empty": False,
            "rouge_l_recall": 10.0,
            "nll": 2.0,
            "tokens": 2,
        },
        {
            "obeying": 1,
            "mentions": 2,
            "empty": False,
            "rouge_l_recall": 20.0,
            "nll": 4.0,
            "tokens": 2,
        },
        {
            "obeying": 0,
            "mentions": 0,
            "empty": True,
            "rouge_l_recall": 0.0,
            "nll": 0.0,
            "tokens": 0,
        },
    ]
    system, per_constraint, _, counts = summarise(records, measures)
    assert system["adherence"] == 50.0 and system["n_recipes"] == 3
    assert system["perplexity"] == pytest.approx(math.exp(6.0 / 4))
    assert system["rouge_l_recall"] == pytest.approx(10.0)
    assert per_constraint == {"vegan": 50.0, "nut-free": None}
    assert counts["recipes_without_mentions"] == 2 and counts["empty_rewrites"] == 1


@needs_dictionary
def test_steps_hiding_a_forbidden_food_in_a_non_word_are_counted_apart_from_adherence():
    source = {
        "title": "Pancakes",
        "ingredients": ["2 eggs", "1 cup Eggnoggin mix"],
        "steps": ["Mix."],
    }
    steps = [
        "Serve the chickenocks hot.",
        "Fold in the beefockward.",
        "Bake the eggless cake.",
        "Stir the Eggnoggin.",
    ]
    # Not in adherence: the tagger's whole words see no food there.
    assert adherence_counts([], steps[:2], "vegan", food_vocabulary(["flour"])) == (0, 0)
    # "eggless" names the food's absence; "Eggnoggin" is the source recipe's own word.
    assert hidden_food_steps(steps, source, "vegan") == 2
    assert hidden_food_steps(steps, source, "egg-free") == 0
    assert hidden_food_steps(steps, source, "") == 0


def test_hidden_food_steps_are_none_in_the_counts_when_not_counted():
    records = [{"constraint": "vegan", "rewrite": {"steps": ["Stir."]}}] * 2
    measure = {
        "obeying": 0,
        "mentions": 0,
        "empty": False,
        "rouge_l_recall": 0.0,
        "nll": 0.0,
        "tokens": 0,
    }
    assert (
        summarise(records, [{**measure, "hidden_food_steps": 1}] * 2)[3]["hidden_food_steps"] == 2
    )
    assert (
        summarise(records, [{**measure, "hidden_food_steps": 1}, measure])[3]["hidden_food_steps"]
        is None
    )


def test_foods_file_needs_a_name_column(tmp_path):
    good = tmp_path / "food.csv"
    good.write_text(
        'id,name,name_scientific\n1,Angelica,Angelica keiskei\n2,"Milk (Cow)",Bos taurus\n'
    )
    assert read_foods(str(good)) == ["Angelica", "Milk (Cow)"]
    bad = tmp_path / "bad.csv"
    bad.write_text("id,title\n1,x\n")
    with pytest.raises(ValueError, match="no 'name' column"):
        read_foods(str(bad))


# ---- fluency -----------------------------------------------------------------------------


def test_fit_block_keeps_bos_and_the_nearest_context():
    assert fit_block([1, 2, 3], [4, 5], 8) == ([1, 2, 3, 4, 5], 3)
    # context 5 + steps 6 > 8: context keeps half the block (BOS + the last 3), steps are cut.
    assert fit_block([1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11], 8) == ([1, 3, 4, 5, 6, 7, 8, 9], 4)
    # Short steps leave the rest of the block to the context.
    assert fit_block([1, 2, 3, 4, 5, 6, 7], [8, 9], 6) == ([1, 5, 6, 7, 8, 9], 4)


def test_uniform_lm_has_perplexity_equal_to_its_vocabulary_over_step_tokens_only():
    lm, tokenizer = tiny_lm()
    zeroed(lm)
    scores = step_nll(lm, tokenizer, RECIPES[:2], block=256, batch_size=2)
    for recipe, score in zip(RECIPES, scores):
        ids = tokenizer(
            no_source(recipe["title"], recipe["ingredients"], recipe["steps"]),
            add_special_tokens=False,
        )["input_ids"]
        assert (
            score["tokens"] == len(ids) - ids.index(tokenizer.convert_tokens_to_ids(END_INGS)) - 1
        )
    total_nll, total_tokens = sum(s["nll"] for s in scores), sum(s["tokens"] for s in scores)
    assert perplexity(total_nll, total_tokens) == pytest.approx(lm.config.vocab_size, abs=1e-3)


def test_only_step_tokens_are_scored_under_a_fixed_distribution():
    import torch

    lm, tokenizer = tiny_lm()
    zeroed(lm)
    # With every other weight zero, ln_f's bias e0 makes the logits wte[:, 0]: one fixed distribution.
    logits = torch.randn(lm.config.vocab_size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        lm.transformer.ln_f.bias[0] = 1.0
        lm.transformer.wte.weight[:, 0] = logits
    logp = torch.log_softmax(logits, -1)
    recipe = RECIPES[0]
    ids = tokenizer(
        no_source(recipe["title"], recipe["ingredients"], recipe["steps"]), add_special_tokens=False
    )["input_ids"]
    step_ids = ids[ids.index(tokenizer.convert_tokens_to_ids(END_INGS)) + 1 :]
    expected = -sum(float(logp[t]) for t in step_ids)
    assert step_nll(lm, tokenizer, [recipe], block=256)[0]["nll"] == pytest.approx(
        expected, rel=1e-5
    )
    all_ids = -sum(float(logp[t]) for t in ids[1:])
    assert abs(expected - all_ids) > 1.0  # scoring the whole text would give another number


def test_padding_does_not_change_scores_and_long_recipes_are_truncated():
    lm, tokenizer = tiny_lm(n_positions=64)
    recipes = RECIPES + [{"title": "Empty", "ingredients": ["salt"], "steps": []}]
    alone = [step_nll(lm, tokenizer, [r], block=64)[0] for r in recipes]
    batched = step_nll(lm, tokenizer, recipes, block=64, batch_size=4)
    for a, b in zip(alone, batched):
        assert a["tokens"] == b["tokens"] and a["nll"] == pytest.approx(b["nll"], rel=1e-4)
    assert batched[3] == {"nll": 0.0, "tokens": 0, "dropped_tokens": 0}
    ids, context, dropped = encode_recipe(tokenizer, RECIPES[2], 64)
    assert len(ids) == 64 and context == 32 and dropped > 0 and batched[2]["tokens"] == 32
    assert lm_block_size(lm.config, {"block_size": 32}) == 32 and lm_block_size(lm.config) == 64

"""Step aligner: the paper's Hot Cocoa verdicts and synthetic pairs with known links."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import PAPER_SAMPLE, ROOT, SAMPLE, WEB_RECIPES, needs_shared_data
from hypothesis import given, settings
from hypothesis import strategies as st

from rrt.config import load_settings
from rrt.corpus.alignment import (
    AlignSettings,
    TranslationTable,
    align_steps,
    kept_links,
    train_translation_table,
)
from rrt.corpus.dish import dish_key
from rrt.corpus.link_labels import LinkCounts, load_labels
from rrt.corpus.pairing import PairSettings
from rrt.recipes.lexicon import CONSTRAINTS
from rrt.recipes.loaders import read_recipes
from testing.synthetic_pairs import link_accuracy, perturbed_pair

ALIGNMENT, DATA = load_settings().alignment, load_settings().data
# The HMM as first built: its posterior alone, no bound on a source step's links.
OLD = AlignSettings.from_config(ALIGNMENT, calibrated=False, max_fanout=0)
FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "hot_cocoa_pair.json").read_text())


@pytest.fixture(scope="module")
def corpus():
    recipes = list(read_recipes([str(SAMPLE)]))
    dishes = collections.defaultdict(list)
    for recipe in recipes:
        dishes[dish_key(recipe.title, "head")].append(recipe)
    pairs = [
        (a.steps, b.steps) for group in dishes.values() for a in group for b in group if a is not b
    ]
    synthetic = [
        perturbed_pair(r, CONSTRAINTS[i % len(CONSTRAINTS)], i) for i, r in enumerate(recipes)
    ]
    table = train_translation_table(
        pairs + [(s, t) for s, t, _ in synthetic], ALIGNMENT.vocab_size, ALIGNMENT.em_iterations
    )
    return table, synthetic


def test_hot_cocoa_links_get_the_papers_verdicts(corpus):
    table, _ = corpus
    scores, _ = align_steps(FIXTURE["source"]["steps"], FIXTURE["target"]["steps"], table, OLD)
    assert scores.shape == (5, 7)
    for i, j in FIXTURE["expected"]["high"]:
        assert scores[i, j] >= 50, (i, j, scores[i, j])
    for i, j in FIXTURE["expected"]["low"]:
        assert scores[i, j] < 50, (i, j, scores[i, j])
    merged = {link.source_step: link.target_steps for link in kept_links(scores, 50)}
    assert merged[4][-2:] == [5, 6]  # one source step, two target steps merged in order


def test_scores_are_posteriors_per_target_step(corpus):
    table, _ = corpus
    scores, loglik = align_steps(FIXTURE["source"]["steps"], FIXTURE["target"]["steps"], table, OLD)
    assert np.allclose(scores.sum(axis=0), 100.0) and np.isfinite(loglik)


def test_substituted_and_perturbed_recipes_align_back(corpus):
    table, synthetic = corpus
    right = total = 0
    for source, target, truth in synthetic:
        scores, _ = align_steps(source, target, table, OLD)
        a, b = link_accuracy(scores, truth)
        right, total = right + a, total + b
    assert total > 400 and right / total >= 0.90, right / total


def test_table_round_trips(tmp_path, corpus):
    table, _ = corpus
    table.save(str(tmp_path / "t.npz"))
    again = TranslationTable.load(str(tmp_path / "t.npz"))
    assert again.vocab == table.vocab and np.allclose(again.probs, table.probs)


def test_empty_sides_do_not_crash(corpus):
    table, _ = corpus
    scores, loglik = align_steps([], ["Stir."], table, OLD)
    assert scores.shape == (0, 1) and loglik == float("-inf")


# ---- links on real recipes: fan-out, the calibrated link model, same-dish pairs ------------


def test_one_source_step_keeps_at_most_max_fanout_targets():
    scores = np.array([[99.0, 97.0, 60.0, 98.0, 55.0], [10.0, 20.0, 30.0, 40.0, 90.0]])
    assert [link.target_steps for link in kept_links(scores, 50.0)] == [[0, 1, 2, 3, 4], [4]]
    assert [link.target_steps for link in kept_links(scores, 50.0, max_fanout=3)] == [
        [0, 1, 3],
        [4],
    ]


def test_calibrated_scores_favour_the_step_that_does_the_same_job(corpus):
    from rrt.corpus.alignment import LINK_FEATURES, calibrated_scores, load_link_model

    weights = load_link_model()
    assert len(weights) == len(LINK_FEATURES)
    source = [
        "Preheat the oven to 350F.",
        "Whisk the milk, eggs and sugar.",
        "Bake for 30 minutes.",
    ]
    target = [
        "Whisk the oat milk, flax and sugar.",
        "Preheat the oven to 350F.",
        "Bake for 30 minutes.",
        "Let it cool.",
    ]
    posterior, _ = align_steps(source, target, corpus[0], OLD)
    scores = calibrated_scores(source, target, posterior, corpus[0], OLD, weights)
    assert scores.shape == (3, 4) and ((scores >= 0) & (scores <= 100)).all()
    assert scores[0].argmax() == 1 and scores[1].argmax() == 0 and scores[2].argmax() == 2
    assert scores[:, 3].max() < 50  # nothing in the source is "let it cool"


def test_steps_that_do_the_same_job_share_kinds_of_work():
    from rrt.corpus.cooking_actions import action_overlap, step_actions

    named = step_actions("Whisk together the dry ingredients.")
    listed = step_actions(
        "In a large bowl whisk the flour, baking powder, salt and brown sugar together."
    )
    assert (
        named == listed == {"mix", "dry_ingredients"}
    )  # baking powder is not baking, brown sugar not browning
    assert step_actions("Pat the swordfish steaks dry.") == {"drain"}
    assert step_actions("Bake until golden brown, then cool on a rack.") == {"oven", "rest"}
    assert action_overlap(named, listed) == 1.0 and action_overlap(named, frozenset()) == 0.0


def test_steps_at_the_same_point_of_their_recipes_share_stages():
    from rrt.corpus.cooking_actions import action_overlap, step_stages

    assert step_stages("Preheat the oven to 180C.") == {"heat_oven"}
    assert step_stages("Heat the oven to 350 degrees F.") == {"heat_oven"}
    # Baking powder and soda are dry ingredients, not baking.
    assert step_stages("Sift the flour with the baking powder and soda.") == {"dry_ingredients"}
    assert step_stages("Bake until set, then let it cool and chill overnight.") == {"bake", "cool"}
    assert step_stages("Slice and serve warm with butter.") == {"serve", "wet_ingredients"}
    assert step_stages("Season with a pinch of cumin.") == frozenset()
    cooled = step_stages("Let the cake rest for ten minutes.")
    assert action_overlap(cooled, step_stages("Cooling: refrigerate for an hour.")) == 1.0
    assert action_overlap(cooled, step_stages("Serve.")) == 0.0


def test_a_target_step_made_of_two_source_steps_links_both(corpus):
    from rrt.corpus.alignment import LINK_FEATURES, calibrated_scores, load_link_model

    source = [
        "Preheat the oven to 350F.",
        "Cream the butter and sugar.",
        "Beat in the eggs and vanilla.",
        "Bake for 30 minutes.",
    ]
    target = [
        "Preheat the oven to 350F.",
        "Beat the vegan butter, sugar, flax eggs and vanilla.",
        "Bake for 30 minutes.",
    ]
    posterior, _ = align_steps(source, target, corpus[0], OLD)
    scores = calibrated_scores(source, target, posterior, corpus[0], OLD, load_link_model())
    merged = scores[1:3, 1]
    # The forward HMM gives each target step one source step; the reverse reading sees both.
    assert posterior[1:3, 1].min() < 50 and merged.min() >= 50, (posterior[:, 1], scores[:, 1])
    assert LINK_FEATURES.index("reverse_posterior") > 0


def test_pairs_only_join_recipes_of_one_dish():
    from rrt.corpus.dish import dish_similarity
    from rrt.corpus.pairing import pair_dish

    def recipe(rid, title, ingredients, steps, vegan):
        return {
            "id": rid,
            "title": title,
            "ingredients": ingredients,
            "steps": steps,
            "split": "train",
            "dish": "cheese",
            "valid_vegan": vegan,
        }

    grilled = recipe(
        "a",
        "Grilled Cheese",
        ["2 slices bread", "2 slices cheddar cheese", "1 tbsp butter"],
        ["Butter the bread.", "Fry the sandwich until the cheese melts."],
        False,
    )
    mac = recipe(
        "b",
        "Vegan Mac and Cheese",
        ["8 oz macaroni", "1 cup cashews", "1 cup oat milk"],
        [
            "Boil the macaroni.",
            "Blend the cashews with the oat milk into a sauce.",
            "Stir the sauce into the pasta.",
        ],
        True,
    )
    vegan_grilled = recipe(
        "c",
        "Vegan Grilled Cheese",
        ["2 slices bread", "2 slices vegan cheese", "1 tbsp olive oil"],
        ["Brush the bread with oil.", "Fry the sandwich until the cheese melts."],
        True,
    )
    assert dish_similarity(grilled, vegan_grilled) > 0.4
    assert dish_similarity(grilled, mac) < 0.21
    table = train_translation_table(
        [(grilled["steps"], vegan_grilled["steps"])], ALIGNMENT.vocab_size, ALIGNMENT.em_iterations
    )
    unlike: list[dict] = []
    pairs = pair_dish(
        [grilled, mac, vegan_grilled],
        ["vegan"],
        table,
        PairSettings.from_config(DATA, min_dish_similarity=0.21, title_extra_words=None),
        OLD,
        unlike,
    )
    assert [(p["source_id"], p["target_id"]) for p in pairs] == [("a", "c")]
    assert [(u["source_id"], u["target_id"]) for u in unlike] == [("a", "b")] and unlike[0][
        "similarity"
    ] < 0.21


@needs_shared_data
def test_links_on_hand_labelled_real_pairs_beat_the_old_aligner():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "alignment_quality", ROOT / "benchmarks" / "alignment_quality.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    corpus = bench.read_corpus(str(WEB_RECIPES), str(PAPER_SAMPLE))
    pairs = [pair for path in bench.LABELS for pair in load_labels(path, corpus)]
    assert len(pairs) >= 120
    align = AlignSettings.from_config(ALIGNMENT, max_fanout=3, calibrated=True)
    dishes = PairSettings.from_config(DATA, min_dish_similarity=0.21, title_extra_words=1)
    old = bench.measure(pairs, corpus, False, OLD, dishes)
    new = bench.measure(pairs, corpus, True, align, dishes, seeds=2)
    # The new figures come from a link model that never saw the pair it scores.
    assert new["precision"] >= 0.8 and new["precision"] > old["precision"] + 0.2, (old, new)
    assert (
        new["f1"] > old["f1"] + 0.05
        and new["same_dish_share"] >= 0.9
        and new["same_dish_share"] > old["same_dish_share"] + 0.1
    ), (old, new)


def test_steps_that_do_one_job_in_other_words_are_alike_in_meaning():
    from rrt.corpus.step_meaning import meaning_similarity

    source = ["Roll out the dough until it is about 1/8 inch thick.", "Preheat the oven to 350 F."]
    target = ["Heat the oven to 180 C.", "Roll the dough until thin, like pasta."]
    similarity = meaning_similarity(source, target)
    assert similarity.shape == (2, 2) and list(similarity.argmax(axis=1)) == [1, 0]
    assert meaning_similarity([], target).shape == (0, 2)


LINKS = st.sets(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=12)


@given(st.lists(st.tuples(LINKS, LINKS), max_size=6), st.integers(0, 6))
def test_link_counts_of_two_sets_of_pairs_add_up_to_their_counts_together(pairs, cut):
    def counted(some):
        counts = LinkCounts()
        for predicted, labelled in some:
            counts.add(predicted, labelled)
        return counts

    assert counted(pairs[:cut]) + counted(pairs[cut:]) == counted(pairs)


# ---- costs: the HMM is linear in each recipe's steps; absurdly long recipes are not aligned ------


def _reference_emissions(table, src_steps, tgt_steps, null_weight):
    """The emissions as first written (one (target words x source words) block), for comparison."""
    n, m = len(src_steps), len(tgt_steps)
    src_lens = np.array([len(s) for s in src_steps])
    tgt_lens = np.array([len(t) for t in tgt_steps])
    if not tgt_lens.sum():
        return np.zeros((m, n))
    tgt_ids = table.ids(w for t in tgt_steps for w in t)
    from_null = table.probs[tgt_ids, table.index["<null>"]]
    if src_lens.sum():
        block = table.probs[np.ix_(tgt_ids, table.ids(w for s in src_steps for w in s))]
        starts = np.concatenate([[0], np.cumsum(src_lens)[:-1]])
        sums = np.add.reduceat(block, np.minimum(starts, block.shape[1] - 1), axis=1)
        from_src = np.where(src_lens > 0, sums / np.maximum(src_lens, 1), from_null[:, None])
    else:
        from_src = np.repeat(from_null[:, None], n, axis=1)
    word_logs = np.log(
        np.maximum(null_weight * from_null[:, None] + (1 - null_weight) * from_src, 1e-12)
    )
    rows = np.concatenate([[0], np.cumsum(tgt_lens)[:-1]])
    out = np.add.reduceat(word_logs, np.minimum(rows, word_logs.shape[0] - 1), axis=0)
    return np.where(tgt_lens[:, None] > 0, out, 0.0)


def _reference_forward_backward(emit, settings):
    """The HMM as first written: a full (source x source) transition matrix per target step."""
    m, n = emit.shape
    delta = np.arange(n)[None, :] - np.arange(n)[:, None]
    logits = -settings.forward_bias * np.abs(delta - 1).astype(float)
    logits = np.where(delta < 0, logits - settings.backward_penalty, logits)
    trans = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    start = -settings.forward_bias * np.arange(n, dtype=float)
    start -= np.logaddexp.reduce(start)
    alpha, beta = np.zeros((m, n)), np.zeros((m, n))
    alpha[0] = start + emit[0]
    for j in range(1, m):
        alpha[j] = np.logaddexp.reduce(alpha[j - 1][:, None] + trans, axis=0) + emit[j]
    for j in range(m - 2, -1, -1):
        beta[j] = np.logaddexp.reduce(trans + (emit[j + 1] + beta[j + 1])[None, :], axis=1)
    loglik = np.logaddexp.reduce(alpha[-1])
    return np.exp(alpha + beta - loglik), float(loglik)


WORDS = ["stir", "flour", "sugar", "bake", "oven", "milk", "whisk", "butter", "pan", "salt"]
# Steps with content words: the first emissions cut a word from the step before an empty last
# step ("Serve." has none), so the two agree only where that was right.
STEPS = st.lists(
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join), min_size=1, max_size=6
)
METHOD = [
    "Whisk the flour, sugar and salt in a bowl.",
    "Stir in the milk and melted butter.",
    "Heat a pan and fry the batter until golden.",
    "Bake in the oven for ten minutes.",
]
SMALL_TABLE = train_translation_table([(METHOD, METHOD[::-1])], 100, 2)


@settings(max_examples=30, deadline=None)
@given(STEPS, STEPS, st.floats(-1.0, 4.0), st.floats(0.0, 6.0), st.floats(0.05, 0.95))
def test_the_hmm_gives_what_the_quadratic_recursion_gave(
    source, target, forward_bias, backward_penalty, null_weight
):
    from rrt.corpus.alignment import meaning_posterior
    from rrt.recipes.ingredients import content_words

    align = AlignSettings.from_config(
        ALIGNMENT,
        forward_bias=forward_bias,
        backward_penalty=backward_penalty,
        null_weight=null_weight,
        calibrated=False,
    )
    scores, loglik = align_steps(source, target, SMALL_TABLE, align)
    emit = _reference_emissions(
        SMALL_TABLE,
        [content_words(s) for s in source],
        [content_words(t) for t in target],
        null_weight,
    )
    posterior, expected = _reference_forward_backward(emit, align)
    words = sum(len(content_words(t)) for t in target)
    assert np.allclose(scores, 100.0 * posterior.T, atol=1e-3)
    assert np.isclose(loglik, expected / words, atol=1e-5)
    similarity = np.cos(np.add.outer(np.arange(len(source)), 0.7 * np.arange(len(target))))
    both_ways = np.maximum(
        _reference_forward_backward(15.0 * similarity.T, align)[0].T,
        _reference_forward_backward(15.0 * similarity, align)[0],
    )
    assert np.allclose(meaning_posterior(similarity, align), both_ways, atol=1e-9)


def test_the_hmm_grows_linearly_with_the_source_steps():
    """Memory at peak, source steps times 16: the quadratic recursion held a (source x source)
    matrix per target step, 256 times larger."""
    import tracemalloc

    peaks = []
    for n in (50, 800):
        tracemalloc.start()
        align_steps((METHOD * n)[:n], METHOD[:3], SMALL_TABLE, OLD)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[1] < 32 * peaks[0], peaks


def _row(rid: str, title: str, steps: list[str], vegan: bool) -> dict:
    return {
        "id": rid,
        "title": title,
        "ingredients": ["1 cup flour", "1 cup milk" if not vegan else "1 cup oat milk"],
        "steps": steps,
        "split": "train",
        "dish": "pancakes",
        "valid_vegan": vegan,
    }


def test_a_recipe_over_the_step_cap_is_counted_not_aligned():
    from rrt.corpus.pairing import MAX_ALIGNED_STEPS, kept_pair, pair_dish

    method = ["Whisk the flour and milk.", "Fry the batter in a pan.", "Serve warm."]
    long = [f"Stir the batter {k} times." for k in range(MAX_ALIGNED_STEPS + 1)]
    rows = [
        _row("a", "Pancakes", method, False),
        _row("b", "Vegan Pancakes", method, True),
        _row("c", "Pancakes", long, False),
        _row("d", "Vegan Pancakes", long, True),
    ]
    too_long: list[dict] = []
    settings = PairSettings.from_config(DATA, min_dish_similarity=0.0, title_extra_words=None)
    pairs = pair_dish(rows, ["vegan"], SMALL_TABLE, settings, OLD, None, too_long)
    assert [(p["source_id"], p["target_id"]) for p in pairs] == [("a", "b")]
    assert [(r["id"], r["steps"]) for r in too_long] == [
        ("c", MAX_ALIGNED_STEPS + 1),
        ("d", MAX_ALIGNED_STEPS + 1),
    ]
    assert all(r["reason"].startswith("too_many_steps") for r in too_long)
    verdict = kept_pair(rows[2], rows[1], ["vegan"], SMALL_TABLE, settings, OLD)
    assert verdict.alignment == [] and f"{MAX_ALIGNED_STEPS + 1} steps" in verdict.why_not

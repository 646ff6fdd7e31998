"""Step aligner: the paper's Hot Cocoa verdicts and synthetic pairs with known links."""
from __future__ import annotations

import collections
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import SAMPLE
from rrt.alignment import TranslationTable, align_steps, kept_links, train_translation_table
from rrt.dish import dish_key
from rrt.lexicon import CONSTRAINTS
from rrt.loaders import read_recipes
from rrt.synthetic_pairs import link_accuracy, perturbed_pair

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "hot_cocoa_pair.json").read_text())


@pytest.fixture(scope="module")
def corpus():
    recipes = list(read_recipes([str(SAMPLE)]))
    dishes = collections.defaultdict(list)
    for recipe in recipes:
        dishes[dish_key(recipe.title, "head")].append(recipe)
    pairs = [(a.steps, b.steps) for group in dishes.values() for a in group for b in group if a is not b]
    synthetic = [perturbed_pair(r, CONSTRAINTS[i % len(CONSTRAINTS)], i) for i, r in enumerate(recipes)]
    table = train_translation_table(pairs + [(s, t) for s, t, _ in synthetic])
    return table, synthetic


def test_hot_cocoa_links_get_the_papers_verdicts(corpus):
    table, _ = corpus
    scores, _ = align_steps(FIXTURE["source"]["steps"], FIXTURE["target"]["steps"], table)
    assert scores.shape == (5, 7)
    for i, j in FIXTURE["expected"]["high"]:
        assert scores[i, j] >= 50, (i, j, scores[i, j])
    for i, j in FIXTURE["expected"]["low"]:
        assert scores[i, j] < 50, (i, j, scores[i, j])
    merged = {link.source_step: link.target_steps for link in kept_links(scores, 50)}
    assert merged[4][-2:] == [5, 6]  # one source step, two target steps merged in order


def test_scores_are_posteriors_per_target_step(corpus):
    table, _ = corpus
    scores, loglik = align_steps(FIXTURE["source"]["steps"], FIXTURE["target"]["steps"], table)
    assert np.allclose(scores.sum(axis=0), 100.0) and np.isfinite(loglik)


def test_substituted_and_perturbed_recipes_align_back(corpus):
    table, synthetic = corpus
    right = total = 0
    for source, target, truth in synthetic:
        scores, _ = align_steps(source, target, table)
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
    scores, loglik = align_steps([], ["Stir."], table)
    assert scores.shape == (0, 1) and loglik == float("-inf")

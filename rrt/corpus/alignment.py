"""Unsupervised step alignment: IBM Model 1 word translation + an HMM over target steps.

The translation table t(target word | source word) is learned with EM on recipe pairs
(each pair is one "sentence pair" of content words, a NULL source word included). The
HMM reads the target steps in order; its hidden state is the source step that produced
each one. Emissions are IBM-1 likelihoods of the target step given the source step;
transitions favour moving forward by one step, allow staying (one source step split into
several target steps) and penalise going back. The posterior of each (source step,
target step) link, times 100, is its score.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from itertools import chain

import numpy as np

from rrt.config import AlignmentSettings
from rrt.corpus.cooking_actions import action_overlap, step_actions, step_stages
from rrt.corpus.step_meaning import meaning_similarity
from rrt.recipes.ingredients import content_words

NULL, UNK = "<null>", "<unk>"
# Cosine similarity times this is a step's log emission in the meaning HMM: steep enough that the
# closest step dominates, flat enough that order still decides between steps alike in meaning.
MEANING_SHARPNESS = 15.0


@dataclass
class TranslationTable:
    """t[f, e] = p(target word f | source word e) over a capped vocabulary."""

    vocab: list[str]
    probs: np.ndarray
    index: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.index = {w: i for i, w in enumerate(self.vocab)}

    def ids(self, words: Iterable[str]) -> np.ndarray:
        """Vocabulary ids of words (unknown words share the <unk> id)."""
        unk = self.index[UNK]
        return np.array([self.index.get(w, unk) for w in words], dtype=np.int64)

    def save(self, path: str) -> None:
        """Write the table as a compressed .npz (vocab + float32 matrix)."""
        np.savez_compressed(
            path, vocab=np.array(json.dumps(self.vocab)), probs=self.probs.astype(np.float32)
        )

    @classmethod
    def load(cls, path: str) -> TranslationTable:
        """Read a table written by `save`."""
        with np.load(path) as data:
            return cls(json.loads(str(data["vocab"])), data["probs"])


def _step_words(steps: list[str]) -> list[list[str]]:
    return [content_words(step) for step in steps]


def train_translation_table(
    pairs: Iterable[tuple[list[str], list[str]]],
    vocab_size: int,
    iterations: int,
    identity_prior: float = 5.0,
    add_n: float = 0.05,
) -> TranslationTable:
    """EM for IBM Model 1 on (source steps, target steps) recipe pairs."""
    corpus = [
        (list(chain.from_iterable(_step_words(src))), list(chain.from_iterable(_step_words(tgt))))
        for src, tgt in pairs
    ]
    counts = Counter(w for src, tgt in corpus for w in src + tgt)
    vocab = [NULL, UNK] + [w for w, _ in counts.most_common(vocab_size)]
    size = len(vocab)
    table = TranslationTable(vocab, np.zeros((1, 1), dtype=np.float32))
    encoded = []
    for src, tgt in corpus:
        if src and tgt:
            src_ids, src_counts = np.unique(
                np.concatenate([[0], table.ids(src)]), return_counts=True
            )
            tgt_ids, tgt_counts = np.unique(table.ids(tgt), return_counts=True)
            encoded.append(
                (src_ids, src_counts.astype(np.float32), tgt_ids, tgt_counts.astype(np.float32))
            )
    # Start near uniform with a nudge towards copying: recipes of one dish share words.
    probs = np.full((size, size), 1.0 / size, dtype=np.float32)
    probs[np.arange(size), np.arange(size)] *= identity_prior
    probs /= probs.sum(axis=0, keepdims=True)
    for _ in range(iterations):
        expected = np.zeros_like(probs)
        for src, src_counts, tgt, tgt_counts in encoded:
            # Unique ids with counts: the same E-step as token by token, without np.add.at.
            sub = probs[np.ix_(tgt, src)] * src_counts[None, :]
            sub *= (tgt_counts / sub.sum(axis=1))[:, None]
            expected[np.ix_(tgt, src)] += sub
        # Add-n smoothing (Moore, 2004): a rare source word cannot become a "garbage
        # collector" that explains every unrelated target word.
        probs = (expected + add_n) / (expected.sum(axis=0, keepdims=True) + add_n * size)
    table.probs = probs.astype(np.float32)
    return table


@dataclass
class AlignSettings:
    """HMM settings: transition shape and the score a link must reach to be kept."""

    forward_bias: float
    backward_penalty: float
    link_threshold: float
    null_weight: float
    max_fanout: int  # most target steps one source step keeps (0: no bound)
    calibrated: bool  # score links with the link model (rrt/data/link_model.json)

    @classmethod
    def from_config(cls, alignment: AlignmentSettings, **changes) -> AlignSettings:
        """The HMM settings of the `alignment` block, with any changes."""
        names = [f.name for f in dataclasses.fields(cls)]
        return cls(**{name: changes.get(name, getattr(alignment, name)) for name in names})


def _emissions(
    table: TranslationTable,
    src_steps: list[list[str]],
    tgt_steps: list[list[str]],
    null_weight: float,
) -> np.ndarray:
    """log p(target step j | source step i) for every (j, i): IBM-1 per target word.

    The NULL word gets a fixed share of each word's probability, so a target word no
    source step explains costs every state alike (plain IBM-1 would favour short steps).
    Memory grows with the two recipes' vocabularies, not with the product of their lengths.
    """
    n, m = len(src_steps), len(tgt_steps)
    src_lens = np.array([len(s) for s in src_steps])
    tgt_lens = np.array([len(t) for t in tgt_steps])
    if not tgt_lens.sum():
        return np.zeros((m, n))
    # Distinct words: their (target x source) probabilities are read once, and each step pair's
    # sums are products with the steps' word counts.
    words, at = np.unique(table.ids(w for t in tgt_steps for w in t), return_inverse=True)
    from_null = table.probs[words, table.index[NULL]]
    if src_lens.sum():
        vocab, column = np.unique(table.ids(w for s in src_steps for w in s), return_inverse=True)
        in_step = _word_counts(column, src_lens, len(vocab))
        sums = table.probs[np.ix_(words, vocab)].astype(float) @ in_step
        from_src = np.where(src_lens > 0, sums / np.maximum(src_lens, 1), from_null[:, None])
    else:
        from_src = np.repeat(from_null[:, None], n, axis=1)
    word_logs = np.log(
        np.maximum(null_weight * from_null[:, None] + (1 - null_weight) * from_src, 1e-12)
    )
    return _word_counts(at, tgt_lens, len(words)).T @ word_logs


def _word_counts(word: np.ndarray, lengths: np.ndarray, words: int) -> np.ndarray:
    """(distinct words x steps) how often each word occurs in each step, from the steps' words
    in order (`word`: each one's distinct-word index) and the steps' lengths."""
    steps = len(lengths)
    step = np.repeat(np.arange(steps), lengths)
    return (
        np.bincount(word * steps + step, minlength=words * steps)
        .reshape(words, steps)
        .astype(float)
    )


def _moved(values: np.ndarray, settings: AlignSettings, onward: bool) -> np.ndarray:
    """The transitions' unnormalised log weights applied to log values over the source steps:
    onward, out[k] = logsumexp_i values[i] + w(k - i); back, out[i] = logsumexp_k w(k - i) + values[k].

    w(d) falls off geometrically on each side of d = 1 (forward by one), so each side is one
    running log-sum of the values tilted by their position: O(n) a call, not O(n^2).
    """
    n = len(values)
    top = values.max()
    if not np.isfinite(top):
        return np.full(n, top)
    bias = settings.forward_bias
    slope = bias * np.arange(n, dtype=float)
    shifted = values - top  # the running sums stay near 0 however long the recipe
    up = np.logaddexp.accumulate(shifted + slope)  # up[t]: logsumexp over i <= t
    down = np.logaddexp.accumulate((shifted - slope)[::-1])[::-1]  # down[t]: over i >= t
    gone = np.array([-np.inf])
    stay = shifted - bias  # d = 0: one step from forward-by-one, not a step back
    if onward:
        ahead = np.concatenate([gone, up[:-1] - slope[:-1]])  # from i < k: w = -bias (k - i - 1)
        back = np.concatenate([down[1:], gone]) + slope - bias  # from i > k, less the penalty
    else:
        ahead = np.concatenate([down[1:], gone]) + slope + bias  # to k > i
        back = np.concatenate([gone, up[:-1]]) - slope - bias  # to k < i, less the penalty
    return np.logaddexp(np.logaddexp(ahead, stay), back - settings.backward_penalty) + top


def align_steps(
    src_steps: list[str], tgt_steps: list[str], table: TranslationTable, settings: AlignSettings
) -> tuple[np.ndarray, float]:
    """Link scores (source steps x target steps, 0-100) and the per-word log-likelihood."""
    src_words, tgt_words = _step_words(src_steps), _step_words(tgt_steps)
    n, m = len(src_steps), len(tgt_steps)
    if n == 0 or m == 0:
        return np.zeros((n, m)), float("-inf")
    posterior, loglik = _forward_backward(
        _emissions(table, src_words, tgt_words, settings.null_weight), settings
    )
    words = max(1, sum(len(w) for w in tgt_words))
    return 100.0 * posterior.T, float(loglik / words)


def _forward_backward(emit: np.ndarray, settings: AlignSettings) -> tuple[np.ndarray, float]:
    """The HMM's posterior (target steps x source steps) and log-likelihood, from log emissions."""
    m, n = emit.shape
    # Each state's transitions sum to one: its log normaliser is the back sum over zeros.
    norm = _moved(np.zeros(n), settings, onward=False)
    start = -settings.forward_bias * np.arange(n, dtype=float)
    start -= np.logaddexp.reduce(start)
    alpha = np.zeros((m, n))
    beta = np.zeros((m, n))
    alpha[0] = start + emit[0]
    for j in range(1, m):
        alpha[j] = _moved(alpha[j - 1] - norm, settings, onward=True) + emit[j]
    for j in range(m - 2, -1, -1):
        beta[j] = _moved(emit[j + 1] + beta[j + 1], settings, onward=False) - norm
    loglik = np.logaddexp.reduce(alpha[-1])
    return np.exp(alpha + beta - loglik), float(loglik)


def meaning_posterior(similarity: np.ndarray, settings: AlignSettings) -> np.ndarray:
    """The HMM's posterior (source steps x target steps, 0-1) with the steps' meaning as emissions,
    read both ways, the larger kept: order settles which of several alike steps did the job."""
    if not similarity.size:
        return similarity
    forward, _ = _forward_backward(MEANING_SHARPNESS * similarity.T, settings)
    backward, _ = _forward_backward(MEANING_SHARPNESS * similarity, settings)
    return np.maximum(forward.T, backward)


LINK_FEATURES = (
    "bias",
    "posterior",
    "shared_words",
    "position_gap",
    "best_for_source",
    "best_for_target",
    "mutual_best_words",
    "posterior_x_words",
    "same_first_verb",
    "reverse_posterior",
    "either_posterior",
    "neighbour_posterior",
    "same_actions",
    "meaning",
    "meaning_best_for_source",
    "meaning_best_for_target",
    "meaning_posterior",
    "meaning_neighbour",
    "same_stages",
)
_STEP_NUMBER = re.compile(r"^\W*(?:step\s*)?\d+\W*", re.IGNORECASE)
_FIRST_WORD = re.compile(r"[a-z]+")
LINK_MODEL = str(resources.files("rrt").joinpath("data", "link_model.json"))


def link_features(
    src_steps: list[str],
    tgt_steps: list[str],
    posterior: np.ndarray,
    table: TranslationTable,
    settings: AlignSettings,
) -> np.ndarray:
    """(source steps x target steps x LINK_FEATURES) from the HMM's posterior (0-1).

    Besides the posterior: the Dice overlap of content words, how far apart the two steps sit
    in their recipes, whether each is the other's best word match, whether both open with the
    same word (usually the verb), and the kinds of work both do (`rrt.corpus.cooking_actions`). The
    HMM read the other way (over source steps, a target step as the state) sees one target
    step made of several source steps, which the forward reading cannot; a link whose
    diagonal neighbours are linked continues a run of matched steps. The steps' meaning
    (`rrt.corpus.step_meaning`) finds links in other words: its similarity, best-match flags,
    the HMM over it and its diagonal neighbours. Last, how far both steps sit at the same stages
    of their recipes' course (`step_stages`: the oven, baking, cooling, serving, the dry or wet
    ingredients).
    """
    n, m = posterior.shape
    src = [set(w) for w in _step_words(src_steps)]
    tgt = [set(w) for w in _step_words(tgt_steps)]
    dice = np.array([[2 * len(a & b) / max(1, len(a) + len(b)) for b in tgt] for a in src]).reshape(
        n, m
    )
    gap = np.abs(
        (np.arange(n)[:, None] + 0.5) / max(n, 1) - (np.arange(m)[None, :] + 0.5) / max(m, 1)
    )
    row_best = (dice >= dice.max(axis=1, keepdims=True)).astype(float) if m else dice
    col_best = (dice >= dice.max(axis=0, keepdims=True)).astype(float) if n else dice
    first = [[_first_word(step) for step in steps] for steps in (src_steps, tgt_steps)]
    same_first = np.array(
        [[float(a is not None and a == b) for b in first[1]] for a in first[0]]
    ).reshape(n, m)
    reverse = (
        align_steps(tgt_steps, src_steps, table, settings)[0].T / 100.0 if n and m else posterior
    )
    either = np.maximum(posterior, reverse)
    padded = np.pad(either, 1)
    neighbour = np.maximum(padded[:-2, :-2], padded[2:, 2:])
    actions, same_stages = (
        _overlaps([tags(step) for step in src_steps], [tags(step) for step in tgt_steps])
        for tags in (step_actions, step_stages)
    )
    meaning = meaning_similarity(src_steps, tgt_steps)
    meaning_row = (meaning >= meaning.max(axis=1, keepdims=True)).astype(float) if m else meaning
    meaning_col = (meaning >= meaning.max(axis=0, keepdims=True)).astype(float) if n else meaning
    meaning_hmm = meaning_posterior(meaning, settings)
    padded = np.pad(meaning_hmm, 1)
    return np.stack(
        [
            np.ones((n, m)),
            posterior,
            dice,
            gap,
            row_best,
            col_best,
            dice * row_best * col_best,
            posterior * dice,
            same_first,
            reverse,
            either,
            neighbour,
            actions,
            meaning,
            meaning_row,
            meaning_col,
            meaning_hmm,
            np.maximum(padded[:-2, :-2], padded[2:, 2:]),
            same_stages,
        ],
        axis=-1,
    )


def _overlaps(src_tags: list[frozenset], tgt_tags: list[frozenset]) -> np.ndarray:
    """(source steps x target steps) Jaccard overlap of each step pair's tags (`action_overlap`)."""
    return np.array([[action_overlap(a, b) for b in tgt_tags] for a in src_tags]).reshape(
        len(src_tags), len(tgt_tags)
    )


def _first_word(step: str) -> str | None:
    """The step's opening word, usually its verb ("Preheat", "Whisk", "Serve"), without "Step 3"."""
    found = _FIRST_WORD.search(_STEP_NUMBER.sub("", step.lower()))
    return found.group() if found else None


def fit_link_model(
    features: np.ndarray, right: np.ndarray, l2: float = 0.01, iterations: int = 3000
) -> np.ndarray:
    """Logistic regression weights from labelled links (rows of LINK_FEATURES, right or not): its
    probability is the link score, so a score of s means about s% of such links are right."""
    weights = np.zeros(features.shape[1])
    for _ in range(iterations):
        guess = 1.0 / (1.0 + np.exp(-features @ weights))
        grad = features.T @ (guess - right) / len(right) + l2 * np.r_[0.0, weights[1:]]
        weights -= 0.5 * grad
    return weights


@functools.cache
def load_link_model(path: str = LINK_MODEL) -> np.ndarray:
    """The link model's weights, in LINK_FEATURES order (read once per process)."""
    with open(path, encoding="utf-8") as handle:
        model = json.load(handle)
    if tuple(model["features"]) != LINK_FEATURES:
        raise ValueError(
            f"{path} was fitted on other features; refit it (benchmarks/alignment_quality.py --fit)"
        )
    return np.array(model["weights"], dtype=float)


def calibrated_scores(
    src_steps: list[str],
    tgt_steps: list[str],
    posterior_scores: np.ndarray,
    table: TranslationTable,
    settings: AlignSettings,
    weights: np.ndarray,
) -> np.ndarray:
    """Link scores (0-100) from the link model: about the percentage of such links that are right."""
    if not posterior_scores.size:
        return posterior_scores
    features = link_features(src_steps, tgt_steps, posterior_scores / 100.0, table, settings)
    return link_probability(features, weights)


def link_probability(features: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The link model's score (0-100) of rows of LINK_FEATURES."""
    return 100.0 / (1.0 + np.exp(-features @ weights))


@dataclass
class StepLink:
    """One source step and the target steps merged into its rewrite, with their scores."""

    source_step: int
    target_steps: list[int]
    scores: list[float]


def kept_links(scores: np.ndarray, threshold: float, max_fanout: int = 0) -> list[StepLink]:
    """Links above the threshold; several target steps of one source step are merged in order.
    With `max_fanout`, a source step keeps only its best-scoring target steps: one line that
    takes most of a recipe (a header, "Makes 1 serving.") is the aligner's typical error."""
    links = []
    for i in range(scores.shape[0]):
        targets = [int(j) for j in np.nonzero(scores[i] >= threshold)[0]]
        if max_fanout and len(targets) > max_fanout:
            targets = sorted(sorted(targets, key=lambda j: -scores[i, j])[:max_fanout])
        if targets:
            links.append(StepLink(i, targets, [round(float(scores[i, j]), 1) for j in targets]))
    return links


def alignment_table(
    src_steps: list[str], tgt_steps: list[str], scores: np.ndarray, width: int = 48
) -> str:
    """A printable table of every link's score, like the paper's appendix."""

    def cut(text: str) -> str:
        return text if len(text) <= width else text[: width - 1] + "…"

    header = "source step".ljust(width + 4) + " ".join(f"t{j:<4}" for j in range(len(tgt_steps)))
    lines = [header]
    for i, step in enumerate(src_steps):
        cells = " ".join(f"{scores[i, j]:5.1f}" for j in range(len(tgt_steps)))
        lines.append(f"s{i:<3}{cut(step).ljust(width)}{cells}")
    lines.append("")
    lines += [f"t{j:<3}{cut(step)}" for j, step in enumerate(tgt_steps)]
    return "\n".join(lines)

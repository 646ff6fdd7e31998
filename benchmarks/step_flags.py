"""Step flags against readers: how well each automatic check finds the steps blind readers mark.

    python benchmarks/step_flags.py --study out/study                       # a finished study
    python benchmarks/step_flags.py --study out/study,out/study2 --write-labels data/reader_labels
    python benchmarks/step_flags.py --labels data/reader_labels             # the stored set

From a study whose readers marked each rewritten step (`rrt judge packet` / `import`, rubric
version 1, docs/JUDGING.md) it takes every rewrite record rated and every step mark, optionally
stores them as the labelled set (records.jsonl, marks.jsonl, rubric.json), and scores each check
of rrt.evaluation.step_flags against the marks, over (step, reader) pairs: recall of the marked
steps, precision, and the share of steps marked ok that a check flags. Nothing is fitted, so no
fold is needed. Prints one JSON line per target and check, then the readers' agreement, and the
ratio last: the flags' recall of "another job or no sense" over the older same-job measure's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def labelled_record(record: dict, system: str) -> dict:
    """What the labelled set keeps of a rewrite record: the recipe, its rewrite and each step's
    source step and decision (not the candidates)."""
    steps = [
        {k: e[k] for k in ("source_step", "decision") if k in e}
        for e in record.get("steps") or []
        if isinstance(e, dict)
    ]
    keep = ("id", "constraint", "constrained", "source", "rewrite")
    return {**{k: record[k] for k in keep if k in record}, "system": system, "steps": steps}


def study_labels(folders: list[str]) -> tuple[dict[tuple, dict], list[dict], dict]:
    """The rated rewrite records of some studies by (system, recipe, constraint), their step marks
    and the rubric (version, readers' agreement on marks). With several studies each system is
    named `<study folder>:<system>`, so two studies of one recipe stay apart."""
    from judge.store import Study
    from rrt.evaluation.human import RUBRIC_VERSION
    from rrt.evaluation.rewrite_records import read_records
    from rrt.evaluation.step_marks import mark_agreement, mark_rows

    records, marks, cookable = {}, [], []
    for folder in folders:
        tag = f"{os.path.basename(os.path.normpath(folder))}:" if len(folders) > 1 else ""
        with open(os.path.join(folder, "create.json"), encoding="utf-8") as handle:
            origins = json.load(handle)["origins"]
        found, answers = mark_rows(Study(folder).judgments())
        marks += [{**m, "system": tag + m["system"]} for m in found]
        cookable += [{**c, "system": tag + c["system"]} for c in answers]
        rated = {(m["system"], m["recipe"], m["constraint"]) for m in found}
        for system, run in origins.items():
            for record in read_records(os.path.join(run, "rewrites.jsonl")):
                if (system, record["id"], record["constraint"]) in rated:
                    key = (tag + system, record["id"], record["constraint"])
                    records[key] = labelled_record(record, tag + system)
    rubric = {"version": RUBRIC_VERSION, "agreement": mark_agreement(marks, cookable)}
    return records, marks, rubric


def write_labels(folder: str, records: dict, marks: list[dict], rubric: dict) -> None:
    """The labelled set: records.jsonl, marks.jsonl and rubric.json in `folder`."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "records.jsonl"), "w", encoding="utf-8") as handle:
        handle.writelines(
            json.dumps(records[key], ensure_ascii=False, sort_keys=True) + "\n"
            for key in sorted(records)
        )
    with open(os.path.join(folder, "marks.jsonl"), "w", encoding="utf-8") as handle:
        handle.writelines(
            json.dumps(row, sort_keys=True) + "\n"
            for row in sorted(
                marks, key=lambda m: (m["system"], m["recipe"], m["step"], m["judge"])
            )
        )
    with open(os.path.join(folder, "rubric.json"), "w", encoding="utf-8") as handle:
        json.dump(rubric, handle, indent=2, sort_keys=True)


def read_labels(folder: str) -> tuple[dict[tuple, dict], list[dict], dict]:
    """The labelled set `write_labels` stored."""
    records = {}
    with open(os.path.join(folder, "records.jsonl"), encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            records[(record["system"], record["id"], record["constraint"])] = record
    with open(os.path.join(folder, "marks.jsonl"), encoding="utf-8") as handle:
        marks = [json.loads(line) for line in handle if line.strip()]
    with open(os.path.join(folder, "rubric.json"), encoding="utf-8") as handle:
        return records, marks, json.load(handle)


FAULT_TARGET = frozenset({"another_job", "no_sense"})
MAX_OK_FLAGGED = 0.10  # the share of steps readers mark ok that the model may flag


def fault_rows(records: dict, marks: list[dict]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """One row per (step, reader) marked ok, another job or no sense: FAULT_FEATURES, whether the
    mark is a fault, and the source recipe (the folds keep a recipe's rows together)."""
    from rrt.evaluation.step_flags import fault_features

    features = {key: fault_features(record) for key, record in records.items()}
    rows, faults, groups = [], [], []
    for m in marks:
        found = features.get((m["system"], m["recipe"], m["constraint"]))
        if found is None or m["step"] >= len(found) or m["mark"] not in FAULT_TARGET | {"ok"}:
            continue
        rows.append(found[m["step"]])
        faults.append(float(m["mark"] in FAULT_TARGET))
        groups.append(m["recipe"])
    return np.asarray(rows, dtype=float), np.asarray(faults), groups


def threshold_for(scores: np.ndarray, faults: np.ndarray) -> float:
    """The lowest score threshold at which at most MAX_OK_FLAGGED of the ok rows are flagged."""
    ok = np.sort(scores[faults == 0])[::-1]
    allowed = int(MAX_OK_FLAGGED * len(ok))
    return float(ok[allowed] + 1e-9) if allowed < len(ok) else 0.0


def cross_validated(rows, faults, groups, seed: int, folds: int = 5) -> dict:
    """Out-of-fold recall of faults, share of ok rows flagged and precision, folds by whole recipe."""
    from rrt.corpus.alignment import fit_link_model
    from rrt.evaluation.step_flags import fault_probability

    recipes = sorted(set(groups))
    random.Random(seed).shuffle(recipes)
    fold_of = {r: i % folds for i, r in enumerate(recipes)}
    flagged = np.zeros(len(faults), dtype=bool)
    for fold in range(folds):
        test = np.array([fold_of[g] == fold for g in groups])
        weights = fit_link_model(rows[~test], faults[~test])
        threshold = threshold_for(fault_probability(rows[~test], weights), faults[~test])
        flagged[test] = fault_probability(rows[test], weights) >= threshold
    hits = flagged & (faults == 1)
    return {
        "recall": hits.sum() / max(1, (faults == 1).sum()),
        "ok_flagged": (flagged & (faults == 0)).sum() / max(1, (faults == 0).sum()),
        "precision": hits.sum() / max(1, flagged.sum()),
    }


def fit_fault_model(records: dict, marks: list[dict], seeds=(13, 7, 1, 2, 3)) -> dict:
    """The fault model's out-of-fold figures (mean and spread over fold seeds) and its weights and
    threshold fitted on every row (written to rrt/data/step_fault_model.json)."""
    from rrt.corpus.alignment import fit_link_model
    from rrt.evaluation.step_flags import FAULT_FEATURES, FAULT_MODEL, fault_probability

    rows, faults, groups = fault_rows(records, marks)
    runs = [cross_validated(rows, faults, groups, seed) for seed in seeds]
    summary = {
        key: {
            "mean": round(float(np.mean([r[key] for r in runs])), 3),
            "spread": round(float(np.ptp([r[key] for r in runs])), 3),
        }
        for key in ("recall", "ok_flagged", "precision")
    }
    weights = fit_link_model(rows, faults)
    model = {
        "features": list(FAULT_FEATURES),
        "weights": [round(float(w), 5) for w in weights],
        "threshold": round(threshold_for(fault_probability(rows, weights), faults), 5),
        "rows": len(faults),
        "recipes": len(set(groups)),
        "out_of_fold": summary,
    }
    with open(FAULT_MODEL, "w", encoding="utf-8") as handle:
        json.dump(model, handle, indent=2)
        handle.write("\n")
    return model


def main(argv: list[str] | None = None) -> int:
    """Score every check against the readers' marks; print a JSON line each and the ratio last."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--study", help="study folders whose readers marked steps (comma list)")
    source.add_argument("--labels", help="a labelled set folder (records.jsonl, marks.jsonl)")
    parser.add_argument("--write-labels", help="store the study's labelled set in this folder")
    parser.add_argument(
        "--fit",
        action="store_true",
        help="refit the fault model (rrt/data/step_fault_model.json), folds by whole recipe",
    )
    args = parser.parse_args(argv)
    from rrt.evaluation.step_flags import flag_agreement

    if args.study:
        records, marks, rubric = study_labels([f for f in args.study.split(",") if f.strip()])
        if args.write_labels:
            write_labels(args.write_labels, records, marks, rubric)
    else:
        records, marks, rubric = read_labels(args.labels)
    if not marks:
        raise SystemExit("step_flags: error: no step marks in the study (import readers' answers)")
    if args.fit:
        model = fit_fault_model(records, marks)
        print(
            json.dumps({"fault_model": {k: model[k] for k in ("rows", "recipes", "out_of_fold")}})
        )
    result = flag_agreement(records, marks)
    for target, checks in result["targets"].items():
        for name, row in checks.items():
            print(json.dumps({"target": target, "check": name, **row}))
    steps = len({(m["system"], m["recipe"], m["constraint"], m["step"]) for m in marks})
    print(json.dumps({"labelled_steps": steps, "pairs": result["pairs"], **rubric}))
    job = result["targets"]["another_job or no_sense"]
    ours, older = (
        job["marks:another_job or no_sense"]["recall"],
        job["same_job (older measure)"]["recall"],
    )
    print(
        json.dumps({"ratio_recall_flags_over_same_job": round(ours / older, 3) if older else None})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

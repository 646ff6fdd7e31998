"""A study from rewrite runs to report: what `rrt judge create | extend | add-judges | report | export` do.

create_study(folder, rewrite_folders, settings)   sample, plan, assign, store (create.json)
extend_study(folder, rewrite_folder)              one more system, judgments kept (extend-N.json)
write_report(study, output)                       report.md, report.json, report.html, head_to_head.png
export_study(study, output)                       judgments.jsonl, human/rewrites.jsonl + run.json
"""

from __future__ import annotations

import base64
import html
import json
import os
import random
import re
import statistics
import time

from judge.store import Study, StudyError
from rrt.config import JudgeSettings
from rrt.evaluation.human import (
    COMPARE_QUESTION,
    QUESTIONS,
    RUBRIC_VERSION,
    agreement,
    head_to_head,
    human_table,
    judge_times,
    plot_head_to_head,
    report_markdown,
    sample_items,
)
from rrt.evaluation.rewrite_records import read_records, system_label
from rrt.evaluation.step_marks import mark_agreement, mark_rows, mark_tables, marks_markdown
from rrt.recipes.lexicon import CONSTRAINTS
from runtime.runs import write_atomic, write_json_atomic

EXPORT_JOB = "judge_export"


def read_system(folder: str) -> tuple[str, list[dict]]:
    """A rewrite run's system label (`+constrained` for constrained decoding) and its records."""
    path = os.path.join(folder, "rewrites.jsonl") if os.path.isdir(folder) else folder
    if not os.path.isfile(path):
        raise StudyError(f"no rewrites.jsonl in {folder} (a jobs/rewrite.py output folder)")
    try:
        records = read_records(path)
    except ValueError as err:
        raise StudyError(str(err)) from None
    return system_label(records), records


def read_systems(folders: list[str]) -> tuple[dict[str, list[dict]], dict[str, str]]:
    """Every run's records by system label, and the folder each came from."""
    records, origins = {}, {}
    for folder in folders:
        label, rows = read_system(folder)
        if label in records:
            raise StudyError(f"{folder} and {origins[label]} are both {label}; one run per system")
        records[label], origins[label] = rows, os.path.abspath(folder)
    return records, origins


def study_constraints(fish_free: bool) -> list[str]:
    """The constraints sampled: all seven, fish-free only when asked (the paper's judges did not know
    Worcestershire sauce holds fish)."""
    return [c for c in CONSTRAINTS if fish_free or c != "fish-free"]


def judge_names(count: int, start: int = 1) -> list[str]:
    """judge-01, judge-02, ..."""
    return [f"judge-{i:02d}" for i in range(start, start + count)]


def create_study(
    folder: str, rewrite_folders: list[str], settings: JudgeSettings, best: str | None = None
) -> dict:
    """A new study from rewrite runs: the sample, every task, blind balanced assignments; create.json.
    The summary returned also holds the judges' and the admin's tokens, kept nowhere else."""
    if os.path.isfile(os.path.join(folder, "study.sqlite")):
        raise StudyError(f"{folder} already holds a study: add a system with rrt judge extend")
    records, origins = read_systems(rewrite_folders)
    best = best or next(iter(records))
    if best not in records:
        raise StudyError(f"best system {best!r} is none of the runs given: {', '.join(records)}")
    constraints = study_constraints(settings.fish_free)
    rated = sample_items(records, settings.recipes, constraints, settings.seed)
    if not rated:
        raise StudyError("the runs share no (recipe, constraint) among " + ", ".join(constraints))
    pool = sorted(
        {
            (str(r["id"]), r["constraint"])
            for rows in records.values()
            for r in rows
            if r["constraint"] == settings.human_constraint
        }
    )
    random.Random(settings.seed).shuffle(pool)
    rewritten = pool[: settings.human_rewrites]
    study = Study(folder, create=True)
    summary = study.populate(
        records,
        origins,
        rated,
        rewritten,
        judge_names(settings.judges),
        best=best,
        judges_per_item=settings.judges_per_item,
        rewriters_per_item=settings.rewriters_per_recipe,
        majority=settings.majority,
        seed=settings.seed,
        settings=settings.model_dump(),
    )
    tokens, admin_token = summary.pop("tokens"), summary.pop("admin_token")
    shares = {c: sum(k[1] == c for k in rated) for c in constraints}
    out = {
        **summary,
        "systems": list(records),
        "best": best,
        "recipes": len(rated),
        "per_constraint": shares,
        "hand_rewrites": len(rewritten),
        "judges": settings.judges,
        "seed": settings.seed,
        "origins": origins,
    }
    write_json_atomic(
        os.path.join(folder, "create.json"), out
    )  # no token: the links are printed once
    return {**out, "tokens": tokens, "admin_token": admin_token}


def extend_study(folder: str, rewrite_folder: str) -> dict:
    """One more system in an existing study; judgments so far are kept (extend-<system>.json)."""
    study = Study(folder)
    label, records = read_system(rewrite_folder)
    out = study.extend(label, records, os.path.abspath(rewrite_folder))
    write_json_atomic(os.path.join(folder, f"extend-{file_label(label)}.json"), out)
    return out


def file_label(label: str) -> str:
    """A system label made safe as part of a file name: it comes from the input file."""
    safe = re.sub(r"[^A-Za-z0-9_-]+", "_", label).strip("_")[:80]
    return safe or "system"


def build_report(study: Study) -> dict:
    """Every figure of the report from the finished tasks."""
    meta = study.meta()
    rows = study.judgments()
    ratings = [
        {
            "system": r["system"],
            "question": r["question"],
            "value": r["value"],
            "judge": r["judge"],
            "recipe": r["recipe"],
            "constraint": r["constraint"],
        }
        for r in rows
        if r["kind"] == "rate" and r["question"] in QUESTIONS
    ]
    votes = []
    best = meta.get("best")
    for r in rows:
        if r["kind"] != "compare":
            continue
        chosen = {"left": r["system"], "right": r["other"], "same": "same"}[r["value"]]
        other = r["other"] if r["system"] == best else r["system"]
        votes.append(
            {
                "recipe": r["recipe"],
                "constraint": r["constraint"],
                "other": other,
                "vote": chosen,
                "judge": r["judge"],
            }
        )
    assignments = study.assignments()
    per_kind = {}
    for kind in ("rate", "compare", "rewrite"):
        seconds = [
            a["seconds"]
            for a in assignments
            if a["kind"] == kind and a["done"] and a["seconds"] is not None
        ]
        per_kind[kind] = {
            "assigned": sum(a["kind"] == kind for a in assignments),
            "done": sum(a["kind"] == kind and bool(a["done"]) for a in assignments),
            "median_s": statistics.median(seconds) if seconds else None,
        }
    marks, cookable = mark_rows(rows)
    rated = human_table(ratings)
    empty = {q: {"mean": None, "ci95": None, "n": 0} for q in QUESTIONS}
    table = {system: rated.get(system, empty) for system in study.systems()}
    return {
        "rubric_version": RUBRIC_VERSION,
        "best": best,
        "majority": meta["majority"],
        "judges_per_item": meta["judges_per_item"],
        "seed": meta["seed"],
        "systems": study.systems(),
        "table": table,
        "head_to_head": head_to_head(
            votes,
            best,
            meta["majority"],
            meta["judges_per_item"],
            [s for s in study.systems() if s != best],
        )
        if best
        else {},
        "agreement": agreement(ratings, votes),
        "step_marks": {
            "rubric_version": RUBRIC_VERSION,
            "tables": mark_tables(marks, cookable, study.systems()),
            "agreement": mark_agreement(marks, cookable),
        },
        "judges": judge_times(assignments),
        "tasks": per_kind,
        "questions": {q: text for q, (_, text) in QUESTIONS.items()},
        "compare_question": COMPARE_QUESTION,
    }


def report_html(report: dict, markdown: str, chart: bytes | None) -> str:
    """report.html: the Markdown tables as HTML, with the chart inline (one file to mail)."""
    body, rows = [], []

    def flush():
        if rows:
            head, *rest = rows
            body.append(
                "<table><tr>"
                + "".join(f"<th>{html.escape(c)}</th>" for c in head)
                + "</tr>"
                + "".join(
                    "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                    for r in rest
                )
                + "</table>"
            )
            rows.clear()

    for line in markdown.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not all(set(c) <= {"-", " "} for c in cells):
                rows.append(cells)
            continue
        flush()
        if line.startswith("## "):
            body.append(f"<h2>{html.escape(line[3:])}</h2>")
            if line.startswith("## Head to head") and chart:
                body.append(
                    f'<img alt="head to head" src="data:image/png;base64,{base64.b64encode(chart).decode()}">'
                )
        elif line.startswith("### "):
            body.append(f"<h3>{html.escape(line[4:])}</h3>")
        elif line.strip():
            body.append(f"<p>{html.escape(line)}</p>")
    flush()
    questions = "".join(
        f"<li><b>{html.escape(QUESTIONS[q][0])}</b>: {html.escape(t)}</li>"
        for q, t in report["questions"].items()
    )
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><meta name='viewport' "
        "content='width=device-width, initial-scale=1'><title>Human evaluation</title><style>"
        "body{font-family:system-ui,sans-serif;margin:1.5rem;max-width:1100px;color:#222}"
        "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .5em}"
        "img{max-width:100%}</style></head><body><h1>Human evaluation</h1>"
        f"<p>Judges answered, 1 (worst) to 5 (best):</p><ul>{questions}</ul>{''.join(body)}</body></html>"
    )


def study_markdown(report: dict) -> str:
    """report.md of a study's report: the paper's tables and, where readers marked steps, the step
    marks and cookable section."""
    marks = [marks_markdown(report["step_marks"])] if report.get("step_marks") else None
    return report_markdown(report, marks)


def write_report(study: Study, output: str) -> dict:
    """report.md, report.json, report.html and head_to_head.png in `output`; the report dict."""
    started = time.perf_counter()
    os.makedirs(output, exist_ok=True)
    report = build_report(study)
    markdown = study_markdown(report)
    chart = None
    # Each file is written beside its place and renamed over it, so a stopped report leaves the
    # earlier one whole.
    if report["head_to_head"]:
        path = os.path.join(output, "head_to_head.png")
        drawn = f"{path}.{os.getpid()}.tmp.png"
        try:
            plot_head_to_head(report["head_to_head"], report["best"], drawn)
            with open(drawn, "rb") as handle:
                chart = handle.read()
            os.replace(drawn, path)
        finally:
            if os.path.exists(drawn):
                os.remove(drawn)
    write_atomic(os.path.join(output, "report.md"), markdown)
    write_atomic(os.path.join(output, "report.html"), report_html(report, markdown, chart))
    report["seconds"] = round(time.perf_counter() - started, 3)
    write_json_atomic(os.path.join(output, "report.json"), report)
    return report


def export_study(study: Study, output: str) -> dict:
    """judgments.jsonl (every finished answer, unblinded) and the hand rewrites as system `human`
    (human/rewrites.jsonl and run.json: jobs/evaluate.py --rewrites <output>/human scores them)."""
    os.makedirs(os.path.join(output, "human"), exist_ok=True)
    rows = study.judgments()
    # Whole or not at all: a stopped re-export leaves the earlier files as they were.
    write_atomic(
        os.path.join(output, "judgments.jsonl"),
        "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows),
    )
    human = study.human_records()
    write_atomic(
        os.path.join(output, "human", "rewrites.jsonl"),
        "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in human),
    )
    # Named for its job: a rewrite job's --overwrite must not take it for one of its own runs.
    write_json_atomic(
        os.path.join(output, "human", "run.json"),
        {
            "job": EXPORT_JOB,
            "settings": {"system": "human", "constrained": False},
            "study": os.path.abspath(study.folder),
            "counts": {"recipes": len(human)},
        },
    )
    out = {"judgments": len(rows), "human_rewrites": len(human)}
    write_json_atomic(os.path.join(output, "export.json"), out)
    return out

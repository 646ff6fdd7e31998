"""Answers read back into a study: `rrt judge import --answers FILE`.

Two kinds of file, told apart by their extension:

    .csv    a packet's tasks.csv with its Answer.* columns filled, or a crowdsourcing results file
            (Input.<field> / Answer.<field> columns). Rows count as in a spreadsheet: the header
            is row 1. A row whose answers are all empty, or whose AssignmentStatus is Rejected, is
            skipped.
    .json   a packet's answers.json filled in. Its rows are its tasks, counted from 1. A task
            still all null is skipped.

All or nothing per file: every bad row is reported (row number and reason) and nothing is stored;
a file without bad rows is stored in one transaction. Tasks already finished with the same answers
are skipped, so importing a file twice stores nothing twice.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re

from judge.packet import ANSWER_FIELDS, BETTER
from judge.store import ImportRefused, Study, StudyError
from rrt.evaluation.human import COOKABLE, QUESTIONS, STEP_MARKS

ENTRY_KEYS = {"task", "kind", "ratings", "cookable", "step_marks", "better", "seconds"}
STEP_PREFIX = re.compile(r"^(\d+)\s*[:.=)]\s*")


def _rating(text, name: str) -> int:
    """A 1-5 rating from a number or its digits (range checked by the store)."""
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise TypeError(f"{name} is a whole number 1-5 (got {text!r})")
    if isinstance(text, str):
        if not text.strip().isdigit():
            raise ValueError(f"{name} is a whole number 1-5 (got {text!r})")
        return int(text.strip())
    return text


def _cookable(text) -> str:
    value = text.strip().lower() if isinstance(text, str) else text
    if value not in COOKABLE:
        raise ValueError(f"cookable is yes or no (got {text!r})")
    return value


def _step_marks(value) -> list:
    """A list of marks from a list, or from text: marks separated by commas, semicolons or new
    lines, each optionally numbered ("1: ok; 2: no_sense")."""
    if isinstance(value, str):
        parts = [p.strip() for p in re.split(r"[,;\n]", value) if p.strip()]
        marks, numbers = [], []
        for part in parts:
            match = STEP_PREFIX.match(part)
            if match:
                numbers.append(int(match.group(1)))
                part = part[match.end() :]
            marks.append(part.strip().lower())
        if numbers and numbers != list(range(1, len(marks) + 1)):
            raise ValueError("step_marks: number every step 1, 2, 3... in order, or none")
        value = marks
    if not isinstance(value, list):
        raise TypeError("step_marks is a list of marks, one per step")
    bad = [m for m in value if m is not None and not (isinstance(m, str) and m in STEP_MARKS)]
    if bad:
        raise ValueError(f"step_marks: {bad[0]!r} is no mark (the marks: {', '.join(STEP_MARKS)})")
    return value


def _better(text) -> str:
    value = text.strip() if isinstance(text, str) else text
    for given, choice in BETTER.items():
        if isinstance(value, str) and value.lower() == given.lower():
            return choice
    raise ValueError(f"better is A, B or same (got {text!r})")


def converted(fields: dict) -> dict:
    """{question: value} as the study stores them from the packet's fields (blank ones left out);
    a ValueError or TypeError names the first bad field."""
    out = {}
    for field, value in fields.items():
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        if field in QUESTIONS:
            out[field] = _rating(value, field)
        elif field == "cookable":
            out[field] = _cookable(value)
        elif field == "step_marks":
            out[field] = _step_marks(value)
        elif field == "better":
            out["choice"] = _better(value)
    return out


def _seconds(text):
    try:
        seconds = float(text)
    except (TypeError, ValueError):
        return None
    return seconds if seconds >= 0 else None


def _input(row: dict, name: str) -> str:
    """An input field of a CSV row: a packet's own column or a results file's Input.<name>."""
    return (row.get(name) or row.get(f"Input.{name}") or "").strip()


def csv_rows(path: str) -> list[dict]:
    """Each data row of a CSV as {row, judge, handle, fields, seconds, skip}."""
    with open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        names = reader.fieldnames or []
        inputs = {n.removeprefix("Input.") for n in names}
        if "task_handle" not in inputs:
            raise StudyError(
                f"{path} has no task_handle column (a packet's tasks.csv, or a results file with "
                "Input.task_handle)"
            )
        out = []
        for number, raw in enumerate(reader, 2):
            row = {(k or "").strip(): (v or "") for k, v in raw.items() if k is not None}
            fields = {}
            for field in ANSWER_FIELDS:
                # A results file carries the batch's empty Answer.* inputs as Input.Answer.*: the
                # worker's Answer.* wins.
                given = row.get(f"Answer.{field}", "").strip()
                fields[field] = given or row.get(f"Input.Answer.{field}", "").strip()
            out.append(
                {
                    "row": number,
                    "handle": _input(row, "task_handle"),
                    "judge": _input(row, "judge") or None,
                    "fields": fields,
                    "seconds": _seconds(row.get("WorkTimeInSeconds")),
                    "skip": row.get("AssignmentStatus", "").strip() == "Rejected"
                    or not any(fields.values()),
                }
            )
    return out


def json_rows(path: str) -> list[dict]:
    """Each task of an answers.json as {row, judge, handle, fields, seconds, skip}; bad entries
    carry an `error`."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (ValueError, RecursionError) as err:
        raise StudyError(f"{path} is not JSON: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("answers"), dict):
        raise StudyError(
            f'{path}: an answers file is {{"judge": NAME, "answers": {{handle: ...}}}}'
        )
    judge = data.get("judge") if isinstance(data.get("judge"), str) else None
    out = []
    for number, (handle, entry) in enumerate(data["answers"].items(), 1):
        item = {"row": number, "handle": handle, "judge": judge, "fields": {}, "seconds": None}
        if not isinstance(entry, dict):
            out.append({**item, "skip": False, "error": "an answer entry is an object"})
            continue
        unknown = sorted(k for k in entry if k not in ENTRY_KEYS and not k.startswith("_"))
        ratings = entry.get("ratings") or {}
        if not isinstance(ratings, dict):
            out.append({**item, "skip": False, "error": "ratings is an object {question: 1-5}"})
            continue
        unknown += sorted(f"ratings.{k}" for k in ratings if k not in QUESTIONS)
        fields = {q: ratings.get(q) for q in QUESTIONS}
        fields |= {k: entry.get(k) for k in ("cookable", "step_marks", "better")}
        marks = fields["step_marks"]
        blank = all(
            v is None or (isinstance(v, list) and all(m is None for m in v))
            for v in fields.values()
        )
        item |= {"fields": fields, "seconds": _seconds(entry.get("seconds")), "skip": blank}
        if unknown:
            item["error"] = f"unknown key(s) {', '.join(unknown)}"
        elif isinstance(marks, list) and all(m is None for m in marks) and not blank:
            fields["step_marks"] = None  # none marked: "needs step_marks", not a list of nulls
        out.append(item)
    return out


def file_rows(path: str, judge: str | None) -> tuple[list[dict], list[tuple[int, str]], int]:
    """The rows to import (the store's shape), the bad rows (row, reason), and how many were
    skipped as blank or rejected."""
    if not os.path.isfile(path):
        raise StudyError(f"no answers file {path}")
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".csv", ".json"):
        raise StudyError(f"{path}: answers come as .csv or .json")
    raw = csv_rows(path) if ext == ".csv" else json_rows(path)
    rows, errors, skipped, seen = [], [], 0, {}
    for item in raw:
        if item.get("skip"):
            skipped += 1
            continue
        where = f"task {item['handle']}: " if item["handle"] else ""
        if item.get("error"):
            errors.append((item["row"], where + item["error"]))
            continue
        if not item["handle"]:
            errors.append((item["row"], "no task_handle"))
            continue
        who = item["judge"] or judge
        if judge and item["judge"] and item["judge"] != judge:
            errors.append((item["row"], f"{where}the file says judge {item['judge']}, not {judge}"))
            continue
        if not who:
            errors.append((item["row"], f"{where}no judge: give --judge NAME"))
            continue
        key = (who, item["handle"])
        if key in seen:
            errors.append((item["row"], f"{where}already given in row {seen[key]}"))
            continue
        seen[key] = item["row"]
        try:
            answers = converted(item["fields"])
        except (TypeError, ValueError) as err:
            errors.append((item["row"], where + str(err)))
            continue
        rows.append(
            {
                "row": item["row"],
                "judge": who,
                "handle": item["handle"],
                "answers": answers,
                "seconds": item["seconds"],
            }
        )
    return rows, errors, skipped


def import_file(study: Study, path: str, judge: str | None, max_chars: int) -> dict:
    """Read an answers file into the study, all or nothing; ImportRefused lists every bad row."""
    rows, errors, skipped = file_rows(path, judge)
    with open(path, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()
    origin = f"import:{os.path.basename(path)}"
    if errors:
        try:  # the good rows checked against the study too, so one run names every bad row
            study.import_answers(rows, origin, digest, max_chars, dry_run=True)
        except ImportRefused as err:
            errors += err.errors
        raise ImportRefused(sorted(errors))
    if not rows:
        raise StudyError(f"{path} holds no answers (every row blank)")
    return {**study.import_answers(rows, origin, digest, max_chars), "skipped": skipped}

"""A rewrite run's records (`rewrites.jsonl`), the one format every system writes and every reader takes."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator

from rrt.modelling.selection import StepContext, disguised_foods, step_context
from rrt.recipes.tagger import parse_constraints


def read_records(path: str) -> list[dict]:
    """Every record of a rewrites.jsonl file; a line that is not a rewrite record is a ValueError naming it."""
    records = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                if not line.endswith("\n"):  # only the last line can lack one: a writer stopped
                    raise ValueError(_cut_short(path, number)) from None
                raise ValueError(f"{path} line {number} is not JSON") from None
            if (
                not isinstance(record, dict)
                or not all(isinstance(record.get(k), dict) for k in ("source", "rewrite"))
                or "id" not in record
                or not record.get("constraint")
            ):
                raise ValueError(
                    f"{path} line {number} is not a rewrite record (id, constraint, source, rewrite)"
                )
            try:
                parse_constraints(record["constraint"])
            except ValueError as err:
                raise ValueError(f"{path} line {number}: {err}") from None
            records.append(record)
    if not records:
        raise ValueError(f"{path} holds no rewrites")
    return records


def _cut_short(path: str, number: int) -> str:
    """What to say of a rewrites.jsonl whose last line a stopped rewrite job left unfinished: that
    resuming the job repairs it, with the command that started it (its run.json keeps it)."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        with open(os.path.join(folder, "run.json"), encoding="utf-8") as handle:
            command = json.load(handle).get("command")
    except (OSError, ValueError, AttributeError):
        command = None
    how = (
        f": {command}"
        if isinstance(command, str)
        else f" (rerun the jobs/rewrite.py command that wrote it, --output {folder})"
    )
    return (
        f"{path} line {number} is cut short: its rewrite job stopped while writing it. Resuming "
        f"the job repairs the file and writes the recipes it had left{how}"
    )


def system_label(records: list[dict], run: dict | None = None) -> str:
    """The run's system name (from its run.json settings when given), `+constrained` for constrained decoding."""
    settings = (run or {}).get("settings") or {}
    system = settings.get("system") or records[0].get("system") or "unknown"
    constrained = settings.get("constrained", records[0].get("constrained", False))
    return f"{system}+constrained" if constrained else str(system)


def sampled_steps(
    records: Iterable[dict],
) -> Iterator[tuple[dict, dict, StepContext, list[list[str]]]]:
    """Each step the records chose among sampled candidates: (record, its step entry, the step's
    selection context, each candidate's forbidden foods hidden in non-words); needs the dictionary."""
    for record in records:
        for entry in record["steps"]:
            candidates = entry["candidates"]
            if len(candidates) < 2:  # the guide's or an empty step: nothing was sampled
                continue
            ctx = step_context(record["source"], entry["source_step"], record["constraint"])
            yield record, entry, ctx, [disguised_foods(c["text"], ctx) for c in candidates]

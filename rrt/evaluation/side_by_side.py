"""Rewrites as plain text, source beside rewrite: what `rrt show` prints at the end of the demo."""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from collections.abc import Iterator


def read_rewrites(path: str) -> Iterator[dict]:
    """The records of a rewrite run: its folder or its rewrites.jsonl."""
    if os.path.isdir(path):
        path = os.path.join(path, "rewrites.jsonl")
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


# How the product decided each step (rrt.modelling.editing), marked after the step's number.
DECISION_MARKS = {"kept": "", "guide": " [guide]", "model": " [model]"}
LEGEND = "steps: unmarked, kept as the source wrote it; [guide], the substitution guide's edit; [model], the model's"


def step_decisions(record: dict) -> list[str]:
    """Each rewritten step's decision (kept, guide, model), or [] for a record without them."""
    entries = [e for e in record.get("steps") or [] if isinstance(e, dict)]
    found = [e.get("decision") for e in entries]
    steps = (record.get("rewrite") or {}).get("steps") or []
    return found if len(found) == len(steps) and all(found) else []


def _columns(left: str, right: str, width: int) -> list[str]:
    """Two texts wrapped into columns of `width` characters, line by line."""
    a, b = textwrap.wrap(left, width) or [""], textwrap.wrap(right, width) or [""]
    a += [""] * (len(b) - len(a))
    b += [""] * (len(a) - len(b))
    return [f"{x:<{width}} | {y}" for x, y in zip(a, b)]


def side_by_side(record: dict, width: int | None = None) -> str:
    """One rewritten recipe: title, ingredients and steps, source on the left, rewrite on the right."""
    width = width or max(30, (shutil.get_terminal_size((120, 24)).columns - 3) // 2)
    source, rewrite = record["source"], record["rewrite"]
    head = f"{record.get('system', '')}{' +constrained' if record.get('constrained') else ''} · {record['constraint']}"
    lines = [head, "=" * min(len(head), 2 * width + 3)]
    lines += _columns(source["title"], rewrite.get("title", ""), width)
    lines.append("-" * (2 * width + 3))
    ingredients = list(zip(source["ingredients"], rewrite.get("ingredients", [])))
    for old, new in ingredients:
        lines += _columns(f"• {old}", f"• {new}", width)
    lines.append("-" * (2 * width + 3))
    decisions = step_decisions(record)
    for number, (old, new) in enumerate(zip(source["steps"], rewrite.get("steps", [])), 1):
        mark = DECISION_MARKS.get(decisions[number - 1], "") if decisions else ""
        lines += _columns(f"{number}. {old}", f"{number}.{mark} {new}", width)
    if decisions:
        lines.append(LEGEND)
    return "\n".join(lines)

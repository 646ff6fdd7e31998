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
    for number, (old, new) in enumerate(zip(source["steps"], rewrite.get("steps", [])), 1):
        lines += _columns(f"{number}. {old}", f"{number}. {new}", width)
    return "\n".join(lines)

"""Read recipes from any supported corpus format, streaming, with every drop accounted for.

    for recipe in read_recipes(["corpus.jsonl", "RAW_recipes.csv"], report):
        ...
    report.rejects  # every record that did not become a recipe, with location and reason
"""
from __future__ import annotations

import glob
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from rrt.clean import clean_recipe
from rrt.loaders.csv_records import read_csv
from rrt.loaders.json_records import Record, read_json_document, read_jsonl, record_to_recipe
from rrt.loaders.paper_text import read_paper_recipes
from rrt.loaders.source import InputError, head_bytes, is_remote
from rrt.paper_format import BOS
from rrt.recipe import Recipe, Reject

FORMATS = ("paper", "jsonl", "json", "csv")
DATA_SUFFIXES = (".txt", ".jsonl", ".ndjson", ".json", ".csv")  # what a folder contributes
_READERS: dict[str, Callable[[str], Iterator[Record]]] = {
    "paper": read_paper_recipes, "jsonl": read_jsonl, "json": read_json_document, "csv": read_csv,
}


@dataclass
class LoadReport:
    """Counts of what was read, kept and rejected (by reason), plus an optional reject sink."""

    read: int = 0
    kept: int = 0
    rejected: Counter = field(default_factory=Counter)
    on_reject: Callable[[Reject], None] | None = None

    def reject(self, item: Reject) -> None:
        """Count a reject and hand it to the sink."""
        self.rejected[item.reason] += 1
        if self.on_reject is not None:
            self.on_reject(item)

    def summary(self) -> str:
        """One line: kept, rejected and why."""
        reasons = ", ".join(f"{r}={n}" for r, n in self.rejected.most_common())
        total = sum(self.rejected.values())
        return f"{self.kept} recipes kept, {total} rejected" + (f" ({reasons})" if reasons else "")


def detect_format(path: str) -> str:
    """Guess an input's format from its name, then its first bytes."""
    name = path.lower().removesuffix(".gz")
    head = head_bytes(path)
    if not head.strip():
        raise InputError(f"empty file: {path}")
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if b"\x00" in head or sum(b < 9 or 13 < b < 32 for b in head) > len(head) // 20:
        raise InputError(f"binary data, not a recipe corpus: {path}")
    if text.startswith(BOS.encode()):
        return "paper"
    if name.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    if name.endswith(".csv"):
        return "csv"
    if name.endswith(".txt") and b"<endoftitle>" in head:
        return "paper"
    if text[:1] in (b"{", b"["):
        first_line = text.split(b"\n", 1)[0].strip()
        # A .json file with one object per line is JSONL in disguise.
        if text[:1] == b"{" and first_line.endswith(b"}") and b"\n{" in text:
            return "jsonl"
        return "json"
    raise InputError(f"unrecognised format (expected paper text, JSON, JSONL or CSV): {path}")


def expand_inputs(specs: Iterable[str]) -> list[str]:
    """Files named by paths, globs or folders (folders: every file inside, sorted)."""
    paths: list[str] = []
    for spec in specs:
        if is_remote(spec):
            paths.append(spec)
        elif os.path.isdir(spec):
            for root, _, files in sorted(os.walk(spec)):
                paths += [os.path.join(root, f) for f in sorted(files)
                          if f.lower().removesuffix(".gz").endswith(DATA_SUFFIXES)]
        elif any(ch in spec for ch in "*?["):
            matched = sorted(glob.glob(spec, recursive=True))
            if not matched:
                raise InputError(f"no files match {spec}")
            paths += matched
        elif os.path.exists(spec):
            paths.append(spec)
        else:
            raise InputError(f"no such file: {spec}")
    return paths


def read_file_records(path: str, fmt: str | None = None) -> Iterator[Record]:
    """Raw records of one file; a file-level problem becomes one Reject for the file."""
    try:
        fmt = fmt or detect_format(path)
        yield from _READERS[fmt](path)
    except InputError as err:
        yield path, Reject(path, "unreadable_file", str(err))
    except OSError as err:
        yield path, Reject(path, "unreadable_file", f"{type(err).__name__}: {err}"[:200])


def read_recipes(paths: Iterable[str], report: LoadReport | None = None,
                 fmt: str | None = None) -> Iterator[Recipe]:
    """Clean recipes from every input, in order; rejects go to the report."""
    report = report if report is not None else LoadReport()
    for path in paths:
        stem = os.path.basename(path)
        for number, (where, record) in enumerate(read_file_records(path, fmt)):
            report.read += 1
            if isinstance(record, Reject):
                report.reject(record)
                continue
            recipe = record_to_recipe(record, f"{stem}:{number}", stem)
            if not isinstance(recipe, Reject):
                recipe = clean_recipe(recipe, where)
            if isinstance(recipe, Reject):
                recipe.location = where
                report.reject(recipe)
                continue
            report.kept += 1
            yield recipe

"""Read recipes from any supported corpus format, streaming, with every drop accounted for.

for recipe in read_recipes(["corpus.jsonl", "RAW_recipes.csv"], report):
    ...
report.rejects  # every record that did not become a recipe, with location and reason
"""

from __future__ import annotations

import csv
import glob
import os
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from rrt.recipes.clean import clean_recipe
from rrt.recipes.loaders.csv_records import is_csv_header, read_csv
from rrt.recipes.loaders.json_records import (
    Record,
    read_json_document,
    read_jsonl,
    record_problem,
    record_to_recipe,
)
from rrt.recipes.loaders.paper_text import read_paper_recipes
from rrt.recipes.loaders.source import STDIN, InputError, head_bytes, is_remote
from rrt.recipes.paper_format import BOS
from rrt.recipes.recipe import Recipe, Reject

FORMATS = ("paper", "jsonl", "json", "csv")
DATA_SUFFIXES = (".txt", ".jsonl", ".ndjson", ".json", ".csv")  # what a folder contributes
# What a recipe input is, in one sentence, for the messages that say so.
RECIPE_INPUTS = (
    "recipe inputs are recipe records in paper text (.txt), JSONL, JSON or CSV, gzipped or not; "
    "Parquet, stats.json and the jobs' rewrites.jsonl are outputs, not recipe inputs"
)
# Rejects that concern a whole input, each worth a warning line of its own.
INPUT_REASONS = ("missing_input", "unreadable_file")
# What a whole input can fail with part-way (a truncated .gz is EOFError, a corrupt one
# zlib.error, pyarrow's errors are OSError or ValueError); the inputs after it still load.
_INPUT_FAILURES = (InputError, OSError, EOFError, zlib.error, csv.Error, ValueError)
_READERS: dict[str, Callable[[str], Iterator[Record]]] = {
    "paper": read_paper_recipes,
    "jsonl": read_jsonl,
    "json": read_json_document,
    "csv": read_csv,
}


@dataclass
class LoadReport:
    """Counts of what was read, kept and rejected (by reason), the inputs skipped, plus an
    optional reject sink."""

    read: int = 0
    kept: int = 0
    rejected: Counter = field(default_factory=Counter)
    on_reject: Callable[[Reject], None] | None = None
    first: dict[str, Reject] = field(default_factory=dict)  # the first reject of each reason
    skipped: list[str] = field(default_factory=list)  # why each input that names no file was

    def reject(self, item: Reject) -> None:
        """Count a reject and hand it to the sink. An input that names no file is no recipe: it
        counts as an input skipped, and the sink still gets it (a rejects file lists it)."""
        if item.reason == "missing_input":
            self.skipped.append(item.detail)
        else:
            self.rejected[item.reason] += 1
            self.first.setdefault(item.reason, item)
        if self.on_reject is not None:
            self.on_reject(item)

    def summary(self) -> str:
        """One line: kept, rejected and why, and the inputs skipped."""
        reasons = ", ".join(f"{r}={n}" for r, n in self.rejected.most_common())
        total = sum(self.rejected.values())
        line = f"{plural(self.kept, 'recipe')} kept, {total} rejected"
        line += f" ({reasons})" if reasons else ""
        if self.skipped:
            line += f"; {plural(len(self.skipped), 'input')} skipped ({'; '.join(self.skipped)})"
        return line


def plural(count: int, noun: str) -> str:
    """`count` and the noun, plural unless the count is one: "1 recipe", "2 recipes"."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


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
    if is_csv_header(text.split(b"\n", 1)[0]):
        return "csv"  # a CSV without its name (standard input) is known by its header
    raise InputError(f"unrecognised format (expected paper text, JSON, JSONL or CSV): {path}")


def expand_inputs(specs: Iterable[str]) -> list[str]:
    """Files named by paths, globs or folders (folders: every data file inside, sorted). A spec
    that names no file stays in the list as it is: reading it gives a missing_input reject (an
    input skipped), so one mistyped input among several costs only itself."""
    paths: list[str] = []
    for spec in specs:
        if is_remote(spec) or spec == STDIN:
            paths.append(spec)
        elif os.path.isdir(spec):
            found = [
                os.path.join(root, f)
                for root, _, files in sorted(os.walk(spec))
                for f in sorted(files)
                if f.lower().removesuffix(".gz").endswith(DATA_SUFFIXES)
            ]
            paths += found or [spec]
        elif any(ch in spec for ch in "*?[") and not os.path.exists(spec):
            paths += sorted(glob.glob(spec, recursive=True)) or [spec]
        else:
            paths.append(spec)
    return paths


def missing_input(path: str) -> str | None:
    """Why a path from expand_inputs names nothing to read, or None when it names a file (or a
    URI or standard input, which only opening can tell)."""
    if is_remote(path) or path == STDIN or os.path.isfile(path):
        return None
    if os.path.isdir(path):
        return f"no recipe files ({', '.join(DATA_SUFFIXES)}, .gz too) in folder {path}"
    if any(ch in path for ch in "*?["):
        return f"no files match {path}"
    return f"no such file: {path}"


def read_file_records(path: str, fmt: str | None = None) -> Iterator[Record]:
    """Raw records of one file; a file-level problem becomes one Reject for the file (after
    the records read before it)."""
    missing = missing_input(path)
    if missing:
        yield path, Reject(path, "missing_input", missing)
        return
    try:
        fmt = fmt or detect_format(path)
        yield from _READERS[fmt](path)
    except _INPUT_FAILURES as err:
        yield path, Reject(path, "unreadable_file", _failure(path, err))


def _failure(path: str, err: Exception) -> str:
    if isinstance(err, InputError):
        return str(err)[:300]
    module = type(err).__module__.lstrip("_")
    kind = (
        type(err).__name__ if module == "builtins" else f"{module}.{type(err).__name__}"
    )  # zlib.error
    return f"{path}: {kind}: {err}"[:300]


def _recipe(record: dict, where: str, fallback_id: str, stem: str) -> Recipe | Reject:
    problem = record_problem(record)
    if problem:
        return Reject(where, "invalid_record", problem)
    try:
        recipe = record_to_recipe(record, fallback_id, stem)
        return recipe if isinstance(recipe, Reject) else clean_recipe(recipe, where)
    except Exception as err:  # noqa: BLE001 - a record is untrusted data: whatever it breaks costs it alone
        return Reject(where, "invalid_record", f"{type(err).__name__}: {err}"[:200])


def read_recipes(
    paths: Iterable[str], report: LoadReport | None = None, fmt: str | None = None
) -> Iterator[Recipe]:
    """Clean recipes from every input, in order; rejects go to the report. A recipe whose id an
    earlier one of these inputs had is a duplicate_id reject: the first is kept."""
    for _, recipe in read_located_recipes(paths, report, fmt):
        yield recipe


def read_located_recipes(
    paths: Iterable[str], report: LoadReport | None = None, fmt: str | None = None
) -> Iterator[tuple[str, Recipe]]:
    """read_recipes with where each recipe was read (file:line, file[index]...)."""
    report = report if report is not None else LoadReport()
    first_read: dict[str, str] = {}  # id -> the input it was first read from
    for path in paths:
        stem = "stdin" if path == STDIN else os.path.basename(path)
        for where, record in read_file_records(path, fmt):
            if isinstance(record, Reject) and record.reason == "missing_input":
                report.reject(record)  # an input skipped, not a record read
                continue
            report.read += 1
            if isinstance(record, Reject):
                report.reject(record)
                continue
            recipe = _recipe(record, where, fallback_id(path, where, stem), stem)
            if isinstance(recipe, Reject):
                recipe.location = where
                report.reject(recipe)
                continue
            if recipe.id in first_read:
                report.reject(duplicate(where, recipe.id, first_read[recipe.id]))
                continue
            first_read[recipe.id] = path
            report.kept += 1
            yield where, recipe


def fallback_id(path: str, where: str, stem: str) -> str:
    """The id of a record that has none: its file's name and where in it, as its rejects say
    (`recipes.csv:5`: line 5)."""
    return stem + where[len(path) :] if where.startswith(path) else f"{stem}:{where}"


def duplicate(where: str, recipe_id: str, first: str) -> Reject:
    """The reject of a recipe whose id was read before (`first`: where)."""
    return Reject(where, "duplicate_id", f"id {recipe_id!r} was read first from {first}", recipe_id)

"""CSV inputs: RecipeNLG (`title, ingredients, directions` as JSON lists) and
Food.com `RAW_recipes.csv` (`name, ingredients, steps` as Python-list strings)."""

from __future__ import annotations

import ast
import csv
import io
import json
import re
from collections.abc import Iterator

from rrt.recipes.loaders.json_records import Record
from rrt.recipes.loaders.source import MAX_LINE_BYTES, InputError, open_binary
from rrt.recipes.recipe import Reject

SCHEMAS = {
    "recipenlg": {"title": "title", "ingredients": "ingredients", "steps": "directions"},
    "foodcom": {"title": "name", "ingredients": "ingredients", "steps": "steps"},
}
MAX_FIELD_CHARS = (
    1024 * 1024
)  # no recipe field is bigger; an unclosed quote stops here, not at the end of the file
# The limit is process-wide; it is above the csv module's own default, so no other reader loses by it.
csv.field_size_limit(MAX_FIELD_CHARS)
_UNDECODED = re.compile("[\udc80-\udcff]")  # what surrogateescape makes of bytes that are not UTF-8


def csv_schema(header: list[str]) -> str:
    """Which CSV schema a header belongs to, or InputError naming what is missing."""
    names = {h.strip().lower() for h in header}
    for schema, columns in SCHEMAS.items():
        if set(columns.values()) <= names:
            return schema
    raise InputError(
        "CSV header has neither RecipeNLG columns (title, ingredients, directions) nor Food.com "
        f"columns (name, ingredients, steps); found: {', '.join(sorted(names))[:200]}"
    )


def is_csv_header(line: bytes) -> bool:
    """Whether a first line is the header of a supported CSV schema."""
    try:
        csv_schema(next(csv.reader([line.decode("utf-8", "replace")])))
    except (InputError, csv.Error, StopIteration):
        return False
    return True


class _BoundedLines:
    """The lines of a text stream for csv.reader, none held longer than MAX_LINE_BYTES: a longer
    line is skipped, handed on as an empty line, and counted so its row is rejected."""

    def __init__(self, handle: io.TextIOBase):
        self.handle = handle
        self.cut = 0

    def __iter__(self) -> _BoundedLines:
        return self

    def __next__(self) -> str:
        line = self.handle.readline(MAX_LINE_BYTES + 1)
        if not line:
            raise StopIteration
        if len(line) > MAX_LINE_BYTES and not line.endswith(("\n", "\r")):
            while line and not line.endswith(("\n", "\r")):
                line = self.handle.readline(MAX_LINE_BYTES)
            self.cut += 1
            return "\n"
        return line


def _parse_list(text: str) -> list[str]:
    """A JSON or Python list literal of strings (both schemas quote this way)."""
    text = text.strip()
    if not text:
        return []
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = ast.literal_eval(text)  # Food.com writes ['a', 'b']; literal_eval runs no code
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return [str(v) for v in value]


def _header(reader) -> list[str] | None:
    try:
        header = next(reader)
    except StopIteration:
        return None
    # Bytes that are not UTF-8 would reach a warning line as raw surrogates; show them as U+FFFD.
    return [_UNDECODED.sub("\ufffd", name) for name in header]


def _row_outcome(row: list[str], header: list[str], schema: str) -> dict | tuple[str, str]:
    """The record of a row, or the (reason, detail) of its reject."""
    if len(row) != len(header):
        return "invalid_csv_row", f"{len(row)} fields, header has {len(header)}"
    if any(_UNDECODED.search(cell) for cell in row):
        return "unreadable_line", "not valid UTF-8"
    try:
        return _row_record(row, {h.strip().lower(): i for i, h in enumerate(header)}, schema)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as err:
        return "invalid_csv_row", f"list column does not parse: {str(err)[:120]}"


def _row_record(row: list[str], index: dict[str, int], schema: str) -> dict:
    columns = SCHEMAS[schema]
    record = {
        "title": row[index[columns["title"]]],
        "ingredients": _parse_list(row[index[columns["ingredients"]]]),
        "steps": _parse_list(row[index[columns["steps"]]]),
        "source": "recipenlg" if schema == "recipenlg" else "food.com",
    }
    id_column = index.get("id", index.get("link"))
    if id_column is not None and row[id_column].strip():
        record["id"] = f"{record['source']}:{row[id_column].strip()}"
    return record


def read_csv(path: str) -> Iterator[Record]:
    """Stream rows as recipe dicts; a malformed row is rejected, the rest come through."""
    # surrogateescape keeps undecodable bytes visible, so a real U+FFFD in the text is not taken for one.
    handle = io.TextIOWrapper(
        open_binary(path), encoding="utf-8", errors="surrogateescape", newline=""
    )
    with handle:
        lines = _BoundedLines(handle)
        reader = csv.reader(lines)
        header = _header(reader)
        if header is None:
            return
        schema = csv_schema(header)
        # After a field past the limit (a quote that never closes), the lines up to the next row that
        # makes a record are what it swallowed: one reject for them all, not one per line.
        skipping: int | None = None  # the line where that field's row began
        while True:
            line, cut = reader.line_num + 1, lines.cut
            where = f"{path}:{line}"
            try:
                row = next(reader)
            except StopIteration:
                if skipping:
                    yield _swallowed(path, skipping, None)
                return
            except csv.Error as err:  # the reader starts afresh on the next line
                if skipping is None and "field larger than field limit" in str(err):
                    skipping = line
                elif skipping is None:
                    yield where, Reject(where, "invalid_csv_row", str(err)[:200])
                continue
            if lines.cut != cut:
                if skipping is None:
                    yield (
                        where,
                        Reject(
                            where, "record_too_large", f"a line over {MAX_LINE_BYTES} characters"
                        ),
                    )
                continue
            if not any(cell.strip() for cell in row):
                continue
            outcome = _row_outcome(row, header, schema)
            if skipping:
                if not isinstance(outcome, dict):
                    continue
                yield _swallowed(path, skipping, line)
                skipping = None
            yield where, outcome if isinstance(outcome, dict) else Reject(where, *outcome)


def _swallowed(path: str, first: int, resumed: int | None) -> Record:
    where = f"{path}:{first}"
    rest = (
        f"lines {first}-{resumed - 1} skipped, read on from line {resumed}"
        if resumed
        else "skipped to the end"
    )
    return where, Reject(
        where,
        "record_too_large",
        f"a field over {MAX_FIELD_CHARS} characters (an unclosed quote?); " + rest,
    )

"""CSV inputs: RecipeNLG (`title, ingredients, directions` as JSON lists) and
Food.com `RAW_recipes.csv` (`name, ingredients, steps` as Python-list strings)."""
from __future__ import annotations

import ast
import csv
import io
import json
import sys
from typing import Iterator

from rrt.loaders.json_records import Record
from rrt.loaders.source import InputError, open_binary
from rrt.recipe import Reject

csv.field_size_limit(min(sys.maxsize, 2**31 - 1))

SCHEMAS = {
    "recipenlg": {"title": "title", "ingredients": "ingredients", "steps": "directions"},
    "foodcom": {"title": "name", "ingredients": "ingredients", "steps": "steps"},
}
MAX_FIELD_CHARS = 1_000_000


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
        raise ValueError(f"expected a list, got {type(value).__name__}")
    return [str(v) for v in value]


def read_csv(path: str) -> Iterator[Record]:
    """Stream rows as recipe dicts; a malformed row is rejected, the rest come through."""
    handle = io.TextIOWrapper(open_binary(path), encoding="utf-8", errors="replace", newline="")
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader)
        except StopIteration:
            return
        schema = csv_schema(header)
        index = {h.strip().lower(): i for i, h in enumerate(header)}
        columns = SCHEMAS[schema]
        id_column = index.get("id", index.get("link"))
        while True:
            where = f"{path}:{reader.line_num + 1}"
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as err:
                yield where, Reject(where, "invalid_csv_row", str(err)[:200])
                continue
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                yield where, Reject(where, "invalid_csv_row", f"{len(row)} fields, header has {len(header)}")
                continue
            if any("\ufffd" in cell for cell in row):
                yield where, Reject(where, "unreadable_line", "not valid UTF-8")
                continue
            if any(len(cell) > MAX_FIELD_CHARS for cell in row):
                yield where, Reject(where, "record_too_large", f"a field over {MAX_FIELD_CHARS} characters")
                continue
            try:
                record = {
                    "title": row[index[columns["title"]]],
                    "ingredients": _parse_list(row[index[columns["ingredients"]]]),
                    "steps": _parse_list(row[index[columns["steps"]]]),
                    "source": "recipenlg" if schema == "recipenlg" else "food.com",
                }
            except (ValueError, SyntaxError, MemoryError, RecursionError) as err:
                yield where, Reject(where, "invalid_csv_row", f"list column does not parse: {str(err)[:120]}")
                continue
            if id_column is not None and row[id_column].strip():
                record["id"] = f"{record['source']}:{row[id_column].strip()}"
            yield where, record

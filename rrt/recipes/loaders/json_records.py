"""JSON inputs: JSONL, JSON lists, schema.org Recipe JSON-LD, recipe-scrapers and Recipe1M.

All of them end as a dict per recipe, mapped onto `Recipe` by `record_to_recipe`.
"""

from __future__ import annotations

import codecs
import io
import json
import re
from collections.abc import Iterator
from typing import Any, BinaryIO

import ijson

from rrt.recipes.loaders.source import (
    MAX_LINE_BYTES,
    decoded_lines,
    head_bytes,
    open_binary,
)
from rrt.recipes.recipe import Recipe, Reject

Record = tuple[str, dict | Reject]  # (location, raw record or the reason it is unusable)

_TITLE_KEYS = ("title", "name", "recipe_name", "headline")
_INGREDIENT_KEYS = ("ingredients", "recipeIngredient", "ingredient_lines", "ingredientLines")
_STEP_KEYS = (
    "steps",
    "instructions_list",
    "recipeInstructions",
    "instructions",
    "directions",
    "method",
)
_ID_KEYS = ("id", "@id", "identifier", "url", "canonical_url", "link")
_SOURCE_KEYS = ("source", "host", "site_name", "site")
_LIST_SHAPED = ("site_tags", "tags", "keywords", "recipeCategory", "recipeCuisine", "diets")
MAX_NESTING = (
    32  # far deeper than any recipe schema; deeper records are rejected, not recursed into
)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# JSON list items and documents are parsed one at a time from a window of the text: json's C decoder
# gives where each ends, and one past the limit is followed by its brackets and quotes, not built.
_DECODER = json.JSONDecoder(parse_constant=_no_constant)
_CHUNK = 64 * 1024
_TAIL = 8  # characters from a window's end where a parse failure may be the window cutting a value short
_NUMBER_GOES_ON = re.compile(r"[0-9.eE+-]*")
_TOO_LARGE = object()
_SPACE = re.compile(r"[ \t\n\r]*")
_STRUCTURE = re.compile(r'["\[\]{}]')
_STRING_BODY = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)
_SCALAR = re.compile(r"[^\s,\]}]*")


def _texts(value: Any) -> list[str]:
    """Flatten strings, {"text": …} objects and HowToSection/HowToStep trees into lines."""
    if value is None:
        return []
    if isinstance(value, str):
        return [line for line in value.splitlines() if line.strip()]
    if isinstance(value, dict):
        if "itemListElement" in value:
            return _texts(value["itemListElement"])
        for key in ("text", "name", "description"):
            if isinstance(value.get(key), str):
                return [value[key]]
        return []
    if isinstance(value, (list, tuple)):
        return [line for item in value for line in _texts(item)]
    return [str(value)]


def _first(record: dict, keys: tuple[str, ...]) -> Any:
    for key in keys:
        if record.get(key) not in (None, "", []):
            return record[key]
    return None


def is_schema_recipe(record: dict) -> bool:
    """True for a schema.org object whose @type is (or includes) Recipe."""
    kind = record.get("@type")
    return kind == "Recipe" or (isinstance(kind, list) and "Recipe" in kind)


def expand_json_ld(record: Any) -> list[Any]:
    """The Recipe objects inside a JSON-LD document (@graph or list), else the record itself
    (never nothing, so a record without a recipe is rejected rather than lost)."""
    found: list[Any] = []
    stack = [record]
    while stack:  # a loop, not recursion: a line of nested brackets must not exhaust the stack
        item = stack.pop()
        if isinstance(item, list) and item:
            stack.extend(reversed(item))
        elif isinstance(item, dict) and isinstance(item.get("@graph"), list):
            found += [r for r in item["@graph"] if isinstance(r, dict) and is_schema_recipe(r)] or [
                item
            ]
        else:
            found.append(item)
    return found


def record_problem(record: Any) -> str:
    """Why a raw record cannot be passed on whole (too deeply nested, or text that is not
    valid Unicode), or "" when it can."""
    stack = [(record, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return "text holds a lone surrogate (not valid Unicode)"
        elif isinstance(item, (dict, list)):
            if depth > MAX_NESTING:
                return f"nested deeper than {MAX_NESTING} levels"
            values = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((value, depth + 1) for value in values)
    return ""


def _unwrapped(record: dict) -> dict:
    """A record holding its recipe under "recipe" (what `rrt substitute` writes), as that
    recipe with the outer id."""
    inner = record.get("recipe")
    if (
        not isinstance(inner, dict)
        or _first(record, _TITLE_KEYS + _INGREDIENT_KEYS + _STEP_KEYS) is not None
    ):
        return record
    outer = {k: v for k, v in record.items() if k != "recipe"}
    return {
        **outer,
        **inner,
        **({"id": record["id"]} if record.get("id") not in (None, "") else {}),
    }


def record_to_recipe(record: dict, fallback_id: str, default_source: str) -> Recipe | Reject:
    """Map one recipe-shaped dict (any supported schema) onto a Recipe."""
    if not isinstance(record, dict):
        return Reject(
            fallback_id, "not_a_recipe", f"expected an object, got {type(record).__name__}"
        )
    record = _unwrapped(record)
    title = _first(record, _TITLE_KEYS)
    ingredients = _texts(_first(record, _INGREDIENT_KEYS))
    steps = _texts(_first(record, _STEP_KEYS))
    if title is None and not ingredients and not steps:
        keys = ", ".join(sorted(map(str, record))[:8])
        return Reject(fallback_id, "not_a_recipe", f"no title, ingredients or steps (keys: {keys})")
    rid = _first(record, _ID_KEYS)
    source = _first(record, _SOURCE_KEYS)
    used = set(_TITLE_KEYS + _INGREDIENT_KEYS + _STEP_KEYS + ("id", "source", "metadata"))
    metadata = dict(record["metadata"]) if isinstance(record.get("metadata"), dict) else {}
    metadata |= {
        k: v
        for k, v in record.items()
        if k not in used and (isinstance(v, (str, int, float, bool)) or k in _LIST_SHAPED)
    }
    return Recipe(
        id=str(rid) if rid is not None else fallback_id,
        title=" ".join(_texts(title)) if not isinstance(title, str) else title,
        ingredients=ingredients,
        steps=steps,
        source=str(source) if isinstance(source, (str, int)) else default_source,
        metadata=metadata,
    )


def read_jsonl(path: str) -> Iterator[Record]:
    """One JSON object per line; a bad line is rejected, the rest still come through."""
    for number, text, reason, detail in decoded_lines(path):
        where = f"{path}:{number}"
        if text is None:
            yield where, Reject(where, reason, detail)
            continue
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except (
            ValueError,
            RecursionError,
        ) as err:  # ValueError: also an integer too long to convert
            yield where, Reject(where, "invalid_json", str(err)[:200])
            continue
        for i, item in enumerate(expand_json_ld(value)):
            yield (where if i == 0 else f"{where}#{i}"), item


def _document_where(path: str, listed: bool, index: int, j: int) -> str:
    if listed or index:  # an item of a list, or a later document of several
        return f"{path}[{index}]" + (f"#{j}" if j else "")
    return f"{path}#{j}"


class _Window:
    """A byte stream's text, decoded as it is read; what lies before `pos` is let go at the next read."""

    def __init__(self, handle: BinaryIO):
        self.handle, self.decoder = handle, codecs.getincrementaldecoder("utf-8-sig")()
        self.text, self.pos, self.done = "", 0, False

    def read(self, size: int = _CHUNK) -> bool:
        """Add up to `size` more bytes' text; False at the end of the input."""
        raw = b"" if self.done else self.handle.read(size)
        self.done = not raw
        self.text, self.pos = self.text[self.pos :] + self.decoder.decode(raw, final=self.done), 0
        return not self.done

    def next_char(self) -> str:
        """The next character that is not white space ("" at the end), left unread."""
        while True:
            self.pos = _SPACE.match(self.text, self.pos).end()
            if self.pos < len(self.text) or not self.read():
                return self.text[self.pos : self.pos + 1]


def _value(window: _Window) -> Any:
    """The JSON value at the window's position, or _TOO_LARGE for one over MAX_LINE_BYTES characters,
    passed over without being held."""
    while True:
        held = len(window.text) - window.pos
        try:
            value, end = _DECODER.raw_decode(window.text, window.pos)
            # Only a number can be cut short by the window's end and still parse ("12" of "125").
            if (
                window.done
                or type(value) not in (int, float)
                or not _NUMBER_GOES_ON.fullmatch(window.text, end)
            ):
                window.pos, size = end, end - window.pos
                return value if size <= MAX_LINE_BYTES else _TOO_LARGE
        except json.JSONDecodeError as err:
            cut_short = (
                err.msg.startswith("Unterminated string") or err.pos >= len(window.text) - _TAIL
            )
            if window.done or not cut_short:
                raise
        except (
            RecursionError
        ):  # nested past the C decoder's stack: ijson builds it without recursing
            end, whole = _value_end(window, keep=True)
            whole = whole and end - window.pos <= MAX_LINE_BYTES
            text, window.pos = window.text[window.pos : end] if whole else "", end
            return (
                next(ijson.items(io.BytesIO(text.encode()), "", use_float=True))
                if whole
                else _TOO_LARGE
            )
        if held > MAX_LINE_BYTES:
            window.pos = _value_end(window, keep=False)[0]
            return _TOO_LARGE
        # Each retry parses from the record's start: doubling the window keeps their sum linear.
        window.read(min(max(_CHUNK, held), MAX_LINE_BYTES + 1 - held))


def _value_end(window: _Window, keep: bool) -> tuple[int, bool]:
    """Where the value at the window's position ends, found by following only its quotes and brackets,
    and whether the window still holds all of it: `keep` holds it up to MAX_LINE_BYTES characters;
    past that, or without `keep`, what has been passed over is let go."""
    scalar = window.text[window.pos] not in '"[{'  # a number or a literal
    depth, at, in_string = 0, window.pos, False
    while True:
        text = window.text
        if scalar:
            at = _SCALAR.match(text, at).end()
            if at < len(text):
                return at, keep
        elif in_string:
            at = _STRING_BODY.match(text, at).end()
            if at < len(text) and text[at] == '"':  # else the window ends, or ends in a backslash
                at, in_string = at + 1, False
                if depth == 0:
                    return at, keep
                continue
        elif (mark := _STRUCTURE.search(text, at)) is not None:
            at, char = mark.end(), mark.group()
            in_string, depth = char == '"', depth + (char in "[{") - (char in "]}")
            if depth == 0 and not in_string:
                return at, keep
            continue
        else:
            at = len(text)
        keep = keep and len(text) - window.pos <= MAX_LINE_BYTES
        if not keep:
            window.pos = at
        at -= window.pos
        if not window.read():
            if scalar:
                return at, keep
            raise ValueError("the input ends inside a value")


def _json_values(path: str, listed: bool) -> Iterator[Any]:
    """The items of a JSON list, or the documents of a file, read one at a time: each is parsed
    alone, and one over MAX_LINE_BYTES characters is passed over (as _TOO_LARGE) without being held."""
    with open_binary(path) as handle:
        window = _Window(handle)
        if not listed:
            while window.next_char():
                yield _value(window)
            return
        if window.next_char() != "[":
            raise ValueError("expected a JSON list")
        window.pos += 1
        if window.next_char() == "]":
            window.pos += 1
        else:
            while True:
                window.next_char()
                yield _value(window)
                char = window.next_char()
                window.pos += 1
                if char == "]":
                    break
                if char != ",":
                    raise ValueError(f"expected ',' or ']' after item, found {char or 'the end'!r}")
        if window.next_char():
            raise ValueError("more data after the list")


def read_json_document(path: str) -> Iterator[Record]:
    """A JSON list of recipes (streamed, one item at a time), or one object / JSON-LD document, or
    several in a row (JSONL whose first line was too long to sniff). A record over MAX_LINE_BYTES
    characters is rejected as JSONL rejects such a line, and the reading goes on."""
    listed = head_bytes(path).removeprefix(codecs.BOM_UTF8).lstrip()[:1] == b"["
    index = -1
    try:
        for index, item in enumerate(_json_values(path, listed)):
            if item is _TOO_LARGE:
                where = _document_where(path, listed, index, 0)
                yield (
                    where,
                    Reject(
                        where, "record_too_large", f"record longer than {MAX_LINE_BYTES} characters"
                    ),
                )
                continue
            for j, recipe in enumerate(expand_json_ld(item)):
                yield _document_where(path, listed, index, j), recipe
    except (
        ijson.common.JSONError,
        ValueError,
    ) as err:  # ValueError: bad JSON or UTF-8, an integer too long
        where = f"{path}[{index + 1}]" if listed or index >= 0 else path
        # A JSONDecodeError's line and column count from the window, not the file: leave them out.
        message = (
            err.msg
            if isinstance(err, json.JSONDecodeError)
            else str(err).splitlines()[0]
            if str(err)
            else ""
        )
        message = message[:200] or type(err).__name__
        yield where, Reject(where, "invalid_json", f"{message}; records after this point are lost")

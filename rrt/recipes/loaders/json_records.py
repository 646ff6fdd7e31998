"""JSON inputs: JSONL, JSON lists, schema.org Recipe JSON-LD, recipe-scrapers and Recipe1M.

All of them end as a dict per recipe, mapped onto `Recipe` by `record_to_recipe`.
"""
from __future__ import annotations

import json
import re
from typing import Any, BinaryIO, Iterator

import ijson

from rrt.recipes.loaders.source import decoded_lines, head_bytes, open_binary
from rrt.recipes.recipe import Recipe, Reject

Record = tuple[str, dict | Reject]  # (location, raw record or the reason it is unusable)

_TITLE_KEYS = ("title", "name", "recipe_name", "headline")
_INGREDIENT_KEYS = ("ingredients", "recipeIngredient", "ingredient_lines", "ingredientLines")
_STEP_KEYS = ("steps", "instructions_list", "recipeInstructions", "instructions", "directions", "method")
_ID_KEYS = ("id", "@id", "identifier", "url", "canonical_url", "link")
_SOURCE_KEYS = ("source", "host", "site_name", "site")
_LIST_SHAPED = ("site_tags", "tags", "keywords", "recipeCategory", "recipeCuisine", "diets")
MAX_NESTING = 32  # far deeper than any recipe schema; deeper records are rejected, not recursed into
_SURROGATE = re.compile("[\ud800-\udfff]")


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
            found += [r for r in item["@graph"] if isinstance(r, dict) and is_schema_recipe(r)] or [item]
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
    if not isinstance(inner, dict) or _first(record, _TITLE_KEYS + _INGREDIENT_KEYS + _STEP_KEYS) is not None:
        return record
    outer = {k: v for k, v in record.items() if k != "recipe"}
    return {**outer, **inner, **({"id": record["id"]} if record.get("id") not in (None, "") else {})}


def record_to_recipe(record: dict, fallback_id: str, default_source: str) -> Recipe | Reject:
    """Map one recipe-shaped dict (any supported schema) onto a Recipe."""
    if not isinstance(record, dict):
        return Reject(fallback_id, "not_a_recipe", f"expected an object, got {type(record).__name__}")
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
        k: v for k, v in record.items()
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
    for number, text, problem in decoded_lines(path):
        where = f"{path}:{number}"
        if text is None:
            yield where, Reject(where, "unreadable_line", problem)
            continue
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as err:  # ValueError: also an integer too long to convert
            yield where, Reject(where, "invalid_json", str(err)[:200])
            continue
        for i, item in enumerate(expand_json_ld(value)):
            yield (where if i == 0 else f"{where}#{i}"), item


def _document_where(path: str, listed: bool, index: int, j: int) -> str:
    if listed or index:  # an item of a list, or a later document of several
        return f"{path}[{index}]" + (f"#{j}" if j else "")
    return f"{path}#{j}"


def _values(handle: BinaryIO, listed: bool, backend: Any) -> Iterator[Any]:
    if listed:
        return backend.items(handle, "item", use_float=True)
    return backend.items(handle, "", use_float=True, multiple_values=True)


def _json_values(path: str, listed: bool) -> Iterator[Any]:
    """The items of a JSON list, or the documents of a file, streamed. yajl's C parser stops at
    an integer past 64 bits; the pure-Python parser reads it, so from there on it takes over."""
    done = 0
    try:
        with open_binary(path) as handle:
            for value in _values(handle, listed, ijson):
                yield value
                done += 1
            return
    except ijson.common.JSONError as err:
        if "integer overflow" not in str(err):
            raise
    with open_binary(path) as handle:
        for index, value in enumerate(_values(handle, listed, ijson.get_backend("python"))):
            if index >= done:
                yield value


def read_json_document(path: str) -> Iterator[Record]:
    """A JSON list of recipes (streamed with ijson), or one object / JSON-LD document, or several
    in a row (JSONL whose first line was too long to sniff)."""
    listed = head_bytes(path).lstrip()[:1] == b"["
    index = -1
    try:
        for index, item in enumerate(_json_values(path, listed)):
            for j, recipe in enumerate(expand_json_ld(item)):
                yield _document_where(path, listed, index, j), recipe
    except (ijson.common.JSONError, ValueError) as err:  # ValueError: bad UTF-8, an integer too long
        where = f"{path}[{index + 1}]" if listed or index >= 0 else path
        message = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
        yield where, Reject(where, "invalid_json", f"{message}; records after this point are lost")

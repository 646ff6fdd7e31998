"""JSON inputs: JSONL, JSON lists, schema.org Recipe JSON-LD, recipe-scrapers and Recipe1M.

All of them end as a dict per recipe, mapped onto `Recipe` by `record_to_recipe`.
"""
from __future__ import annotations

import json
from typing import Any, Iterator

import ijson

from rrt.loaders.source import decoded_lines, open_binary
from rrt.recipe import Recipe, Reject

Record = tuple[str, dict | Reject]  # (location, raw record or the reason it is unusable)

_TITLE_KEYS = ("title", "name", "recipe_name", "headline")
_INGREDIENT_KEYS = ("ingredients", "recipeIngredient", "ingredient_lines", "ingredientLines")
_STEP_KEYS = ("steps", "instructions_list", "recipeInstructions", "instructions", "directions", "method")
_ID_KEYS = ("id", "@id", "identifier", "url", "canonical_url", "link")
_SOURCE_KEYS = ("source", "host", "site_name", "site")
_LIST_SHAPED = ("site_tags", "tags", "keywords", "recipeCategory", "recipeCuisine", "diets")


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
    if isinstance(record, list):
        return [r for item in record for r in expand_json_ld(item)] or [record]
    if isinstance(record, dict) and isinstance(record.get("@graph"), list):
        return [r for r in record["@graph"] if isinstance(r, dict) and is_schema_recipe(r)] or [record]
    return [record]


def record_to_recipe(record: dict, fallback_id: str, default_source: str) -> Recipe | Reject:
    """Map one recipe-shaped dict (any supported schema) onto a Recipe."""
    if not isinstance(record, dict):
        return Reject(fallback_id, "not_a_recipe", f"expected an object, got {type(record).__name__}")
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
        except (json.JSONDecodeError, RecursionError) as err:
            yield where, Reject(where, "invalid_json", str(err)[:200])
            continue
        for i, item in enumerate(expand_json_ld(value)):
            yield (where if i == 0 else f"{where}#{i}"), item


def read_json_document(path: str) -> Iterator[Record]:
    """A JSON list of recipes (streamed with ijson) or one object / JSON-LD document."""
    with open_binary(path) as handle:
        first = handle.read(4096).lstrip()[:1]
    index = -1
    try:
        with open_binary(path) as handle:
            if first == b"[":
                for index, item in enumerate(ijson.items(handle, "item", use_float=True)):
                    for j, recipe in enumerate(expand_json_ld(item)):
                        yield f"{path}[{index}]" + (f"#{j}" if j else ""), recipe
            else:
                for index, item in enumerate(ijson.items(handle, "", use_float=True)):
                    for j, recipe in enumerate(expand_json_ld(item)):
                        yield f"{path}#{j}", recipe
    except (ijson.common.IncompleteJSONError, ijson.common.JSONError, UnicodeDecodeError) as err:
        where = f"{path}[{index + 1}]" if first == b"[" else path
        message = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
        yield where, Reject(where, "invalid_json", f"{message}; records after this point are lost")

"""The rewrite API's request and response: parsing with limits, and the JSON answer.

Nothing here imports Ray, so the rules are tested without a running service. A request
either becomes a `RewriteRequest` or raises `ApiError` with the HTTP status to answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rrt.config import Limits
from rrt.recipes.clean import clean_text
from rrt.recipes.lexicon import CONSTRAINTS
from rrt.recipes.paper_format import BOS, PaperFormatError, parse_line, parse_recipe_parts
from rrt.recipes.recipe import Recipe
from rrt.recipes.tagger import parse_constraints, tag_recipe

MAX_NESTING = 8
# Violating spans an answer lists of the source and of the rewrite, each with its full count: a
# request of the largest size can name a food in nearly every word, and the list would be most of
# the answer.
VIOLATIONS_LISTED = 100


class ApiError(Exception):
    """A client-facing error: HTTP status, one-line message, optional details and headers."""

    def __init__(
        self, status: int, message: str, details: list | None = None, headers: dict | None = None
    ):
        super().__init__(message)
        self.status, self.message, self.details, self.headers = (
            status,
            message,
            details or [],
            headers or {},
        )

    def body(self) -> dict:
        """The JSON error body."""
        out = {"error": self.message}
        return {**out, "details": self.details} if self.details else out

    def response(self):
        """The error as a FastAPI JSON response."""
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


class RecipeIn(BaseModel):
    """A recipe as a client sends it."""

    model_config = ConfigDict(extra="forbid", strict=True)
    title: str
    ingredients: list[str] = Field(default_factory=list)
    steps: list[str]


class RequestIn(BaseModel):
    """The body of POST /v1/rewrite."""

    model_config = ConfigDict(extra="forbid")
    recipe: RecipeIn | None = None
    text: str | None = None
    constraint: str | list[str]
    candidates: int = Field(10, strict=True)
    constrained: bool = Field(False, strict=True)
    seed: int = Field(0, strict=True, ge=0, le=2**31 - 1)

    @field_validator("constraint")
    @classmethod
    def _known(cls, value):
        items = value.split(",") if isinstance(value, str) else value
        try:
            return parse_constraints(items)
        except (ValueError, AttributeError):
            raise ValueError(
                f"unknown constraint in {value!r}; valid values: {', '.join(CONSTRAINTS)}"
            ) from None


@dataclass
class RewriteRequest:
    """A checked request, ready for the engine."""

    recipe: dict
    constraints: list[str]
    candidates: int = 10
    constrained: bool = False
    seed: int = 0
    received: float = 0.0
    deadline: float = 0.0  # wall clock after which nobody waits for the answer (0: none)
    abandoned: bool = False  # set in the replica when the caller cancelled
    extra: dict = field(default_factory=dict)


def _depth(value, level: int = 0) -> int:
    if level > MAX_NESTING:
        return level
    if isinstance(value, dict):
        return max([_depth(v, level + 1) for v in value.values()] or [level + 1])
    if isinstance(value, list):
        return max([_depth(v, level + 1) for v in value] or [level + 1])
    return level


def _from_text(text: str) -> dict:
    """A recipe written in the paper's text format (a whole line or one recipe's parts)."""
    try:
        parts = parse_line(text).source if BOS in text else parse_recipe_parts(text)
    except (PaperFormatError, ValueError, IndexError) as err:
        raise ApiError(422, f"text is not a recipe in the paper's format: {err}") from None
    return {
        "title": parts.title,
        "ingredients": list(parts.ingredients),
        "steps": list(parts.steps),
    }


def _clean(text: str) -> str:
    # JSON may carry lone surrogates, which no tokenizer or encoder downstream accepts. Then the
    # batch loaders' cleaning: it also removes the paper's format tokens (<inst>, <tgt:vegan>,
    # <|endoftext|> ...), with which a step could forge the prompt's structure.
    return clean_text(text.encode("utf-8", "replace").decode("utf-8").replace("\x00", " "))


def _check_size(recipe: dict, limits: Limits) -> None:
    if len(recipe["steps"]) > limits.steps:
        raise ApiError(413, f"too many steps: {len(recipe['steps'])} (at most {limits.steps})")
    if any(len(step) > limits.step_chars for step in recipe["steps"]):
        raise ApiError(413, f"a step is longer than {limits.step_chars} characters")
    if len(recipe["ingredients"]) > limits.ingredients:
        raise ApiError(413, f"too many ingredient lines (at most {limits.ingredients})")
    if len(recipe["title"]) > limits.line_chars or any(
        len(x) > limits.line_chars for x in recipe["ingredients"]
    ):
        raise ApiError(
            413, f"a title or ingredient line is longer than {limits.line_chars} characters"
        )
    if not recipe["steps"] or not any(s.strip() for s in recipe["steps"]):
        raise ApiError(422, "the recipe has no steps to rewrite")


def parse_request(body: bytes, limits: Limits) -> RewriteRequest:
    """Check a raw request body against the limits and the schema; ApiError otherwise."""
    if len(body) > limits.body_bytes:
        raise ApiError(413, f"request body over {limits.body_bytes} bytes")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        # ValueError covers bad JSON, bad encodings and integers past Python's 4,300-digit limit.
        raise ApiError(400, "the body is not valid JSON") from None
    if _depth(data) > MAX_NESTING:
        raise ApiError(422, "the body is nested too deeply")
    if not isinstance(data, dict):
        raise ApiError(422, "the body must be a JSON object with recipe (or text) and constraint")
    try:
        checked = RequestIn.model_validate(data)
    except ValidationError as err:
        # A validator's own message, without the "Value error, " pydantic puts before it.
        details = [
            {
                "field": ".".join(map(str, e["loc"])),
                "problem": e["msg"].removeprefix("Value error, ")[:300],
            }
            for e in err.errors()[:10]
        ]
        raise ApiError(
            422,
            f"the request does not match the schema; valid constraints: {', '.join(CONSTRAINTS)}",
            details,
        ) from None
    if (checked.recipe is None) == (checked.text is None):
        raise ApiError(422, "send exactly one of recipe or text")
    if not 1 <= checked.candidates <= limits.candidates:
        raise ApiError(422, f"candidates must be 1-{limits.candidates}")
    if checked.text is not None and len(checked.text) > limits.body_bytes:
        raise ApiError(413, "text too long")
    recipe = _from_text(checked.text) if checked.text is not None else checked.recipe.model_dump()
    # Lines left empty by cleaning go, as in the batch loaders.
    recipe = {
        "title": _clean(recipe["title"]),
        "ingredients": [x for x in map(_clean, recipe["ingredients"]) if x],
        "steps": [x for x in map(_clean, recipe["steps"]) if x],
    }
    _check_size(recipe, limits)
    return RewriteRequest(
        recipe, checked.constraint, checked.candidates, checked.constrained, checked.seed
    )


def violations(recipe: dict, constraints: list[str]) -> list[dict]:
    """Every violating span of a recipe for the constraints (field, line index, term, span), in
    reading order."""
    tagged = tag_recipe(
        Recipe("request", recipe["title"], list(recipe["ingredients"]), list(recipe["steps"])),
        constraints,
    )
    seen, out = set(), []
    for constraint, found in tagged.violations.items():
        for v in found:
            key = (v.field, v.index, v.span)
            if key not in seen:
                seen.add(key)
                out.append(
                    {
                        "constraint": constraint,
                        "field": v.field,
                        "index": v.index,
                        "term": v.term,
                        "span": list(v.span),
                    }
                )
    # In reading order, so a capped list (`listed`) holds the recipe's first spans.
    fields = {"title": 0, "ingredients": 1, "steps": 2}
    return sorted(out, key=lambda v: (fields.get(v["field"], 3), v["index"], v["span"]))


def listed(name: str, spans: list[dict]) -> dict:
    """The first VIOLATIONS_LISTED spans under `name`, and how many there are under `name`_count."""
    return {name: spans[:VIOLATIONS_LISTED], f"{name}_count": len(spans)}


def response(request: RewriteRequest, record: dict, model: dict, timings: dict) -> dict:
    """The JSON answer for one rewritten recipe."""
    steps = []
    for entry in record["steps"]:
        n = entry["source_step"]
        step = {
            "source": request.recipe["steps"][n] if isinstance(n, int) else None,
            "rewrite": entry["candidates"][entry["chosen"]]["text"],
            "chosen": entry["chosen"],
            "candidates": [{"text": c["text"], "scores": c["scores"]} for c in entry["candidates"]],
            "decision": entry.get("decision"),
        }
        steps.append({**step, "note": entry["note"]} if entry.get("note") else step)
    return {
        "source": request.recipe,
        "recipe": record["rewrite"],
        "constraint": request.constraints,
        "steps": steps,
        "substitutions": record["substitutions"],
        "notes": record["notes"],
        **listed("violations_before", violations(request.recipe, request.constraints)),
        **listed("violations_after", violations(record["rewrite"], request.constraints)),
        "model": model,
        "timings": timings,
    }

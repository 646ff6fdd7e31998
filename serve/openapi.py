"""What the service's OpenAPI schema (GET /openapi.json) declares: the rewrite request's body,
the answers and every error status a route gives, so clients and tests/test_serve_fuzz.py can
hold the service to it. The routes read their bodies themselves (limits, timeouts), so FastAPI
cannot infer any of this from their signatures.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from rrt.config import load_settings
from rrt.recipes.lexicon import CONSTRAINTS
from serve.schema import VIOLATIONS_LISTED, RequestIn


class ErrorDetail(BaseModel):
    """One schema problem of a 422."""

    field: str
    problem: str


class ErrorOut(BaseModel):
    """Every error's body."""

    error: str
    details: list[ErrorDetail] = []


class ConstraintsOut(BaseModel):
    """GET /v1/constraints."""

    constraints: list[str]


class RecipeOut(BaseModel):
    """A recipe in an answer."""

    title: str
    ingredients: list[str]
    steps: list[str]


class CandidateOut(BaseModel):
    """A sampled rewrite of a step and its rule scores."""

    text: str
    scores: dict[str, float]


class StepOut(BaseModel):
    """A step's source, chosen rewrite, candidates and whose version it is."""

    source: str | None
    rewrite: str
    chosen: int
    candidates: list[CandidateOut]
    decision: Literal["kept", "guide", "model"] | None = None
    note: str | None = None


class SubstitutionOut(BaseModel):
    """A substitution the guide made."""

    field: str
    index: int
    original: str
    replacement: str
    constraint: str


class ViolationOut(BaseModel):
    """A span that breaks a constraint."""

    constraint: str
    field: str
    index: int
    term: str
    span: list[int]


class RewriteOut(BaseModel):
    """The answer of POST /v1/rewrite."""

    source: RecipeOut
    recipe: RecipeOut
    constraint: list[str]
    steps: list[StepOut]
    substitutions: list[SubstitutionOut]
    notes: list[str]
    violations_before: list[ViolationOut] = Field(
        description=f"The source's violating spans, the first {VIOLATIONS_LISTED}"
    )
    violations_before_count: int = Field(description="How many violating spans the source has")
    violations_after: list[ViolationOut] = Field(
        description=f"The rewrite's violating spans, the first {VIOLATIONS_LISTED}"
    )
    violations_after_count: int = Field(description="How many violating spans the rewrite has")
    model: dict[str, str | int | float | None]
    timings: dict[str, float]


def _errors(*statuses: tuple[int, str]) -> dict:
    return {status: {"model": ErrorOut, "description": text} for status, text in statuses}


_KEY = (401, "No or wrong API key (Authorization: Bearer <key>)")
_REACH = (
    403,
    "A Host a loopback service does not answer to, or a client off its machine when it has no key",
)


def constraints_responses() -> dict:
    """GET /v1/constraints: its answer and errors."""
    return {
        200: {"model": ConstraintsOut, "description": "The constraints a request may name"},
        **_errors(_KEY, _REACH),
    }


def page_responses() -> dict:
    """GET /: the page, or a refusal."""
    # Spelled out: FastAPI would give a `model` here the route's own media type, text/html.
    refusal = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}
    return {
        200: {
            "description": "The web page",
            "content": {"text/html": {"schema": {"type": "string"}}},
        },
        _REACH[0]: {"description": _REACH[1], "content": refusal},
    }


def rewrite_responses() -> dict:
    """POST /v1/rewrite: the answer and every status the route gives."""
    return {
        200: {"model": RewriteOut, "description": "The rewritten recipe"},
        **_errors(
            (400, "The body is not JSON"),
            _KEY,
            _REACH,
            (408, "The body arrived too slowly"),
            (413, "The body or the recipe is over a limit"),
            (415, "The body is not application/json"),
            (422, "The body breaks the schema, names an unknown constraint or has no steps"),
            (500, "The rewrite failed (the error is in the server's log)"),
            (503, "The rewriter is at capacity, too slow or restarting (see Retry-After)"),
        ),
    }


def _inline(schema, defs: dict):
    """A JSON schema with its local `$defs` references replaced by their definitions."""
    if isinstance(schema, dict):
        ref = schema.get("$ref", "")
        if ref.startswith("#/$defs/"):
            return _inline(defs[ref.rsplit("/", 1)[1]], defs)
        return {k: _inline(v, defs) for k, v in schema.items() if k != "$defs"}
    if isinstance(schema, list):
        return [_inline(v, defs) for v in schema]
    return schema


def request_schema() -> dict:
    """The JSON schema of the rewrite request's body, within the bundled default limits."""
    limits = load_settings().serve.limits
    schema = RequestIn.model_json_schema()
    schema = _inline(schema, schema.get("$defs", {}))
    props = schema["properties"]
    # The parser's own rules, which pydantic's schema cannot show: exactly one of recipe or text,
    # a recipe with a step to rewrite, and the limits (a deployment's serve.limits may differ;
    # beyond them a request gets 413 or 422).
    schema["oneOf"] = [{"required": ["recipe"]}, {"required": ["text"]}]
    props["text"] = {
        "type": "string",
        "description": "A recipe in the paper's text format, instead of recipe",
    }
    recipe = props["recipe"] = props["recipe"]["anyOf"][0]
    line = {"type": "string", "maxLength": limits.line_chars}
    recipe["properties"]["title"].update(line)
    recipe["properties"]["ingredients"].update(maxItems=limits.ingredients, items=line)
    recipe["properties"]["steps"].update(
        minItems=1,
        maxItems=limits.steps,
        items={"type": "string", "maxLength": limits.step_chars, "pattern": r"\S"},
    )
    props["candidates"].update(minimum=1, maximum=limits.candidates)
    names = "|".join(["all", *CONSTRAINTS])
    # The validator accepts a comma-separated string or a list of names: say so, with the names.
    props["constraint"] = {
        "description": "One or more constraints: a name, names joined by commas, or a list of names",
        "anyOf": [
            {"type": "string", "pattern": rf"^ *({names}) *(, *({names}) *)*$"},
            {
                "type": "array",
                "items": {"type": "string", "enum": ["all", *CONSTRAINTS]},
                "minItems": 1,
            },
        ],
    }
    return schema


def rewrite_openapi() -> dict:
    """POST /v1/rewrite's request body, which the route reads itself."""
    example = {
        "recipe": {
            "title": "Pancakes",
            "ingredients": ["2 eggs", "1 cup milk", "2 tbsp butter"],
            "steps": ["Whisk the eggs and milk.", "Fry in butter until golden."],
        },
        "constraint": ["vegan", "nut-free"],
        "candidates": 3,
        "constrained": True,
        "seed": 0,
    }
    body = {"schema": request_schema(), "example": example}
    return {"requestBody": {"required": True, "content": {"application/json": body}}}

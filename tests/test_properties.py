"""Properties over generated input: loaders account for every record and never raise; the
tagger never raises and every violation it reports points at its term."""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rrt.recipes.lexicon import CATEGORIES, CONSTRAINTS, NEGATIONS, SYNONYMS
from rrt.recipes.loaders import LoadReport, read_recipes
from rrt.recipes.recipe import Recipe
from rrt.recipes.tagger import normalise_term, tag_recipe

# Derandomized: the same examples on every run, so a failure in CI is never a matter of luck.
FAST = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# ---------------------------------------------------------------- loaders

KEYS = st.sampled_from(
    [
        "title",
        "name",
        "ingredients",
        "recipeIngredient",
        "steps",
        "recipeInstructions",
        "instructions",
        "id",
        "@id",
        "source",
        "metadata",
        "recipe",
        "@type",
        "text",
        "itemListElement",
        "tags",
        "diets",
    ]
) | st.text(max_size=6)
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
    | st.sampled_from(["Recipe", "HowToStep", "1 cup milk", "Stir well."])
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)
RECIPE_LIKE = st.fixed_dictionaries(
    {
        "title": st.text(max_size=20),
        "ingredients": st.lists(st.text(max_size=20), max_size=3),
        "steps": st.lists(st.text(max_size=30), max_size=4),
    },
    optional={"id": LEAVES},
)
# One top-level value that is exactly one record (a list or @graph would expand into several).
RECORDS = (
    RECIPE_LIKE | st.dictionaries(KEYS.filter(lambda k: k != "@graph"), VALUES, max_size=6) | LEAVES
)
FRAGMENTS = st.sampled_from(
    [
        b"{",
        b"}",
        b"[",
        b"]",
        b'"',
        b",",
        b":",
        b"\n",
        b"\r",
        b"\xff",
        b"\xef\xbb\xbf",
        b'"title"',
        b'"ingredients"',
        b'"steps"',
        b"1" * 40,
        b"\\ud800",
        b"\x1f\x8b",
        b"<|startoftext|>",
        b"<endoftitle>",
        b"<ing>",
        b"title,ingredients,directions\n",
    ]
)
NAMES = st.sampled_from(["r.jsonl", "r.json", "r.csv", "r.txt", "r.jsonl.gz"])


def _read(name: str, data: bytes) -> tuple[list[Recipe], LoadReport]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        report = LoadReport()
        recipes = list(read_recipes([str(path)], report))
    assert len(recipes) == report.kept
    assert report.read == report.kept + sum(report.rejected.values())
    for recipe in recipes:
        json.dumps(recipe.to_dict(), ensure_ascii=False).encode(
            "utf-8"
        )  # what `rrt convert` writes
    return recipes, report


@FAST
@given(
    name=NAMES,
    compress=st.booleans(),
    data=st.binary(max_size=2000)
    | st.lists(FRAGMENTS | st.binary(max_size=8), max_size=60).map(b"".join),
)
@example(name="r.jsonl", data=b"[" * 600 + b"]" * 600 + b"\n", compress=False)
@example(name="r.jsonl.gz", data=b'{"title": "a"}\n' * 400, compress=True)  # a gzip cut short
def test_any_bytes_give_recipes_or_counted_rejects(name, data, compress):
    whole = gzip.compress(data, mtime=0)
    _read(name, whole[: len(whole) // 2] if compress and name.endswith(".gz") else data)


@FAST
@given(records=st.lists(RECORDS, min_size=1, max_size=6), ascii_only=st.booleans())
def test_every_jsonl_line_is_a_recipe_or_a_reject(records, ascii_only):
    text = "".join(json.dumps(r, ensure_ascii=ascii_only) + "\n" for r in records)
    _, report = _read("r.jsonl", text.encode())
    assert report.read == len(records), report.rejected


@FAST
@given(records=st.lists(RECORDS, max_size=6))
@example(records=[{"id": 2**64}, {"title": "Cocoa"}])  # past yajl's 64-bit integers
def test_every_item_of_a_json_list_is_a_recipe_or_a_reject(records):
    _, report = _read("r.json", json.dumps(records).encode())
    assert report.read == len(records), report.rejected


CELL = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc")) | st.sampled_from('\n\r\t",\ufffd'),
    max_size=30,
) | st.lists(st.text(max_size=15), max_size=3).map(json.dumps)


@FAST
@given(rows=st.lists(st.tuples(CELL, CELL, CELL), max_size=6))
@example(rows=[("Caf\ufffd", '["1 cup milk"]', '["Warm.", "Stir."]')])
def test_every_csv_row_is_a_recipe_or_a_reject(rows):
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["title", "ingredients", "directions"])
    writer.writerows(rows)
    _, report = _read("r.csv", buffer.getvalue().encode("utf-8"))
    assert report.read == sum(any(cell.strip() for cell in row) for row in rows), report.rejected
    assert "unreadable_line" not in report.rejected  # every byte is UTF-8, U+FFFD included


# ---------------------------------------------------------------- tagger

_WORDS = sorted(
    {w for c in CATEGORIES.values() for w in c.terms + c.exceptions + c.modifiers + c.adjacent}
    | set(NEGATIONS)
    | {"or", "/", "-free", "-shaped", "optional", "(", ")", "'", '"', ",", "water", "vegan"}
)
LINE = st.lists(st.sampled_from(_WORDS) | st.text(max_size=6), max_size=12).map(" ".join) | st.text(
    max_size=60
)
_TERMS = {normalise_term(t) for c in CATEGORIES.values() for t in c.terms} | set(SYNONYMS.values())


def _spells(span: str, term: str) -> bool:
    """Whether a span is the term, one of its synonyms, or a plural of either, ignoring case."""
    for name in {term} | {alias for alias, target in SYNONYMS.items() if target == term}:
        body = r"[\s-]+".join(re.escape(w) for w in re.split(r"[\s-]+", name))
        if re.fullmatch(body + "(?:s|es)?", span, re.IGNORECASE) or re.fullmatch(
            body[:-1] + "ies", span, re.IGNORECASE
        ):
            return True
    return False


@FAST
@given(
    title=LINE,
    ingredients=st.lists(LINE, max_size=4),
    steps=st.lists(LINE, max_size=4),
    lenient=st.booleans(),
)
@example(
    title="Salmon and ſalmon",
    ingredients=["1 Kefir", "mİlk or milk"],
    steps=["Stir.", "Serve."],
    lenient=True,
)
def test_the_tagger_never_raises_and_every_span_names_its_term(title, ingredients, steps, lenient):
    recipe = Recipe("p", title, ingredients, steps)
    result = tag_recipe(recipe, CONSTRAINTS, lenient=lenient)
    assert set(result.valid) == set(CONSTRAINTS)
    lines = {"title": [title], "ingredients": ingredients, "steps": steps}
    for constraint, violations in result.violations.items():
        assert result.valid[constraint] is not bool(violations)
        for v in violations:
            line = lines[v.field][v.index]
            start, end = v.span
            assert v.text == line and 0 <= start < end <= len(line)
            # A list member names the head it shares: "ranch" of "ranch or blue cheese dressing".
            *lead, head = v.term.split()
            member = bool(lead) and normalise_term(line[start:end]) == " ".join(lead)
            assert v.term in _TERMS and (
                _spells(line[start:end], v.term) or (member and head in normalise_term(line[end:]))
            ), (line[start:end], v.term)

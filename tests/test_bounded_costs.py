"""Costs that must grow no faster than the input (hardening, second round). Each test compares
two sizes, never a wall clock."""

from __future__ import annotations

import contextlib
import gc
import gzip
import io
import json
import tempfile
import tracemalloc
from pathlib import Path

import pytest
from conftest import needs_dictionary
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rrt.recipes.loaders import LoadReport, read_recipes
from rrt.recipes.loaders.csv_records import MAX_FIELD_CHARS
from rrt.recipes.loaders.source import MAX_LINE_BYTES
from rrt.recipes.recipe import Recipe
from rrt.recipes.tagger import tag_recipe

# ---------------------------------------------------------------- rrt tag output


def _rrt_tag(step: str) -> str:
    """What `rrt tag --constraint all` prints for one recipe with this step (run in-process)."""
    from cli import main as cli

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "r.jsonl"
        path.write_text(
            json.dumps({"title": "Soup", "ingredients": ["1 cup water"], "steps": [step, "Serve."]})
        )
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            assert cli.main(["tag", "--constraint", "all", str(path)]) == 0, err.getvalue()
    return out.getvalue()


UNITS = st.lists(
    st.sampled_from(
        [
            "milk",
            "egg",
            "honey",
            "butter",
            "walnuts",
            "salmon",
            "bacon",
            "coconut milk",
            "stir",
            "the",
            "or",
            "/",
            ",",
            "vegan",
            "water",
        ]
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=6, deadline=None, derandomize=True, database=None)
@given(unit=UNITS.map(" ".join))
@example(unit="milk")
def test_rrt_tag_output_grows_in_proportion_to_the_line(unit):
    small, large = (_rrt_tag(" ".join([unit] * n)) for n in (60, 240))
    # Every violation named its whole line: four times the line gave sixteen times the output.
    assert len(large) <= 5 * len(small), (len(small), len(large))
    row = json.loads(large)
    step = " ".join([unit] * 240)
    assert large.count(json.dumps(step, ensure_ascii=False)[1:-1]) <= 1  # the line at most once
    for found in row["violations"].values():
        for violation in found:
            line = next(
                x["text"]
                for x in row["lines"]
                if (x["field"], x["index"]) == (violation["field"], violation["index"])
            )
            start, end = violation["span"]
            assert 0 <= start < end <= len(line) and violation["term"]


# ---------------------------------------------------------------- the tagger's word cache


def _retained_after_tagging(count: int, step_chars: int) -> int:
    """Bytes still allocated after tagging `count` recipes, each with its own long step."""
    body = "stir the pot with a spoon and " * (step_chars // 30)
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    for k in range(count):
        tag_recipe(Recipe(f"r{k}", "Soup", ["1 cup water"], [f"{k} {body}", "Serve."]))
    gc.collect()
    return tracemalloc.get_traced_memory()[0] - before


def test_tagging_a_stream_of_long_steps_holds_no_memory_per_recipe():
    tag_recipe(
        Recipe("warm", "Soup", ["1 cup water"], ["Stir.", "Serve."])
    )  # fill the per-category caches
    tracemalloc.start()
    try:
        few, many = _retained_after_tagging(30, 20_000), _retained_after_tagging(90, 20_000)
    finally:
        tracemalloc.stop()
    # The word cache kept 8,192 whole lines: sixty more steps of 20 KB kept 1.2 MB more.
    assert many - few < 100_000, (few, many)


# ---------------------------------------------------------------- JSON records past the limit


TITLE, INGS, STEPS = (
    "Hot Cocoa",
    ["2 cups milk", "2 tablespoons cocoa"],
    ["Warm the milk.", "Whisk in the cocoa."],
)
GOOD = json.dumps({"title": TITLE, "ingredients": INGS, "steps": STEPS})


def _load(path) -> tuple[list[Recipe], list, LoadReport]:
    report, rejects = LoadReport(), []
    report.on_reject = rejects.append
    return list(read_recipes([str(path)], report)), rejects, report


def _json_with_big_title(path: Path, chars: int, listed: bool) -> None:
    big = (
        '{"title": "'
        + "x" * chars
        + '", "ingredients": ["1 cup milk"], "steps": ["Warm.", "Stir."]}'
    )
    # Documents in a row are read as JSON, not JSONL, when the first is too long to sniff.
    text = f"[{GOOD}, {big}, {GOOD}]" if listed else f"{big}\n{GOOD}\n{GOOD}\n"
    path.write_bytes(gzip.compress(text.encode(), compresslevel=1, mtime=0))


def _peak_reading(path: Path) -> tuple[int, list[Recipe], list]:
    gc.collect()
    tracemalloc.start()
    try:
        recipes, rejects, _ = _load(path)
        return tracemalloc.get_traced_memory()[1], recipes, rejects
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("listed", [True, False])
def test_a_json_record_past_the_limit_is_one_reject_read_in_bounded_memory(tmp_path, listed):
    peaks = []
    for times in (2, 5):
        path = tmp_path / f"r{times}.json.gz"
        _json_with_big_title(path, times * MAX_LINE_BYTES, listed)
        peak, recipes, rejects = _peak_reading(path)
        assert [r.title for r in recipes] == [TITLE, TITLE]
        where = f"{path}[1]" if listed else f"{path}#0"
        assert [(r.reason, r.location) for r in rejects] == [("record_too_large", where)]
        peaks.append(peak)
    # Built whole, the record takes memory in proportion to its size: 2.5 times as much here.
    assert peaks[1] < 1.2 * peaks[0] + 1_000_000, peaks


def test_a_json_record_just_under_the_limit_still_loads(tmp_path):
    path = tmp_path / "r.json"
    title = "x" * (MAX_LINE_BYTES - 200)
    path.write_text(
        f'[{GOOD}, {{"title": "{title}", "ingredients": ["1 cup milk"], "steps": ["Warm.", "Stir."]}}]'
    )
    recipes, rejects, _ = _load(path)
    assert [len(r.title) for r in recipes] == [len(TITLE), len(title)] and not rejects


# ---------------------------------------------------------------- a CSV quote that never closes


def _csv_row(title: str) -> str:
    return f'"{title}","[""2 cups milk""]","[""Warm."", ""Whisk.""]"\n'


@pytest.mark.parametrize("times", [2, 5])
def test_an_unclosed_csv_quote_costs_one_reject_whatever_its_length(tmp_path, times):
    prose = (
        "Stir the milk, then the cocoa, and whisk it well until smooth; serve hot, with cream.\n"
    )
    swallowed = prose * (times * MAX_FIELD_CHARS // len(prose))
    path = tmp_path / "r.csv"
    path.write_text(
        "title,ingredients,directions\n"
        + _csv_row("A")
        + '"Broken","[""x""]","'
        + swallowed
        + _csv_row("B")
    )
    recipes, rejects, report = _load(path)
    assert [r.title for r in recipes] == ["A", "B"]
    # Each line after the field limit was read as a row of its own: thousands of invalid_csv_row.
    assert [(r.reason, r.location) for r in rejects] == [("record_too_large", f"{path}:3")], (
        report.rejected
    )
    assert f"read on from line {3 + swallowed.count(chr(10))}" in rejects[0].detail


# ---------------------------------------------------------------- caches bounded by size


def _long_word(k: int, letters: int) -> str:
    """A word of `letters` letters, distinct for each k (k in base 26 at its end)."""
    tail = ""
    while True:
        k, digit = divmod(k, 26)
        tail += chr(ord("a") + digit)
        if not k:
            return "q" * (letters - len(tail)) + tail


def _held_after(count: int, call) -> int:
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    for k in range(count):
        call(k)
    gc.collect()
    return tracemalloc.get_traced_memory()[0] - before


def _disguised_long_words():
    from rrt.modelling.selection import disguised_foods, step_context

    ctx = step_context(Recipe("r", "Soup", ["1 cup water"], ["Stir.", "Serve."]), 0, ["vegan"])
    # "egg" first: the hidden food is found at the first cut, so a long word costs little.
    return lambda k: disguised_foods("Stir the egg" + _long_word(k, 2000), ctx)


def _long_ingredient_names():
    from rrt.recipes.ingredients import step_ingredients

    # A name of a few words in a new order each time: the words' own cache stays as it is.
    words = ["zorba", "quill", "fennel", "tansy", "borage", "lovage", "sorrel", "chervil"]

    def call(k: int) -> None:
        digits = [int(d) for d in oct(k)[2:]]
        name = " ".join([words[d] for d in digits] + words * 9)  # an ingredient line's length
        step_ingredients("Stir the fennel.", [name])

    return call


@needs_dictionary
@pytest.mark.parametrize(
    "calls",
    [_disguised_long_words, _long_ingredient_names],
    ids=["dictionary words", "ingredient names"],
)
def test_a_stream_of_long_keys_grows_no_cache(calls):
    call = calls()
    call(0)  # every cache and table the call uses, made once
    tracemalloc.start()
    try:
        few, many = _held_after(10, call), _held_after(50, call)
    finally:
        tracemalloc.stop()
    # Each long key cached would hold its length: forty more, tens of kilobytes or more.
    assert many - few < 15_000, (few, many)

"""Loaders: every corpus format, cleaning, the keep/drop rule, and bad input."""

from __future__ import annotations

import csv
import gzip
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rrt.recipes.clean import clean_text
from rrt.recipes.loaders import LoadReport, detect_format, expand_inputs, read_recipes
from rrt.recipes.loaders.paper_text import read_paper_pairs

TITLE, INGS, STEPS = (
    "Hot Cocoa",
    ["2 cups milk", "2 tablespoons cocoa"],
    ["Warm the milk.", "Whisk in the cocoa."],
)


def _load(path, **kw):
    report = LoadReport()
    rejects = []
    report.on_reject = rejects.append
    return list(read_recipes([str(path)], report, **kw)), rejects, report


def _check(recipes):
    assert len(recipes) == 1
    recipe = recipes[0]
    assert (recipe.title, recipe.ingredients, recipe.steps) == (TITLE, INGS, STEPS)
    return recipe


def test_jsonl(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(
        json.dumps({"id": "a", "title": TITLE, "ingredients": INGS, "steps": STEPS}) + "\n"
    )
    assert _check(_load(path)[0]).id == "a"


def test_json_list_streams_items(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps([{"title": TITLE, "ingredients": INGS, "steps": STEPS}]))
    assert detect_format(str(path)) == "json"
    _check(_load(path)[0])


def test_schema_org_json_ld_with_graph_and_sections(tmp_path):
    doc = {
        "@context": "https://schema.org",
        "@graph": [
            {"@type": "WebPage", "name": "not a recipe"},
            {
                "@type": ["Recipe"],
                "name": TITLE,
                "recipeIngredient": INGS,
                "url": "https://example.org/cocoa",
                "recipeInstructions": [
                    {
                        "@type": "HowToSection",
                        "name": "Make it",
                        "itemListElement": [
                            {"@type": "HowToStep", "text": STEPS[0]},
                            {"@type": "HowToStep", "text": STEPS[1]},
                        ],
                    }
                ],
            },
        ],
    }
    path = tmp_path / "page.json"
    path.write_text(json.dumps(doc))
    assert _check(_load(path)[0]).id == "https://example.org/cocoa"


def test_recipe_scrapers_json(tmp_path):
    path = tmp_path / "scraped.json"
    path.write_text(
        json.dumps(
            {
                "title": TITLE,
                "ingredients": INGS,
                "instructions_list": STEPS,
                "instructions": "\n".join(STEPS),
                "host": "example.org",
            }
        )
    )
    assert _check(_load(path)[0]).source == "example.org"


def test_recipe1m_layer1(tmp_path):
    path = tmp_path / "layer1.json"
    path.write_text(
        json.dumps(
            [
                {
                    "id": "000018c8a5",
                    "title": TITLE,
                    "partition": "train",
                    "ingredients": [{"text": t} for t in INGS],
                    "instructions": [{"text": t} for t in STEPS],
                }
            ]
        )
    )
    recipe = _check(_load(path)[0])
    assert recipe.id == "000018c8a5" and recipe.metadata["partition"] == "train"


def test_recipenlg_csv(tmp_path):
    path = tmp_path / "full_dataset.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["", "title", "ingredients", "directions", "link", "source", "NER"])
        writer.writerow(
            [0, TITLE, json.dumps(INGS), json.dumps(STEPS), "example.org/x", "Gathered", "[]"]
        )
    _check(_load(path)[0])


def test_foodcom_csv_with_python_lists(tmp_path):
    path = tmp_path / "RAW_recipes.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["name", "id", "minutes", "steps", "ingredients", "n_steps"])
        writer.writerow(["hot cocoa", 42, 5, repr([s.lower() for s in STEPS]), repr(INGS), 2])
    recipe = _load(path)[0][0]
    assert recipe.id == "food.com:42" and recipe.ingredients == INGS and len(recipe.steps) == 2


def test_paper_format_both_spellings_and_pairing(tmp_path):
    body = f"{TITLE} <endoftitle> {' <ing> '.join(INGS)} <endofings> {' <inst> '.join(STEPS)} <endofinst>"
    vegan = body.replace("milk", "oat milk")
    path = tmp_path / "pairs.txt"
    path.write_text(
        f"<|startoftext|> <src:non-vegan> {body} <tgt:vegan> {vegan} <|endoftext|>\n"
        f"<|startoftext|> <source:vegan> {vegan} <target:non-vegan> {body} <|endoftext|>\n"
    )
    recipes, rejects, _ = _load(path)
    assert len(recipes) == 2 and [r.reason for r in rejects] == ["duplicate_recipe"] * 2
    pairs = list(read_paper_pairs(str(path)))
    assert [(p.source_tag, p.target_tag, p.constraint) for p in pairs] == [
        ("non-vegan", "vegan", "vegan"),
        ("vegan", "non-vegan", "vegan"),
    ]
    assert pairs[0].target.ingredients[0] == "2 cups oat milk"


def test_gzip_and_folder_inputs(tmp_path):
    with gzip.open(tmp_path / "r.jsonl.gz", "wt") as handle:
        handle.write(json.dumps({"title": TITLE, "ingredients": INGS, "steps": STEPS}) + "\n")
    (tmp_path / "README").write_text("not data")
    assert [p.endswith("r.jsonl.gz") for p in expand_inputs([str(tmp_path)])] == [True]
    _check(_load(tmp_path / "r.jsonl.gz")[0])


def test_cleaning_fixes_mojibake_html_and_whitespace():
    assert clean_text("Preheat the oven to 325Â°F.") == "Preheat the oven to 325°F."
    assert clean_text("Mix &amp; <b>stir</b>\n\n  well") == "Mix & stir well"
    assert clean_text("Add 1&frac12; cups") == "Add 1½ cups"


CONTROLS = st.characters(codec="utf-8", categories=["Cc"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=8), CONTROLS, st.sampled_from(["\x1b]0;", "&#x9b;"]))))
def test_cleaned_text_holds_no_control_character(parts):
    # An ASCII line kept its escapes before: a terminal showing it would obey them.
    text = clean_text("".join(parts))
    assert not any(0 <= ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in text), repr(text)


def test_cleaning_drops_a_terminal_escape_whole_from_any_line():
    assert clean_text("Stir \x1b[31mwell\x1b[0m.\x07") == clean_text("Stir well.")
    assert clean_text("Café \x1b[31mau lait\x1b[0m") == "Café au lait"


@pytest.mark.parametrize(
    "record,reason",
    [
        ({"title": "", "ingredients": INGS, "steps": STEPS}, "no_title"),
        ({"title": TITLE, "ingredients": [" ", ""], "steps": STEPS}, "no_ingredients"),
        ({"title": TITLE, "ingredients": INGS, "steps": ["Only one step."]}, "too_few_steps"),
        ({"foo": 1}, "not_a_recipe"),
        ("just a string", "not_a_recipe"),
    ],
)
def test_drop_rules_reject_with_reason(tmp_path, record, reason):
    path = tmp_path / "r.jsonl"
    good = {"title": TITLE, "ingredients": INGS, "steps": STEPS}
    path.write_text(json.dumps(record) + "\n" + json.dumps(good) + "\n")
    recipes, rejects, report = _load(path)
    assert len(recipes) == 1 and [r.reason for r in rejects] == [reason]
    assert rejects[0].location.endswith("r.jsonl:1") and report.read == 2


def _bad_inputs(tmp_path):
    good = json.dumps({"title": TITLE, "ingredients": INGS, "steps": STEPS})
    files = {
        "empty.jsonl": b"",
        "junk.jsonl": bytes(range(256)) * 20,
        "truncated.json": b"[" + good.encode() + b', {"title": "B", "ingr',
        "missing.csv": b"foo,bar\n1,2\n",
        "huge.jsonl": b'{"title": "' + b"x" * (5 * 1024 * 1024) + b'"}\n' + good.encode() + b"\n",
        "latin1.jsonl": '{"title": "Café"}\n'.encode("latin-1") + good.encode() + b"\n",
        "badrow.csv": b'title,ingredients,directions\n"A","[not json","[]"\n"B","[""x""]","[""a"", ""b""]"\n',
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    return files


def test_bad_inputs_are_counted_and_the_rest_come_through(tmp_path):
    _bad_inputs(tmp_path)
    report = LoadReport()
    recipes = list(read_recipes(expand_inputs([str(tmp_path)]), report))
    # truncated.json, huge.jsonl, latin1.jsonl and badrow.csv each keep their good record
    assert len(recipes) == 4
    assert report.rejected == {
        "unreadable_file": 3,
        "unreadable_line": 1,  # latin1.jsonl
        "record_too_large": 1,  # huge.jsonl: a line over 4 MiB, as a CSV record over it
        "invalid_json": 1,
        "invalid_csv_row": 1,
    }


def test_a_missing_input_is_an_input_skipped_not_a_reject_and_the_others_still_load(tmp_path):
    (tmp_path / "good.jsonl").write_text(GOOD + "\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "README").write_text("not data")
    specs = [
        str(tmp_path / "nope.jsonl"),
        str(tmp_path / "*.csv"),
        str(tmp_path / "empty"),
        str(tmp_path / "good.jsonl"),
    ]
    report, failures = LoadReport(), []
    report.on_reject = failures.append
    recipes = list(read_recipes(expand_inputs(specs), report))
    assert len(recipes) == 1 and report.rejected == {} and len(report.skipped) == 3
    assert report.read == 1 and report.summary().startswith("1 recipe kept, 0 rejected; 3 inputs")
    assert [f.location for f in failures] == specs[:3]
    assert [f.detail.split(" ")[0:2] for f in failures] == [
        ["no", "such"],
        ["no", "files"],
        ["no", "recipe"],
    ]


def test_a_record_without_an_id_is_named_by_its_line_as_its_rejects_are(tmp_path):
    path = tmp_path / "broken.csv"
    with path.open("w", newline="") as handle:
        rows = csv.writer(handle)
        rows.writerow(["title", "ingredients", "directions"])
        rows.writerow(["Bad", "", ""])
        rows.writerow([TITLE, json.dumps(INGS), json.dumps(STEPS)])
    recipes, rejects, _ = _load(path)
    assert [r.location for r in rejects] == [f"{path}:2"]
    assert _check(recipes).id == "broken.csv:3"


# ---------------------------------------------------------------- issue 18: hardening

GOOD = json.dumps({"title": TITLE, "ingredients": INGS, "steps": STEPS})


@pytest.mark.parametrize(
    "line,reason",
    [
        ("[" * 600 + "]" * 600, "not_a_recipe"),  # brackets only
        (
            json.dumps(
                {"title": TITLE, "ingredients": INGS, "steps": STEPS, "metadata": {"deep": 0}}
            ).replace("0", "[" * 600 + "]" * 600),
            "invalid_record",
        ),
        ('{"title": ' + "1" * 5000 + "}", "invalid_json"),  # int too long to convert
        (
            '{"title": "Cocoa", "ingredients": ["milk"], "steps": ["a", "b"], "note": "\\udc80"}',
            "invalid_record",
        ),
    ],
)
def test_a_record_that_breaks_the_reader_is_one_counted_reject(tmp_path, line, reason):
    path = tmp_path / "r.jsonl"
    path.write_text(line + "\n" + GOOD + "\n")
    recipes, rejects, report = _load(path)
    assert len(recipes) == 1 and [(r.reason, r.location) for r in rejects] == [
        (reason, f"{path}:1")
    ]
    assert report.read == 2


def test_a_json_document_nested_past_the_stack_is_rejected_and_the_rest_read(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("[" + "[" * 5000 + "]" * 5000 + ", " + GOOD + "]")
    recipes, rejects, _ = _load(path)
    assert len(recipes) == 1 and [r.reason for r in rejects] == ["not_a_recipe"]


def test_a_truncated_or_corrupt_gzip_is_one_input_failure_and_the_rest_still_load(tmp_path):
    # A second gzip member, cut short or corrupt, after a first one larger than format sniffing reads.
    whole = gzip.compress((GOOD + "\n").encode() * 100, mtime=0)
    corrupt = bytearray(whole)
    corrupt[10] ^= 0xFF  # the first byte of the deflate stream: zlib.error, not EOFError
    (tmp_path / "a_truncated.jsonl.gz").write_bytes(whole + whole[:20])
    (tmp_path / "b_corrupt.jsonl.gz").write_bytes(whole + bytes(corrupt))
    (tmp_path / "c_good.jsonl").write_text(GOOD + "\n")
    report = LoadReport()
    failures = []
    report.on_reject = failures.append
    recipes = list(read_recipes(expand_inputs([str(tmp_path)]), report))
    assert len(recipes) == 100 + 100 + 1  # what came before each failure, and the next input
    assert [r.reason for r in failures] == ["unreadable_file"] * 2
    assert "EOFError" in failures[0].detail and "zlib.error" in failures[1].detail
    assert failures[0].detail.startswith(str(tmp_path / "a_truncated.jsonl.gz"))


def test_an_unsupported_uri_scheme_is_one_input_failure(tmp_path):
    (tmp_path / "good.jsonl").write_text(GOOD + "\n")
    report = LoadReport()
    failures = []
    report.on_reject = failures.append
    recipes = list(
        read_recipes(["ftp://example.org/recipes.jsonl", str(tmp_path / "good.jsonl")], report)
    )
    assert len(recipes) == 1 and [r.reason for r in failures] == ["unreadable_file"]
    assert "unsupported URI scheme 'ftp'" in failures[0].detail


def _csv(path, *rows: str) -> None:
    path.write_bytes(("title,ingredients,directions\n" + "".join(rows)).encode())


def _row(title: str) -> str:
    return f'"{title}","[""2 cups milk""]","[""Warm."", ""Whisk.""]"\n'


def test_an_unclosed_quote_is_one_reject_and_the_rows_after_it_still_load(tmp_path):
    from rrt.recipes.loaders.csv_records import MAX_FIELD_CHARS

    path = tmp_path / "r.csv"
    # Without a field limit the open quote swallows every row after it, whole, into one field.
    _csv(path, _row("A"), '"Broken,' + "x" * (MAX_FIELD_CHARS + 10) + "\n", _row("B"))
    recipes, rejects, _report = _load(path)
    assert [r.title for r in recipes] == ["A", "B"]
    assert [(r.reason, r.location) for r in rejects] == [("record_too_large", f"{path}:3")]
    assert csv.field_size_limit() == MAX_FIELD_CHARS


def test_a_line_past_the_row_bound_is_rejected_without_being_read_whole(tmp_path):
    from rrt.recipes.loaders.csv_records import MAX_FIELD_CHARS
    from rrt.recipes.loaders.source import MAX_LINE_BYTES

    path = tmp_path / "r.csv"
    fields = ",".join(["y" * (MAX_FIELD_CHARS - 1)] * (MAX_LINE_BYTES // MAX_FIELD_CHARS + 1))
    _csv(path, _row("A"), fields + "\n", _row("B"))
    recipes, rejects, _ = _load(path)
    assert [r.title for r in recipes] == ["A", "B"]
    assert [(r.reason, r.location) for r in rejects] == [("record_too_large", f"{path}:3")]


def test_a_real_replacement_character_is_text_and_bad_bytes_are_not(tmp_path):
    path = tmp_path / "r.csv"
    path.write_bytes(
        b"title,ingredients,directions\n"
        + _row("Caf\ufffd Cocoa").encode()
        + _row("Caf\xe9").encode("latin-1")
        + _row("B").encode()
    )
    recipes, rejects, _ = _load(path)
    assert [r.title for r in recipes] == ["Caf\ufffd Cocoa", "B"]
    assert [(r.reason, r.location) for r in rejects] == [("unreadable_line", f"{path}:3")]


def test_what_rrt_substitute_writes_reads_back_as_recipes_with_their_id(tmp_path):
    path = tmp_path / "substituted.jsonl"
    path.write_text(
        json.dumps(
            {
                "id": "cocoa-1",
                "constraints": ["vegan"],
                "recipe": {"title": TITLE, "ingredients": INGS, "steps": STEPS},
                "substitutions": [{"term": "milk", "replacement": "soymilk"}],
            }
        )
        + "\n"
    )
    recipe = _check(_load(path)[0])
    assert recipe.id == "cocoa-1"


def _stdin(monkeypatch, data: bytes) -> None:
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


@pytest.mark.parametrize("compress", [False, True])
def test_dash_reads_standard_input_once(monkeypatch, compress):
    data = (GOOD + "\n").encode() * 2
    _stdin(monkeypatch, gzip.compress(data) if compress else data)
    assert expand_inputs(["-"]) == ["-"]
    report = LoadReport()
    assert len(list(read_recipes(["-", "-"], report))) == 2
    assert report.rejected == {"unreadable_file": 1}  # a pipe cannot be read twice


def test_a_csv_on_standard_input_is_known_by_its_header(monkeypatch):
    _stdin(monkeypatch, b"title,ingredients,directions\n" + _row("A").encode())
    assert detect_format("-") == "csv"
    assert [r.title for r in read_recipes(["-"])] == ["A"]


# ---------------------------------------------------------------- issue 49: one recipe, one count


def _recipe_line(rid: str, title: str = TITLE) -> str:
    return json.dumps({"id": rid, "title": title, "ingredients": INGS, "steps": STEPS}) + "\n"


def test_a_duplicate_id_across_inputs_is_read_once_and_the_first_is_kept(tmp_path):
    (tmp_path / "a.jsonl").write_text(_recipe_line("r1") + _recipe_line("r2"))
    (tmp_path / "b.jsonl").write_text(_recipe_line("r2", "Other Cocoa") + _recipe_line("r3"))
    report, rejects = LoadReport(), []
    report.on_reject = rejects.append
    recipes = list(read_recipes(expand_inputs([str(tmp_path)]), report))
    assert [r.id for r in recipes] == ["r1", "r2", "r3"] and recipes[1].title == TITLE
    assert report.read == 4 and report.kept == 3 and report.rejected == {"duplicate_id": 1}
    (dup,) = rejects
    assert dup.location == f"{tmp_path / 'b.jsonl'}:1" and dup.record_id == "r2"
    assert "'r2'" in dup.detail and str(tmp_path / "a.jsonl") in dup.detail


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.sampled_from("abcdef"), max_size=6), min_size=1, max_size=4))
def test_every_id_is_kept_once_whatever_the_inputs_hold(tmp_path_factory, files):
    folder = tmp_path_factory.mktemp("dups")
    for number, ids in enumerate(files):
        (folder / f"{number}.jsonl").write_text("".join(_recipe_line(i) for i in ids))
    report = LoadReport()
    kept = [r.id for r in read_recipes(expand_inputs([str(folder)]), report)]
    ordered = [i for ids in files for i in ids]
    assert kept == list(dict.fromkeys(ordered))  # each id once, in first-read order
    assert report.rejected.get("duplicate_id", 0) == len(ordered) - len(kept)

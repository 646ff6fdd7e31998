"""Loaders: every corpus format, cleaning, the keep/drop rule, and bad input."""
from __future__ import annotations

import csv
import gzip
import json

import pytest

from rrt.clean import clean_text
from rrt.loaders import LoadReport, detect_format, expand_inputs, read_recipes
from rrt.loaders.paper_text import read_paper_pairs
from rrt.loaders.source import InputError

TITLE, INGS, STEPS = "Hot Cocoa", ["2 cups milk", "2 tablespoons cocoa"], ["Warm the milk.", "Whisk in the cocoa."]


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
    path.write_text(json.dumps({"id": "a", "title": TITLE, "ingredients": INGS, "steps": STEPS}) + "\n")
    assert _check(_load(path)[0]).id == "a"


def test_json_list_streams_items(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps([{"title": TITLE, "ingredients": INGS, "steps": STEPS}]))
    assert detect_format(str(path)) == "json"
    _check(_load(path)[0])


def test_schema_org_json_ld_with_graph_and_sections(tmp_path):
    doc = {"@context": "https://schema.org", "@graph": [
        {"@type": "WebPage", "name": "not a recipe"},
        {"@type": ["Recipe"], "name": TITLE, "recipeIngredient": INGS, "url": "https://example.org/cocoa",
         "recipeInstructions": [{"@type": "HowToSection", "name": "Make it", "itemListElement": [
             {"@type": "HowToStep", "text": STEPS[0]}, {"@type": "HowToStep", "text": STEPS[1]}]}]}]}
    path = tmp_path / "page.json"
    path.write_text(json.dumps(doc))
    assert _check(_load(path)[0]).id == "https://example.org/cocoa"


def test_recipe_scrapers_json(tmp_path):
    path = tmp_path / "scraped.json"
    path.write_text(json.dumps({"title": TITLE, "ingredients": INGS, "instructions_list": STEPS,
                                "instructions": "\n".join(STEPS), "host": "example.org"}))
    assert _check(_load(path)[0]).source == "example.org"


def test_recipe1m_layer1(tmp_path):
    path = tmp_path / "layer1.json"
    path.write_text(json.dumps([{"id": "000018c8a5", "title": TITLE, "partition": "train",
                                 "ingredients": [{"text": t} for t in INGS],
                                 "instructions": [{"text": t} for t in STEPS]}]))
    recipe = _check(_load(path)[0])
    assert recipe.id == "000018c8a5" and recipe.metadata["partition"] == "train"


def test_recipenlg_csv(tmp_path):
    path = tmp_path / "full_dataset.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["", "title", "ingredients", "directions", "link", "source", "NER"])
        writer.writerow([0, TITLE, json.dumps(INGS), json.dumps(STEPS), "example.org/x", "Gathered", "[]"])
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
    path.write_text(f"<|startoftext|> <src:non-vegan> {body} <tgt:vegan> {vegan} <|endoftext|>\n"
                    f"<|startoftext|> <source:vegan> {vegan} <target:non-vegan> {body} <|endoftext|>\n")
    recipes, rejects, _ = _load(path)
    assert len(recipes) == 2 and [r.reason for r in rejects] == ["duplicate_recipe"] * 2
    pairs = list(read_paper_pairs(str(path)))
    assert [(p.source_tag, p.target_tag, p.constraint) for p in pairs] == [
        ("non-vegan", "vegan", "vegan"), ("vegan", "non-vegan", "vegan")]
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


@pytest.mark.parametrize("record,reason", [
    ({"title": "", "ingredients": INGS, "steps": STEPS}, "no_title"),
    ({"title": TITLE, "ingredients": [" ", ""], "steps": STEPS}, "no_ingredients"),
    ({"title": TITLE, "ingredients": INGS, "steps": ["Only one step."]}, "too_few_steps"),
    ({"foo": 1}, "not_a_recipe"),
    ("just a string", "not_a_recipe"),
])
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
        "truncated.json": b'[' + good.encode() + b', {"title": "B", "ingr',
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
    assert report.rejected == {"unreadable_file": 3, "unreadable_line": 2, "invalid_json": 1,
                               "invalid_csv_row": 1}


def test_missing_input_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        expand_inputs([str(tmp_path / "nope.jsonl")])
    with pytest.raises(InputError, match="no files match"):
        expand_inputs([str(tmp_path / "*.csv")])

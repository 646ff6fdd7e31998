"""The `rrt` command line, run as a user would."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys

import pytest
from conftest import SAMPLE
from test_loaders import _bad_inputs

from serve.openapi import SubstitutionOut


def rrt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args], capture_output=True, text=True, timeout=120
    )


def test_help_lists_every_command():
    out = rrt("--help")
    assert out.returncode == 0
    for name in ("convert", "tag", "substitute", "ingredients", "survey"):
        assert name in out.stdout


def test_convert_writes_jsonl_and_rejects(tmp_path):
    _bad_inputs(tmp_path)
    rejects = tmp_path / "rejects.out"
    out = rrt("convert", str(tmp_path), "--rejects", str(rejects))
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(rows) == 4 and all({"id", "title", "ingredients", "steps"} <= set(r) for r in rows)
    reasons = [json.loads(line)["reason"] for line in rejects.read_text().splitlines()]
    assert len(reasons) == 7
    assert "Traceback" not in out.stderr and "empty file" in out.stderr


def test_tag_prints_validity_and_violations():
    out = rrt("tag", "--constraint", "vegan,nut-free", str(SAMPLE))
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(rows) >= 120 and set(rows[0]["valid"]) == {"vegan", "nut-free"}
    bad = next(r for r in rows if r["violations"].get("vegan"))
    first = bad["violations"]["vegan"][0]
    assert {"term", "field", "index", "span"} <= set(first) and "text" not in first
    line = next(
        x["text"]
        for x in bad["lines"]
        if (x["field"], x["index"]) == (first["field"], first["index"])
    )
    assert line[slice(*first["span"])]


def test_substitute_and_ingredients():
    out = rrt("substitute", "--constraint", "vegan", str(SAMPLE))
    row = json.loads(out.stdout.splitlines()[0])
    assert set(row) == {"id", "constraints", "recipe", "substitutions"} and row["substitutions"]
    # The words rewrites.jsonl and the service use for a substitution.
    assert set(row["substitutions"][0]) == set(SubstitutionOut.model_fields)
    out = rrt("ingredients", str(SAMPLE))
    row = json.loads(out.stdout.splitlines()[0])
    assert row["ingredients"][0]["name"] and isinstance(row["steps"], list)


def test_survey_writes_its_measurements(tmp_path):
    out = rrt("survey", str(SAMPLE), "--output", str(tmp_path))
    assert out.returncode == 0 and "vegan" in out.stdout
    data = json.loads((tmp_path / "survey.json").read_text())
    assert data["recipes"] >= 120 and data["constraints"]["vegan"]["invalid"] >= 10


def test_errors_are_one_clear_line():
    out = rrt("tag", "--constraint", "keto", str(SAMPLE))
    assert (
        out.returncode == 2
        and out.stderr.startswith("rrt: error:")
        and "Traceback" not in out.stderr
    )
    assert len(out.stderr.strip().splitlines()) == 1


def _rewrite_record(title: str, steps: list[str], rewritten: list[str]) -> dict:
    """A rewrites.jsonl record as jobs/rewrite.py writes it (the fields `rrt show` reads)."""
    return {
        "id": title,
        "constraint": "vegan",
        "system": "contextual_rule",
        "constrained": True,
        "source": {"title": title, "ingredients": ["1 cup milk"], "steps": steps},
        "rewrite": {
            "title": f"Vegan {title}",
            "ingredients": ["1 cup soymilk"],
            "steps": rewritten,
        },
    }


def test_show_prints_source_beside_rewrite_for_the_first_recipes(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    records = [
        _rewrite_record(
            f"Dish {i}",
            ["Warm the milk gently.", "Pour it over the oats."],
            ["Warm the soymilk gently.", "Pour it over the oats."],
        )
        for i in range(4)
    ]
    (run / "rewrites.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    out = rrt("show", str(run), "--recipes", "2", "--width", "40")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "Dish 0" in out.stdout and "Dish 1" in out.stdout and "Dish 2" not in out.stdout
    row = next(line for line in lines if line.startswith("1. Warm the milk"))
    assert row.index("|") == 41 and row.split("|")[1].strip() == "1. Warm the soymilk gently."
    assert any(
        line.startswith("• 1 cup milk") and line.endswith("• 1 cup soymilk") for line in lines
    )


def test_show_of_a_missing_or_empty_run_is_one_error_line(tmp_path):
    for target in (tmp_path / "nothing", tmp_path / "empty.jsonl"):
        if target.suffix:
            target.write_text("")
        out = rrt("show", str(target))
        assert (
            out.returncode == 2
            and out.stderr.startswith("rrt: error:")
            and len(out.stderr.splitlines()) == 1
        )
        assert "Traceback" not in out.stderr


class Terminal(io.StringIO):
    """An output stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


# C0 and C1 controls but tab and newline: what a terminal would obey.
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def test_show_escapes_a_run_files_controls_on_a_terminal_and_keeps_them_in_a_pipe(
    tmp_path, monkeypatch, capsys
):
    from cli import main as cli

    title = "Soup\x1b]0;owned\x07 \x9b2J"
    record = _rewrite_record(title, ["Warm the milk.\x1b[2J", "Serve."], ["Warm it.", "Serve."])
    run = tmp_path / "rewrites.jsonl"
    run.write_text(json.dumps(record) + "\n")
    assert cli.main(["show", str(run)]) == 0
    assert "Soup\x1b]0;owned\x07" in capsys.readouterr().out  # piped: the text as the file has it
    screen, errors = Terminal(), Terminal()
    monkeypatch.setattr(sys, "stdout", screen)
    monkeypatch.setattr(sys, "stderr", errors)
    assert cli.main(["show", str(run)]) == 0
    shown = screen.getvalue()
    assert not RAW_CONTROL.search(shown) and "Soup\\x1b]0;owned\\x07 \\x9b2J" in shown
    # An error line that quotes a path is escaped too.
    assert cli.main(["show", str(tmp_path / "gone\x1b[2J")]) == 2
    assert not RAW_CONTROL.search(errors.getvalue()) and "gone\\x1b[2J" in errors.getvalue()


def test_json_lines_escape_the_controls_json_leaves_raw(tmp_path, capsys):
    from cli import main as cli

    steps = ["Warm the milk.", "Serve it."]
    recipe = {"id": "r\x9b1", "title": "Soup", "ingredients": ["1 cup milk"], "steps": steps}
    recipe["tags"] = ["a\x9b\x7f"]
    (tmp_path / "r.jsonl").write_text(json.dumps(recipe) + "\n")
    assert cli.main(["convert", str(tmp_path / "r.jsonl")]) == 0
    line = capsys.readouterr().out
    assert not RAW_CONTROL.search(line)
    row = json.loads(line)
    assert row["id"] == "r\x9b1" and row["metadata"]["tags"] == ["a\x9b\x7f"]


def rrt_in(stdin: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


RECIPE_READERS = [
    ("convert",),
    ("tag", "--constraint", "vegan"),
    ("substitute", "--constraint", "vegan"),
    ("ingredients",),
    ("survey", "--constraint", "vegan"),
]


def _broken_inputs(tmp_path) -> list[str]:
    import gzip

    good = json.dumps(
        {
            "title": "Hot Cocoa",
            "ingredients": ["2 cups milk"],
            "steps": ["Warm the milk.", "Whisk."],
        }
    )
    (tmp_path / "nested.jsonl").write_text("[" * 600 + "]" * 600 + "\n" + good + "\n")
    (tmp_path / "cut.jsonl.gz").write_bytes(gzip.compress((good + "\n").encode())[:30])
    (tmp_path / "good.jsonl").write_text(good + "\n")
    return [
        str(tmp_path / "nested.jsonl"),
        str(tmp_path / "cut.jsonl.gz"),
        "ftp://example.org/r.jsonl",
        str(tmp_path / "good.jsonl"),
    ]


def test_a_bad_record_or_input_costs_only_itself_in_every_command(tmp_path, capsys):
    from cli import main as cli

    inputs = _broken_inputs(tmp_path)
    for command in RECIPE_READERS:
        assert cli.main([*command, *inputs]) == 0, command
        out = capsys.readouterr()
        warnings = [line for line in out.err.splitlines() if line.startswith("rrt: warning:")]
        assert len(warnings) == 2 and "cut.jsonl.gz" in warnings[0] and "ftp" in warnings[1], (
            out.err
        )
        assert f"rrt {command[0]}: 2 recipes kept, 3 rejected" in out.err, (
            out.err
        )  # named: two may share a pipe
        if command[0] != "survey":
            assert len(out.out.splitlines()) == 2
    out = rrt("convert", *inputs)  # as a user runs it
    assert (
        out.returncode == 0 and "Traceback" not in out.stderr and len(out.stdout.splitlines()) == 2
    )


def test_commands_compose_through_standard_input():
    substituted = rrt("substitute", "--constraint", "vegan", str(SAMPLE))
    assert substituted.returncode == 0
    for files in ((), ("-",)):
        out = rrt_in(substituted.stdout, "tag", "--constraint", "vegan", *files)
        assert out.returncode == 0 and "0 rejected" in out.stderr, out.stderr
        rows = [json.loads(line) for line in out.stdout.splitlines()]
        assert len(rows) == len(substituted.stdout.splitlines()) and all(
            r["valid"]["vegan"] for r in rows
        )
        assert rows[0]["id"] == json.loads(substituted.stdout.splitlines()[0])["id"]
    converted = rrt_in(SAMPLE.read_text(), "convert")
    again = rrt_in(converted.stdout, "convert", "-")
    assert again.stdout == converted.stdout and len(again.stdout.splitlines()) >= 120


def test_every_recipe_reader_documents_standard_input(capsys):
    from cli import main as cli

    for name in [c[0] for c in RECIPE_READERS] + ["align"]:
        with pytest.raises(SystemExit):
            cli.main([name, "--help"])
        assert "standard input" in capsys.readouterr().out, name


def test_no_input_from_a_terminal_is_one_error_line(monkeypatch, capsys):
    from cli import main as cli

    class Terminal:
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Terminal())
    assert cli.main(["convert"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rrt: error: no input") and len(err.splitlines()) == 1


def test_align_sets_section_headers_aside_and_keeps_what_the_pipeline_keeps(tmp_path):
    from rrt.config import load_settings
    from rrt.corpus.alignment import AlignSettings, kept_links, train_translation_table
    from rrt.corpus.pairing import link_scores
    from rrt.recipes.step_kinds import split_method

    source = {
        "id": "a",
        "title": "Pasta with Cream Sauce",
        "ingredients": ["200 g pasta", "1 cup cream", "2 tbsp butter", "1 clove garlic"],
        "steps": [
            "For the pasta:",
            "Boil the pasta in salted water until tender.",
            "Drain the pasta and keep warm.",
            "For the sauce:",
            "Melt the butter in a pan and fry the garlic.",
            "Stir in the cream and simmer until thick.",
            "Toss the pasta with the sauce and serve.",
        ],
    }
    target = {
        "id": "b",
        "title": "Vegan Pasta with Cream Sauce",
        "ingredients": ["200 g pasta", "1 cup oat cream", "2 tbsp olive oil", "1 clove garlic"],
        "steps": [
            "Cook the pasta in a large pot of salted boiling water until al dente.",
            "Drain well.",
            "For the sauce:",
            "Heat the olive oil in a skillet and cook the garlic until fragrant.",
            "Pour in the oat cream and let it bubble until thickened.",
            "Mix the pasta into the sauce and serve hot.",
        ],
    }
    paths = []
    for recipe in (source, target):
        paths.append(tmp_path / f"{recipe['id']}.json")
        paths[-1].write_text(json.dumps(recipe))
    out = rrt("align", *map(str, paths))
    assert out.returncode == 0, out.stderr
    table, aside = out.stdout.split("\nset aside, not steps (source):")
    assert "For the" not in table
    assert (
        "[header] before s0: For the pasta:" in aside
        and "[header] before s2: For the sauce:" in aside
    )
    assert "[header] before t2: For the sauce:" in aside.split("(target):")[1]
    # The links shown are the pipeline's: its steps, its link model, its threshold and fan-out bound.
    steps = [split_method(recipe["steps"])[0] for recipe in (source, target)]
    settings = AlignSettings.from_config(load_settings().alignment)
    scores, _ = link_scores(
        {"steps": steps[0]},
        {"steps": steps[1]},
        train_translation_table(
            [tuple(steps)],
            load_settings().alignment.vocab_size,
            load_settings().alignment.em_iterations,
        ),
        settings,
    )
    expected = [
        f"  s{link.source_step} -> "
        + ", ".join(f"t{j} @ {s:.1f}" for j, s in zip(link.target_steps, link.scores))
        for link in kept_links(scores, settings.link_threshold, settings.max_fanout)
    ]
    assert expected and out.stdout.rstrip().endswith("\n".join(expected))


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ("judge", "create"),
            "the following arguments are required: --rewrites (see rrt judge create --help)",
        ),
        (("tag", "--bogus"), "unrecognized arguments: --bogus"),
        (("nosuch",), "invalid choice: 'nosuch'"),
    ],
)
def test_a_bad_argument_is_one_error_line_without_a_usage_block(args, message, capsys):
    from cli import main as cli

    with pytest.raises(SystemExit) as ended:
        cli.main(list(args))
    err = capsys.readouterr().err
    assert (
        ended.value.code == 2
        and err.startswith("rrt: error: ")
        and message in err
        and err.count("\n") == 1
    )


# ---------------------------------------------------------------- issue 49: counts a user can trust


def _lines(path, *ids: str) -> None:
    path.write_text(
        "".join(
            json.dumps(
                {
                    "id": i,
                    "title": f"Cocoa {i}",
                    "ingredients": ["2 cups milk"],
                    "steps": ["Warm.", "Whisk."],
                }
            )
            + "\n"
            for i in ids
        )
    )


@pytest.mark.parametrize("command", RECIPE_READERS)
def test_the_same_recipes_twice_in_a_folder_are_counted_once(tmp_path, capsys, command):
    from cli import main as cli

    _lines(tmp_path / "recipes.jsonl", "a", "b", "c")
    (tmp_path / "split").mkdir()
    _lines(tmp_path / "split" / "part1.jsonl", "a", "b")
    _lines(tmp_path / "split" / "part2.jsonl", "c", "d")
    rejects = tmp_path / "rejects.out"
    assert cli.main([*command, str(tmp_path), "--rejects", str(rejects)]) == 0
    out = capsys.readouterr()
    assert f"rrt {command[0]}: 4 recipes kept, 3 rejected (duplicate_id=3)" in out.err
    warnings = [line for line in out.err.splitlines() if line.startswith("rrt: warning:")]
    assert len(warnings) == 1 and "3 recipes repeat an id" in warnings[0], out.err
    assert f"'a' at {tmp_path / 'split' / 'part1.jsonl'}:1" in warnings[0]
    dups = [json.loads(line) for line in rejects.read_text().splitlines()]
    assert [(d["reason"], d["record_id"]) for d in dups] == [("duplicate_id", i) for i in "abc"]
    if command[0] == "survey":
        assert "\n4 recipes in " in "\n" + out.out, out.out
    else:
        assert [json.loads(line)["id"] for line in out.out.splitlines()] == list("abcd")


def test_the_bundled_sample_folder_holds_each_recipe_once(capsys):
    from cli import main as cli

    assert cli.main(["survey", "--constraint", "vegan", str(SAMPLE.parent)]) == 0
    out = capsys.readouterr()
    assert "128 recipes kept, 0 rejected" in out.err and "40       88" in out.out, out.out


def test_a_missing_input_among_several_is_a_warning_and_an_input_skipped(tmp_path, capsys):
    from cli import main as cli

    _lines(tmp_path / "good.jsonl", "a")
    missing = str(tmp_path / "typo.jsonl")
    assert cli.main(["convert", missing, str(tmp_path / "good.jsonl")]) == 0
    out = capsys.readouterr()
    assert out.err.splitlines()[0] == f"rrt: warning: no such file: {missing}"
    assert f"rrt convert: 1 recipe kept, 0 rejected; 1 input skipped (no such file: {missing})" in (
        out.err
    )
    assert len(out.out.splitlines()) == 1
    # No input at all could be read: exit status 1, as the help says.
    assert cli.main(["convert", missing, str(tmp_path / "*.csv")]) == 1
    err = capsys.readouterr().err
    assert "2 inputs skipped" in err and "no files match" in err and "Traceback" not in err
    assert "Exit status" in cli.build_parser().format_help()


def test_outputs_read_as_inputs_say_once_what_a_recipe_input_is(tmp_path, capsys):
    from cli import main as cli

    (tmp_path / "stats.json").write_text(json.dumps({"recipes": 3, "rejected": 0}))
    (tmp_path / "rewrites.jsonl").write_text(
        json.dumps({"id": "a", "source": {"title": "A"}, "rewrite": {"title": "B"}}) + "\n"
    )
    (tmp_path / "rejects.jsonl").write_text("")
    assert cli.main(["tag", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    hints = [line for line in err.splitlines() if "recipe inputs are" in line]
    assert len(hints) == 1 and hints[0].startswith("rrt tag: no recipe found:"), err
    assert all(
        word in hints[0]
        for word in ("paper text", "JSONL", "JSON", "CSV", "Parquet", "rewrites.jsonl")
    )


def test_rrt_serve_of_a_model_path_that_does_not_exist_says_so(tmp_path, capsys):
    from cli import main as cli

    missing = str(tmp_path / "nope" / "model")
    assert cli.main(["serve", "--model", missing]) == 2
    assert capsys.readouterr().err.strip() == (
        f"rrt: error: {missing} does not exist; pass <train output>/model"
    )
    assert cli.main(["serve", "--model", str(tmp_path)]) == 2
    assert "holds no exported model" in capsys.readouterr().err

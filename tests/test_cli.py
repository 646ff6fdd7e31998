"""The `rrt` command line, run as a user would."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import SAMPLE
from test_loaders import _bad_inputs


def rrt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rrt.cli", *args], capture_output=True, text=True, timeout=120)


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
    assert {"term", "field", "index", "text"} <= set(bad["violations"]["vegan"][0])


def test_substitute_and_ingredients():
    out = rrt("substitute", "--constraint", "vegan", str(SAMPLE))
    row = json.loads(out.stdout.splitlines()[0])
    assert set(row) == {"id", "constraints", "recipe", "substitutions"} and row["substitutions"]
    out = rrt("ingredients", str(SAMPLE))
    row = json.loads(out.stdout.splitlines()[0])
    assert row["ingredients"][0]["name"] and isinstance(row["steps"], list)


def test_survey_writes_its_measurements(tmp_path):
    out = rrt("survey", str(SAMPLE), "--output", str(tmp_path))
    assert out.returncode == 0 and "vegan" in out.stdout
    data = json.loads((tmp_path / "survey.json").read_text())
    assert data["recipes"] >= 120 and data["constraints"]["vegan"]["invalid"] >= 10


def test_errors_are_one_clear_line():
    for args in (("tag", "--constraint", "keto", str(SAMPLE)), ("convert", "/nonexistent/x.jsonl")):
        out = rrt(*args)
        assert out.returncode == 2 and out.stderr.startswith("rrt: error:") and "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1

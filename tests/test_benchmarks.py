"""Every benchmark answers --help, and the paths under out/demo it defaults to are ones `make demo`
writes, so a benchmark run as its docstring says after `make demo` finds its inputs."""

from __future__ import annotations

import argparse
import json
import os
import re
import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = sorted((ROOT / "benchmarks").glob("*.py"))
DEMO = ROOT / "out" / "demo"


def demo_outputs() -> set[str]:
    """The folders the Makefile's demo target writes, as paths under out/demo."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"\$\(DEMO_OUT\)/([\w./-]+)", makefile))


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda path: path.name)
def test_a_benchmark_answers_help_and_defaults_to_what_make_demo_writes(path, monkeypatch, capsys):
    defaults = []
    add_argument = argparse.ArgumentParser.add_argument

    def recorded(parser, *args, **kwargs):
        action = add_argument(parser, *args, **kwargs)
        defaults.append(action.default)
        return action

    monkeypatch.setattr(argparse.ArgumentParser, "add_argument", recorded)
    monkeypatch.setattr(sys, "argv", [str(path), "--help"])
    monkeypatch.setattr(sys, "path", list(sys.path))  # what a benchmark puts there goes after
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(path), run_name="__main__")
    assert done.value.code in (0, None) and capsys.readouterr().out.startswith("usage: ")
    under_demo = [
        os.path.relpath(d, DEMO)
        for d in defaults
        if isinstance(d, str) and os.path.abspath(d).startswith(str(DEMO) + os.sep)
    ]
    outputs = demo_outputs()
    assert outputs and all(d in outputs for d in under_demo), (under_demo, sorted(outputs))


def test_edit_fidelity_reads_a_changed_step_after_the_cook_note_that_opens_it(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import quality

    source = {
        "id": "r1",
        "title": "Chicken stir-fry",
        "ingredients": ["1 lb chicken breasts", "1 onion"],
        "steps": ["Cut the chicken into strips.", "Slice the onion."],
    }
    rewrite = {
        "title": "Tofu stir-fry",
        "ingredients": ["1 lb tofu", "1 onion"],
        "steps": [
            "Press the tofu for 15 minutes before you start. Cut the tofu into strips.",
            "Slice the onion.",
        ],
    }
    record = {"id": "r1", "constraint": "vegetarian", "source": source, "rewrite": rewrite}
    (tmp_path / "rewrites.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    assert quality.edit_fidelity(str(tmp_path)) == {
        "untouched_steps_kept": 100.0,
        "changed_steps_same_action": 100.0,
    }

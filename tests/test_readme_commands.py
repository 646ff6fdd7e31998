"""The README's shell commands run as written after `make demo`.

Each fenced `bash` or `sh` block of README.md is, by the HTML comment on the line before it:

    (none)                                  run with `bash -e -o pipefail` in a folder laid out like
                                            the repository, where out/demo holds small stand-ins for
                                            what `make demo` writes; every command must succeed
    <!-- docs-test: parse-only: REASON -->  each `python jobs/X.py ...` line's flags are parsed by
                                            the job's own parser; nothing runs
    <!-- docs-test: skip: REASON -->        not run

The stand-ins: the sample's rewrites by the substitution guide under the demo's rewrite folder
names (testing.rewrite_runs), and a translation table learned from the sample's dishes. No Ray,
no model: the jobs are parse-only, since each starts a Ray and runs for a minute or more, and
their own tests run them. The docs/ pages' `python jobs/X.py` and `rrt` commands are parsed the
same way.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import pytest

from rrt.corpus.alignment import train_translation_table
from rrt.recipes.loaders import read_recipes
from testing.rewrite_runs import write_runs

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SAMPLE = ROOT / "data" / "sample" / "recipes.jsonl"
MARKER = re.compile(r"<!--\s*docs-test:\s*(?P<mode>[a-z-]+)\s*:\s*(?P<reason>.*?)\s*-->")
MODES = ("run", "parse-only", "skip")
# What `make demo` writes that a README command reads: the rewrite runs (stand-ins by the guide).
DEMO_REWRITES = ("rule_based", "retrieval", "grounded_rule", "grounded_rule_constrained")
BLOCK_TIMEOUT_S = 120


@dataclass
class Block:
    """One fenced shell block of a Markdown file."""

    line: int  # the line of its opening fence, 1-based
    code: str
    mode: str  # run | parse-only | skip, or what an unknown marker said
    reason: str


def shell_blocks(text: str) -> list[Block]:
    """The fenced `bash`/`sh` blocks of a Markdown text, each with the marker on the line before it."""
    blocks, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        fence = re.match(r"^```\s*(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
        if fence.group(1) in ("bash", "sh"):
            before = next((line for line in reversed(lines[:i]) if line.strip()), "")
            marked = MARKER.search(before)
            blocks.append(
                Block(
                    i + 1,
                    "\n".join(lines[i + 1 : end]),
                    marked.group("mode") if marked else "run",
                    marked.group("reason") if marked else "",
                )
            )
        i = end + 1
    return blocks


def commands(code: str) -> list[str]:
    """The block's commands, continuation lines joined, blank and comment-only lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [
        line.strip()
        for line in joined.split("\n")
        if line.strip() and not line.lstrip().startswith("#")
    ]


def demo_tree(root: Path) -> Path:
    """A folder laid out like the repository after `make demo`: every top-level entry linked, and
    out/demo holding the stand-ins."""
    for entry in ROOT.iterdir():
        if entry.name not in ("out", ".git"):
            (root / entry.name).symlink_to(entry)
    demo = root / "out" / "demo"
    rewrites = demo / "rewrites"
    write_runs(str(SAMPLE), str(rewrites), DEMO_REWRITES)
    constrained = rewrites / "grounded_rule_constrained"
    for name in ("rewrites.jsonl", "run.json"):  # as jobs/rewrite.py --constrained labels its run
        path = constrained / name
        path.write_text(
            path.read_text()
            .replace('"system": "grounded_rule_constrained"', '"system": "grounded_rule"')
            .replace('"constrained": false', '"constrained": true')
        )
    recipes = list(read_recipes([str(SAMPLE)]))
    dishes: dict[str, list] = {}
    for recipe in recipes:
        dishes.setdefault(recipe.id.rsplit("-", 1)[0], []).append(recipe)
    pairs = [(a.steps, b.steps) for same in dishes.values() for a, b in combinations(same, 2)]
    (demo / "prepared").mkdir(parents=True)
    train_translation_table(pairs, vocab_size=500, iterations=2).save(
        str(demo / "prepared" / "translation_table.npz")
    )
    return root


def run_block(block: Block, cwd: Path) -> str | None:
    """Run a block as a script; None when every command succeeded, else what went wrong."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONUNBUFFERED": "1",
    }
    try:
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-x", "-c", block.code],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"still running after {BLOCK_TIMEOUT_S} s (mark a command that serves: skip)"
    if done.returncode != 0:
        return f"exit status {done.returncode}; the last command and its output:\n{done.stderr[-3000:]}"
    return None


class _Parsed(Exception):
    """Raised in place of running a job once its flags are parsed."""


def parse_job(command: str, cwd: Path) -> str | None:
    """Parse a `python jobs/X.py ...` or `rrt ...` command's flags with its own parser, running
    nothing; None when they parse, else what went wrong."""
    words = shlex.split(re.sub(r"^ray job submit .*? -- ", "", command), comments=True)
    words = words[: next((i for i, w in enumerate(words) if w in ("|", ">", "&&", ";")), None)]
    if words[:1] == ["rrt"]:
        module, argv = importlib.import_module("cli.main"), words[1:]
    elif len(words) >= 2 and words[0] == "python" and re.fullmatch(r"jobs/\w+\.py", words[1]):
        if not (cwd / words[1]).exists():
            return f"{words[1]} does not exist"
        module, argv = importlib.import_module(f"jobs.{Path(words[1]).stem}"), words[2:]
    else:
        return "parse-only checks `python jobs/X.py ...` and `rrt ...` commands only"
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        original(self, args, namespace)
        raise _Parsed

    said = io.StringIO()
    argparse.ArgumentParser.parse_args = parse_then_stop
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            module.main(argv)
    except _Parsed:
        return None
    except SystemExit as stop:
        return f"exit status {stop.code}: {said.getvalue().strip()[-1000:]}"
    finally:
        argparse.ArgumentParser.parse_args = original
    return "the command ran past its argument parsing without parsing its flags"


def check(blocks: list[Block], cwd: Path) -> list[str]:
    """Every problem of the blocks, in order: a bad marker, a failed run, flags a job refuses."""
    problems = []
    for block in blocks:
        where = f"README.md:{block.line}"
        if block.mode not in MODES:
            problems.append(f"{where}: unknown docs-test mode {block.mode!r} (one of {MODES})")
        elif block.mode != "run" and not block.reason:
            problems.append(f"{where}: a {block.mode} marker needs a reason")
        elif block.mode == "run":
            failed = run_block(block, cwd)
            if failed:
                problems.append(f"{where}: {failed}")
        elif block.mode == "parse-only":
            for command in commands(block.code):
                failed = parse_job(command, cwd)
                if failed:
                    problems.append(f"{where}: {command[:100]}: {failed}")
    return problems


@pytest.fixture(scope="module")
def after_demo(tmp_path_factory) -> Path:
    return demo_tree(tmp_path_factory.mktemp("readme"))


def test_the_readme_has_a_command_per_stage_and_each_block_is_run_or_says_why_not():
    blocks = shell_blocks(README.read_text(encoding="utf-8"))
    text = "\n".join(block.code for block in blocks)
    for stage in (
        "rrt convert",
        "rrt survey",
        "jobs/prepare_data.py",
        "jobs/train",
        "jobs/rewrite.py",
        "jobs/evaluate.py",
        "rrt show",
        "rrt judge",
        "rrt serve",
    ):
        assert stage in text, f"no README command runs {stage}"
    assert [b.line for b in blocks if b.mode == "run"], "the README has no block this test runs"
    for block in blocks:
        assert block.mode in MODES, f"README.md:{block.line}: unknown mode {block.mode!r}"
        assert block.mode == "run" or block.reason, f"README.md:{block.line}: no reason given"


def test_every_readme_command_works_after_make_demo(after_demo):
    problems = check(shell_blocks(README.read_text(encoding="utf-8")), after_demo)
    assert not problems, "\n\n".join(problems)


def test_a_command_that_stops_working_fails_the_check(after_demo):
    broken = """
```bash
rrt survey --constraint all data/sample/recipes.jsonl --output out/demo/survey-again
rrt show out/demo/rewrites/no_such_run --recipes 3
```

<!-- docs-test: parse-only: a job -->
```sh
python jobs/rewrite.py --data out/demo/prepared --no-such-flag 1 --output out/demo/x
python jobs/evaluate.py --lm out/demo/no_source/model --output out/demo/evaluation
```

<!-- docs-test: skip: -->
```bash
rrt serve --model out/demo/grounded_rule/model
```

<!-- docs-test: later: no such mode -->
```bash
true
```
"""
    problems = check(shell_blocks(broken), after_demo)
    assert len(problems) == 5, "\n\n".join(problems)
    show, flag, required, reason, mode = problems
    assert "no_such_run" in show and "exit status" in show
    assert "--no-such-flag" in flag
    assert "--rewrites" in required  # evaluate's required flag
    assert "needs a reason" in reason
    assert "unknown docs-test mode 'later'" in mode
    # The first command of the run block ran, in the tree, before the second failed.
    assert json.loads((after_demo / "out/demo/survey-again/survey.json").read_text())["recipes"]


def test_the_docs_pages_commands_pass_their_parsers():
    """Every `python jobs/X.py` and `rrt` command in docs/*.md's shell blocks (those without `…`)
    has flags its parser takes, so an option renamed or removed fails here too."""
    problems, checked = [], 0
    for page in sorted((ROOT / "docs").glob("*.md")):
        for block in shell_blocks(page.read_text(encoding="utf-8")):
            for command in commands(block.code):
                runs = re.sub(r"^ray job submit .*? -- ", "", command)
                if "…" in command or not re.match(r"(python jobs/|rrt )", runs):
                    continue
                checked += 1
                failed = parse_job(command, ROOT)
                if failed:
                    problems.append(f"{page.name}:{block.line}: {command[:100]}: {failed}")
    assert checked > 20, f"only {checked} commands found in docs/"
    assert not problems, "\n\n".join(problems)

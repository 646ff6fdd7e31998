"""Costs that must grow no faster than the input (hardening, second round). Each test compares
two sizes, never a wall clock."""
from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

# ---------------------------------------------------------------- rrt tag output


def _rrt_tag(step: str) -> str:
    """What `rrt tag --constraint all` prints for one recipe with this step (run in-process)."""
    from cli import main as cli

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "r.jsonl"
        path.write_text(json.dumps({"title": "Soup", "ingredients": ["1 cup water"], "steps": [step, "Serve."]}))
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            assert cli.main(["tag", "--constraint", "all", str(path)]) == 0, err.getvalue()
    return out.getvalue()


UNITS = st.lists(st.sampled_from(["milk", "egg", "honey", "butter", "walnuts", "salmon", "bacon", "coconut milk",
                                  "stir", "the", "or", "/", ",", "vegan", "water"]), min_size=1, max_size=5)


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
            line = next(x["text"] for x in row["lines"]
                        if (x["field"], x["index"]) == (violation["field"], violation["index"]))
            start, end = violation["span"]
            assert 0 <= start < end <= len(line) and violation["term"]

"""jobs/evaluate.py end to end on two small rewrite runs, its one-line errors, and the report page."""

from __future__ import annotations

import json

import pytest
from conftest import dictionary_missing, run_script
from test_metrics import export_tiny_lm

from rrt.evaluation.report import recipe_html

SOURCE = {
    "id": "r1",
    "title": "Mac & Cheese <Deluxe>",
    "ingredients": ["1 cup butter", "2 cups macaroni", "1 cup milk"],
    "steps": [
        "Boil the macaroni.",
        "Melt the butter with the milk.",
        "Stir in the macaroni & serve.",
    ],
}
SOURCE_2 = {
    "id": "r2",
    "title": "Honey Toast",
    "ingredients": ["2 slices bread", "1 tbsp honey"],
    "steps": ["Toast the bread.", "Drizzle with honey."],
}


def record(system, constrained, source, rewrite, steps, substitutions=(), constraint="vegan"):
    """One line of rewrites.jsonl in the schema jobs/rewrite.py writes."""
    return {
        "id": source["id"],
        "constraint": constraint,
        "system": system,
        "constrained": constrained,
        "source": source,
        "rewrite": rewrite,
        "steps": steps,
        "substitutions": list(substitutions),
        "notes": [],
    }


def one_candidate(texts):
    return [
        {"source_step": i, "candidates": [{"text": t, "scores": {"total": 0.0}}], "chosen": 0}
        for i, t in enumerate(texts)
    ]


def rule_based_records():
    """A guide that copies steps and leaves "milk" in one (adherence below 100, ROUGE-L 100)."""
    steps = [
        "Boil the macaroni.",
        "Melt the vegan butter with the milk.",
        "Stir in the macaroni & serve.",
    ]
    first = record(
        "rule-based",
        False,
        SOURCE,
        {
            "title": "Mac & Cheese <Deluxe>",
            "ingredients": ["1 cup vegan butter", "2 cups macaroni", "1 cup milk"],
            "steps": steps,
        },
        one_candidate(steps),
        [{"field": "ingredients", "index": 0, "original": "butter", "replacement": "vegan butter"}],
    )
    second = record(
        "rule-based",
        False,
        SOURCE_2,
        {
            "title": "Toast",
            "ingredients": ["2 slices bread", "1 tbsp maple syrup"],
            "steps": ["Toast the bread.", "Drizzle with maple syrup."],
        },
        one_candidate(["Toast the bread.", "Drizzle with maple syrup."]),
        [{"field": "steps", "index": 1, "original": "honey", "replacement": "maple syrup"}],
    )
    return [first, second]


def contextual_records():
    """Best-of-3 candidates per step; the second recipe's rewrite came back with no steps."""
    # The last step hides a forbidden food in a non-word, which adherence's whole words miss.
    texts = [
        "Boil the macaroni until tender.",
        "Warm the olive oil with the oat milk.",
        "Serve the chickenocks hot.",
    ]
    steps = [
        {
            "source_step": i,
            "chosen": 1,
            "candidates": [
                {
                    "text": "Add the <b>cheese</b> now!",
                    "scores": {"no_violation": -100.0, "length": 1.0, "total": -99.0},
                },
                {"text": t, "scores": {"no_violation": 0.0, "length": 1.0, "total": 1.0}},
                {"text": t.upper(), "scores": {"no_violation": 0.0, "length": 1.0, "total": 0.5}},
            ],
        }
        for i, t in enumerate(texts)
    ]
    first = record(
        "contextual",
        True,
        SOURCE,
        {
            "title": "Vegan Mac",
            "ingredients": ["2 tbsp olive oil", "2 cups macaroni", "1 cup oat milk"],
            "steps": texts,
        },
        steps,
    )
    second = record(
        "contextual",
        True,
        SOURCE_2,
        {"title": "Toast", "ingredients": ["2 slices bread"], "steps": []},
        [],
        constraint="vegan,nut-free",
    )
    return [first, second]


def write_run(folder, system, constrained, records, data=None):
    """A rewrite folder as jobs/rewrite.py leaves it: run.json and rewrites.jsonl."""
    folder.mkdir(parents=True)
    settings = {
        "data": str(data or folder / "no-such-prepared"),
        "split": "test",
        "system": system,
        "constrained": constrained,
        "model": None,
        "num_recipes": len(records),
        "candidates": 3,
        "seed": 0,
    }
    (folder / "run.json").write_text(
        json.dumps({"settings": settings, "counts": {}, "seconds": 1.0, "steps_per_s": 1.0})
    )
    (folder / "rewrites.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Two systems' rewrite folders and a tiny exported No-Source LM."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("eval_inputs")
    # A prepared corpus whose ingredient names are the food vocabulary (the rule run points at it).
    (root / "prepared" / "recipes").mkdir(parents=True)
    lines = [
        SOURCE["ingredients"],
        SOURCE_2["ingredients"],
        ["1 tbsp maple syrup", "2 cups oat milk"],
    ]
    pq.write_table(
        pa.table({"id": ["a", "b", "c"], "ingredients": lines}),
        root / "prepared" / "recipes" / "0.parquet",
    )
    rule = write_run(
        root / "rule", "rule-based", False, rule_based_records(), data=root / "prepared"
    )
    contextual = write_run(root / "contextual", "contextual", True, contextual_records())
    export_tiny_lm(root / "lm")
    return root, rule, contextual


@pytest.fixture(scope="module")
def evaluated(inputs, tmp_path_factory):
    root, rule, contextual = inputs
    out = tmp_path_factory.mktemp("eval") / "out"
    done = run_script(
        "evaluate.py",
        "--rewrites",
        f"{rule},{contextual}",
        "--lm",
        str(root / "lm"),
        "--output",
        str(out),
        "--report-recipes",
        "5",
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return out, done


@pytest.mark.slow
def test_metrics_json_has_every_system_and_sensible_values(evaluated):
    out, done = evaluated
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == {"systems", "per_constraint", "grounding_per_constraint"}
    assert list(metrics["systems"]) == ["rule-based", "contextual+constrained"]
    keys = {
        "perplexity",
        "adherence",
        "rouge_l_recall",
        "trigram_diversity",
        "n_recipes",
        "invented_food_steps",
        "same_job",
        "consistency",
        "title_consistency",
    }
    assert all(set(m) == keys for m in metrics["systems"].values())
    rule, ctx = metrics["systems"]["rule-based"], metrics["systems"]["contextual+constrained"]
    assert rule["n_recipes"] == ctx["n_recipes"] == 2
    # Copied steps recall all of the source; "honey" -> "maple syrup" loses 1 of 6 words.
    assert rule["rouge_l_recall"] == pytest.approx((100.0 + 500 / 6) / 2)
    # The guide left "milk" behind: 9 of 11 food mentions obey (maple syrup is a corpus food).
    assert rule["adherence"] == pytest.approx(900 / 11) and ctx["adherence"] == 100.0
    assert rule["perplexity"] > 1.0 and ctx["perplexity"] > 1.0
    assert 0 < ctx["trigram_diversity"] <= 1.0
    assert metrics["per_constraint"]["contextual+constrained"].keys() == {"vegan", "vegan,nut-free"}
    # Every food the steps name is the recipe's; "Warm the olive oil" does not melt as its source step did.
    assert rule["invented_food_steps"] == ctx["invented_food_steps"] == 0.0
    assert rule["same_job"] == 100.0 and ctx["same_job"] == pytest.approx(200 / 3)
    assert rule["consistency"] == ctx["consistency"] == rule["title_consistency"] == 100.0
    assert metrics["grounding_per_constraint"]["contextual+constrained"]["vegan"][
        "same_job"
    ] == pytest.approx(200 / 3)
    stats = json.loads((out / "eval_stats.json").read_text())
    assert stats["systems"]["contextual+constrained"]["empty_rewrites"] == 1
    assert stats["vocabulary"].startswith("corpus ") and stats["vocabulary_names"] == 7
    hidden = {label: s["hidden_food_steps"] for label, s in stats["systems"].items()}
    if dictionary_missing():
        assert (
            hidden == {"rule-based": None, "contextual+constrained": None}
            and "not counted" in done.stderr
        )
    else:
        assert hidden == {"rule-based": 0, "contextual+constrained": 1}
        assert "rule-based 0 of 5, contextual+constrained 1 of 3" in done.stdout


@pytest.mark.slow
def test_tables_plot_and_report_are_written(evaluated):
    out, done = evaluated
    table = (out / "table.md").read_text()
    assert (
        "| rule-based |" in table
        and "| contextual+constrained |" in table
        and "| Contextual | 11.61" in table
    )
    assert "| contextual+constrained |" in (out / "per_constraint.md").read_text()
    assert (
        "## Staying the user's recipe" in table
        and "## same job % per constraint" in (out / "per_constraint.md").read_text()
    )
    assert (out / "metrics.png").stat().st_size > 5000
    page = (out / "report.html").read_text()
    assert "Mac &amp; " in page and "&lt;Deluxe&gt;" in page and "<Deluxe>" not in page
    assert "&lt;b&gt;cheese&lt;/b&gt;" in page and "<details>" in page and "✓ " in page
    assert 'class="bad">butter</span>' in page and 'class="new">maple syrup</span>' in page
    assert "| contextual+constrained |" in done.stdout and str(out / "report.html") in done.stdout


def test_report_marks_a_food_the_recipe_does_not_hold():
    first = contextual_records()[0]
    first["rewrite"]["steps"] = ["Boil the macaroni with peanuts.", *first["rewrite"]["steps"][1:]]
    html = recipe_html(first)
    assert (
        '<span class="invented">peanuts</span>' in html and 'class="invented">macaroni' not in html
    )


def test_report_marks_violations_changes_and_the_chosen_candidate():
    html = recipe_html(contextual_records()[0])
    assert html.count("<details>") == 3 and html.count('class="chosen"') == 3
    assert '<span class="bad">butter</span>' in html and '<span class="bad">milk</span>' in html
    assert '<span class="new">olive</span>' in html  # a word the source never used
    assert '<span class="bad">oat milk</span>' not in html and "oat milk" in html


@pytest.mark.parametrize("case", ["missing_dir", "empty", "missing_lm", "bad_foods"])
def test_bad_inputs_give_one_error_line_and_exit_2(inputs, tmp_path, case):
    root, rule, _ = inputs
    args = {"rewrites": str(rule), "lm": str(root / "lm"), "output": str(tmp_path / "out")}
    expected = {
        "missing_dir": "rewrites folder not found",
        "empty": "holds no rewrites",
        "missing_lm": "LM folder not found",
        "bad_foods": "bad foods file",
    }[case]
    if case == "missing_dir":
        args["rewrites"] = str(tmp_path / "nowhere")
    elif case == "empty":
        args["rewrites"] = str(write_run(tmp_path / "empty", "retrieval", False, []))
    elif case == "missing_lm":
        args["lm"] = str(tmp_path / "no-lm")
    extra = []
    if case == "bad_foods":
        (tmp_path / "food.csv").write_text("id,title\n1,Milk\n")
        extra = ["--foods", str(tmp_path / "food.csv")]
    done = run_script(
        "evaluate.py", *[x for k, v in args.items() for x in (f"--{k}", v)], *extra, timeout=120
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evaluate: error: ") and expected in lines[0], (
        done.stderr
    )
    assert not (tmp_path / "out").exists()

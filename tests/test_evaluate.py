"""jobs/evaluate.py end to end on two small rewrite runs, its one-line errors, and the report page."""

from __future__ import annotations

import json
from html import escape

import pytest
from conftest import dictionary_missing, run_script
from test_metrics import export_tiny_lm

from rrt.evaluation.glossary import CAVEAT, describe_system
from rrt.evaluation.metrics import decision_counts, form_rules_share, summarise
from rrt.evaluation.report import (
    metrics_markdown,
    reader_measures,
    recipe_html,
    render_report,
    step_decisions,
)

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
    # A study as `rrt judge report` leaves it, with only some of the keys a report can hold.
    (root / "study" / "report").mkdir(parents=True)
    (root / "study" / "report" / "report.json").write_text(
        json.dumps({"best": "rule-based", "table": {"rule-based": {"overall": {"mean": 3.5}}}})
    )
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
        "--study",
        str(root / "study"),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return out, done


@pytest.mark.slow
def test_metrics_json_has_every_system_and_sensible_values(evaluated):
    out, done = evaluated
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == {
        "systems",
        "per_constraint",
        "grounding_per_constraint",
        "decisions",
        "study",
        "readers",
    }
    assert list(metrics["systems"]) == ["rule-based", "contextual+constrained"]
    keys = {
        "perplexity",
        "adherence",
        "rouge_l_recall",
        "trigram_diversity",
        "n_recipes",
        "invented_food_steps",
        "same_job",
        "flagged_steps",
        "consistency",
        "title_consistency",
        "form_rules",
        "kept",
        "guide",
        "model",
    }
    assert all(set(m) == keys for m in metrics["systems"].values())
    # These runs predate step decisions; the study rated rule-based's overall quality only.
    assert metrics["decisions"]["rule-based"] == {"kept": 0, "guide": 0, "model": 0, "steps": 0}
    assert metrics["readers"]["rule-based"]["overall"] == 3.5
    assert metrics["readers"]["contextual+constrained"] == {}
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
        and "| Contextual (contextual) | 11.61" in table
    )
    assert "readers: overall (1-5) ↑" in table and "| rule-based | 3.50 |" in table
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


@pytest.mark.parametrize(
    "case", ["missing_dir", "empty", "missing_lm", "bad_foods", "missing_study"]
)
def test_bad_inputs_give_one_error_line_and_exit_2(inputs, tmp_path, case):
    root, rule, _ = inputs
    args = {"rewrites": str(rule), "lm": str(root / "lm"), "output": str(tmp_path / "out")}
    expected = {
        "missing_study": "no report/report.json in study folder",
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
    elif case == "missing_study":
        args["study"] = str(tmp_path)
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


# ---- the report's tables and page, from small metric dicts and records ----------------------


def system_metrics(**values):
    """One system's metrics.json entry; every measure missing unless given."""
    keys = (
        "perplexity",
        "adherence",
        "rouge_l_recall",
        "trigram_diversity",
        "form_rules",
        "invented_food_steps",
        "same_job",
        "consistency",
        "title_consistency",
        "kept",
        "guide",
        "model",
    )
    return {**dict.fromkeys(keys), "n_recipes": 2, **values}


def two_systems():
    return {
        "systems": {
            "rule_based": system_metrics(
                perplexity=10.2, adherence=96.1, rouge_l_recall=98.7, invented_food_steps=0.3
            ),
            "grounded_rule+constrained": system_metrics(
                perplexity=7.5,
                adherence=100.0,
                rouge_l_recall=43.6,
                invented_food_steps=0.0,
                kept=50.0,
                guide=30.0,
                model=20.0,
            ),
        }
    }


def row(markdown, label):
    """The cells of a Markdown table row (the first row naming the label)."""
    line = next(x for x in markdown.splitlines() if x.startswith(f"| {label} |"))
    return [c.strip() for c in line.strip("|").split("|")][1:]


def test_table_and_page_say_what_every_system_and_column_is():
    metrics = two_systems()
    metrics["systems"]["someone_elses"] = system_metrics()
    table = metrics_markdown(metrics)
    page = render_report({}, metrics, 5)
    for label in metrics["systems"]:
        assert f"- **{label}**: {describe_system(label)}" in table
        assert escape(describe_system(label)) in page
    assert "the product" in describe_system("grounded_rule")
    assert "constrained decoding" in describe_system("grounded_rule+constrained")
    assert "constrained decoding" not in describe_system("grounded_rule")
    assert "no description" in describe_system("someone_elses")
    for column in ("perplexity ↓", "adherence % ↑", "same job % ↑", "title consistent % ↑"):
        assert f"- **{column}**:" in table and column in page
    assert CAVEAT in table and "Rule-Based copies the source" in page


def test_the_best_value_of_each_column_is_marked_by_its_direction():
    metrics = two_systems()
    table = metrics_markdown(metrics)
    # Perplexity and invented foods: lower is better; adherence and ROUGE-L: higher.
    assert row(table, "rule_based")[:3] == ["10.20", "96.1", "**98.70**"]
    assert row(table, "grounded_rule+constrained")[:3] == ["**7.50**", "**100.0**", "43.60"]
    staying = table.split("## Staying")[1]
    assert row(staying, "grounded_rule+constrained")[0] == "**0.0**"
    assert row(staying, "rule_based")[0] == "0.3"
    # A column with one value, or none, or no direction (kept %), marks nothing.
    assert "**" not in "".join(row(table, "rule_based")[3:5])
    assert "**50.0**" not in table
    page = render_report({}, metrics, 5)
    assert "<td class=best>7.50</td>" in page and "<td class=best>98.70</td>" in page
    assert "<td class=best>10.20</td>" not in page and "<td class=best>43.60</td>" not in page


def test_ties_are_all_marked():
    metrics = two_systems()
    metrics["systems"]["rule_based"]["adherence"] = 100.0
    assert row(metrics_markdown(metrics), "rule_based")[1] == "**100.0**"


def test_the_papers_rows_sit_beside_ours_in_the_page_marked_as_the_papers():
    page = render_report({}, two_systems(), 5)
    paper = page.split("class='paper-head'")[1]
    assert "Hegel et al. 2020" in paper
    assert "<tr class='paper'><td>Contextual (paper; ours: contextual)</td><td>11.61</td>" in paper
    assert "+ Rule ingredient prompt (paper; ours: contextual_rule)" in paper
    # The paper's rows are not ours: never marked best, even where they would be.
    assert "class=best" not in paper
    assert page.index("grounded_rule+constrained</td>") < page.index("class='paper-head'")


def decided_record():
    """A product rewrite whose first step the guide left alone and whose others were decided."""
    source = {
        "id": "r3",
        "title": "Buttered Noodles",
        "ingredients": ["1 cup vegan butter", "2 tbsp butter", "8 oz noodles"],
        "steps": [
            "Melt the vegan butter.",
            "Toss the noodles with the butter.",
            "Boil the noodles.",
        ],
    }
    steps = [
        "Melt the vegan butter.",
        "Toss the noodles with the vegan butter.",
        "Boil the noodles in salted water.",
    ]
    entries = one_candidate(steps)
    for entry, decision in zip(entries, ("kept", "guide", "model")):
        entry["decision"] = decision
    rewrite = {**source, "ingredients": ["1 cup vegan butter", "8 oz noodles"], "steps": steps}
    subs = [{"field": "steps", "index": 1, "original": "butter", "replacement": "vegan butter"}]
    return record("grounded_rule", True, source, rewrite, entries, subs)


def rewritten_steps(page):
    """The list items of the rewrite side's steps."""
    side = page.split("<h4>Rewrite</h4>")[1].split("<b>Steps</b>")[1].split("</ol>")[0]
    return side.split("<li>")[1:]


def test_each_rewritten_step_shows_how_it_was_decided():
    steps = rewritten_steps(recipe_html(decided_record()))
    assert len(steps) == 3
    for item, decision in zip(steps, ("kept", "guide", "model")):
        assert f'class="decision decision-{decision}"' in item
        assert item.count('class="decision ') == 1
    # Older runs record no decision: no label at all.
    older = decided_record()
    for entry in older["steps"]:
        del entry["decision"]
    assert step_decisions(older) == [None, None, None]
    assert 'class="decision ' not in recipe_html(older)


def test_a_step_as_its_source_had_it_is_not_painted_as_changed():
    kept, guide, model = rewritten_steps(recipe_html(decided_record()))
    # "vegan butter" is a listed replacement, yet the kept step is the source's own words.
    assert 'class="new"' not in kept
    assert '<span class="new">vegan butter</span>' in guide
    assert '<span class="new">salted</span>' in model


def test_decisions_are_counted_and_shown_for_the_systems_that_record_them():
    decided = decided_record()
    older = rule_based_records()
    assert decision_counts([decided, decided]) == {"kept": 2, "guide": 2, "model": 2, "steps": 6}
    assert decision_counts(older)["steps"] == 0
    measure = {"obeying": 1, "mentions": 1, "empty": False, "rouge_l_recall": 1.0}
    measure |= {"nll": 1.0, "tokens": 1}
    system = summarise([decided], [measure])[0]
    assert system["kept"] == system["guide"] == system["model"] == pytest.approx(100 / 3)
    assert summarise(older, [measure, measure])[0]["kept"] is None
    table = metrics_markdown(two_systems()).split("## Staying")[1]
    assert "| kept % | guide % | model % |" in table
    assert row(table, "grounded_rule+constrained")[-3:] == ["50.0", "30.0", "20.0"]
    assert row(table, "rule_based")[-3:] == ["", "", ""]
    # No system decided a step: no decision columns.
    metrics = two_systems()
    for key in ("kept", "guide", "model"):
        metrics["systems"]["grounded_rule+constrained"][key] = None
    assert "kept %" not in metrics_markdown(metrics)


def test_form_rules_share_counts_the_chosen_steps_scored_by_them():
    passing = {"capitalised": 1.0, "ends_with_punctuation": 1.0, "dictionary_words": 1.0}
    steps = [
        {"chosen": 1, "candidates": [{"scores": passing}, {"scores": passing}]},
        {"chosen": 0, "candidates": [{"scores": {**passing, "dictionary_words": 0.5}}]},
        {"chosen": 0, "candidates": [{"scores": {"total": 0.0}}]},  # not scored by the rules
    ]
    assert form_rules_share([{"steps": steps}]) == 50.0
    assert form_rules_share(rule_based_records()) is None


STUDY = {
    "best": "grounded_rule",
    "systems": ["grounded_rule", "rule_based", "retrieval"],
    "table": {
        "grounded_rule": {"overall": {"mean": 4.2, "ci95": 0.1, "n": 30}},
        "rule_based": {"overall": {"mean": 3.0, "ci95": 0.1, "n": 30}},
    },
    "head_to_head": {
        "rule_based": {"wins": 6, "ties": 2, "losses": 2, "pending": 1, "items": 11},
        "retrieval": {"wins": 9, "ties": 1, "losses": 0, "pending": 0, "items": 10},
    },
    "step_marks": {
        "tables": {
            "by_system": {
                "grounded_rule": {
                    "steps": 10,
                    "shares": {"ok": 0.9},
                    "recipes": 4,
                    "cookable": 0.75,
                },
                "rule_based": {"steps": 10, "shares": {"ok": 0.6}, "recipes": 4, "cookable": None},
            }
        }
    },
}


def test_reader_measures_come_from_the_study_report_and_missing_keys_stay_blank():
    readers = reader_measures(STUDY)
    # The best system won 15 of the 20 decided comparisons; rule_based won 2 of its 10.
    assert readers["grounded_rule"] == {
        "overall": 4.2,
        "steps_ok": 90.0,
        "cookable": 75.0,
        "head_to_head": 75.0,
    }
    assert readers["rule_based"] == {
        "overall": 3.0,
        "steps_ok": 60.0,
        "cookable": None,
        "head_to_head": 20.0,
    }
    none = dict.fromkeys(("overall", "steps_ok", "cookable", "head_to_head"))
    assert readers["retrieval"] == {**none, "head_to_head": 0.0}
    assert reader_measures({}) == {} and reader_measures(["not", "a", "report"]) == {}
    odd = {
        "systems": ["x"],
        "table": {"x": {"overall": "good"}},
        "step_marks": [],
        "head_to_head": 3,
    }
    assert reader_measures(odd) == {"x": none}


def test_reader_columns_appear_only_with_a_study():
    metrics = {
        "systems": {
            "grounded_rule": system_metrics(perplexity=7.5),
            "rule_based": system_metrics(perplexity=10.2),
            "contextual": system_metrics(perplexity=11.0),
        }
    }
    for page in (metrics_markdown(metrics), render_report({}, metrics, 5)):
        assert "readers:" not in page
    readers = reader_measures(STUDY)
    metrics["study"] = "/studies/s1/report/report.json"
    metrics["readers"] = {label: readers.get(label, {}) for label in metrics["systems"]}
    table = metrics_markdown(metrics)
    assert "## Readers' marks (study /studies/s1/report/report.json)" in table
    assert "- **readers: steps OK % ↑**:" in table
    marks = table.split("## Readers' marks")[1]
    assert row(marks, "grounded_rule") == ["**4.20**", "**90.0**", "75.0", "**75.0**"]
    assert row(marks, "contextual") == ["", "", "", ""]
    page = render_report({}, metrics, 5)
    assert "readers: cookable % ↑" in page and "<td class=best>4.20</td>" in page


def test_evaluate_help_names_the_script_as_the_other_jobs_help_does(monkeypatch, capsys):
    import sys

    from jobs.evaluate import parse_args

    monkeypatch.setattr(sys, "argv", ["jobs/evaluate.py"])
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    assert capsys.readouterr().out.startswith("usage: evaluate.py ")

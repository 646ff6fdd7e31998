"""The human study without a web server: the sample, blind balanced assignments, extending a study,
the schema's migration, the CLI's one-line errors, and the report's figures against values
worked by hand (Krippendorff's alpha against his own published example)."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
from conftest import SAMPLE

from cli.main import main as rrt
from judge.store import SCHEMA_VERSION, AnswerError, Study, StudyError, connect, migrate
from judge.study import (
    build_report,
    create_study,
    export_study,
    extend_study,
    read_system,
    study_constraints,
    study_markdown,
    write_report,
)
from rrt.config import JudgeSettings, load_settings
from rrt.evaluation.human import (
    QUESTIONS,
    Z95,
    agreement,
    alpha,
    assign,
    head_to_head,
    human_table,
    judge_times,
    mean_ci,
    pair_outcome,
    plan_tasks,
    sample_items,
)
from testing.rewrite_runs import write_runs

SETTINGS = load_settings().judge


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three offline rewrite runs of the bundled sample (guide, short, copy) and a fourth to add later."""
    folder = tmp_path_factory.mktemp("runs")
    return write_runs(str(SAMPLE), str(folder), ("guide", "short", "copy", "late"))


def small(**changes) -> JudgeSettings:
    """ray_config.yaml's judge block, shrunk for a test."""
    return SETTINGS.model_copy(update={"recipes": 12, "judges": 7, "human_rewrites": 3, **changes})


def test_the_sample_takes_equal_shares_per_constraint_and_leaves_fish_free_out():
    records = {
        "a": [
            {"id": f"r{i}", "constraint": c}
            for i in range(10)
            for c in ("vegan", "nut-free", "fish-free")
        ]
        + [{"id": "only-a", "constraint": "vegan"}],
        "b": [
            {"id": f"r{i}", "constraint": c}
            for i in range(10)
            for c in ("vegan", "nut-free", "fish-free")
        ],
    }
    chosen = sample_items(records, 12, ["vegan", "nut-free"], seed=3)
    assert Counter(c for _, c in chosen) == {"vegan": 6, "nut-free": 6}
    assert ("only-a", "vegan") not in chosen  # every system must have rewritten an item
    assert chosen == sample_items(records, 12, ["vegan", "nut-free"], seed=3)
    assert chosen != sample_items(records, 12, ["vegan", "nut-free"], seed=4)
    # A short constraint gives its share to the others.
    assert Counter(
        c for _, c in sample_items(records, 24, ["vegan", "nut-free", "egg-free"], 3)
    ) == {"vegan": 10, "nut-free": 10}
    everything = sample_items(records, 30, ["vegan", "nut-free", "fish-free"], 3)
    assert Counter(c for _, c in everything) == {"vegan": 10, "nut-free": 10, "fish-free": 10}


def test_assignments_give_each_task_distinct_judges_and_even_loads():
    items = [(f"r{i}", "vegan") for i in range(9)]
    tasks = plan_tasks(items, ["x", "y", "z"], "x", 5, items[:4], 1, seed=1)
    assert Counter(t["kind"] for t in tasks) == {"rate": 27, "compare": 18, "rewrite": 4}
    sides = Counter(t["system"] == "x" for t in tasks if t["kind"] == "compare")
    assert sides[True] and sides[False]  # the best system is not always on the left
    judges = [f"j{i}" for i in range(12)]
    pairs = assign(tasks, judges, seed=1)
    per_task = Counter(i for i, _ in pairs)
    assert all(per_task[i] == t["judges"] for i, t in enumerate(tasks))
    assert len(set(pairs)) == len(pairs)  # no judge twice on one task
    load = Counter(j for _, j in pairs)
    assert max(load.values()) - min(load.values()) <= 1 and set(load) == set(judges)
    with pytest.raises(ValueError, match="needs 5 judges; the study has 3"):
        assign(tasks, judges[:3], seed=1)


def test_create_answer_extend_export(tmp_path, runs):
    folder = str(tmp_path / "study")
    out = create_study(folder, [runs["guide"], runs["short"], runs["copy"]], small())
    assert (
        out["recipes"] == 12
        and set(out["per_constraint"].values()) == {2}
        and "fish-free" not in out["per_constraint"]
    )
    assert "fish-free" in study_constraints(True) and "fish-free" not in study_constraints(
        SETTINGS.fish_free
    )
    assert json.loads((tmp_path / "study" / "create.json").read_text())["seed"] == SETTINGS.seed
    assert out["tasks"] == {"rate": 36, "compare": 24, "rewrite": 3}
    assert out["assignments"] == (36 + 24) * 5 + 3
    study = Study(folder)
    rewriter = next(a["judge"] for a in study.assignments() if a["kind"] == "rewrite")
    first = next(j for j in study.judges() if j["name"] == rewriter)
    task = study.next_task(first["id"])
    assert set(task) == {
        "id",
        "kind",
        "constraint",
        "source",
        "rewrites",
        "answers",
    }  # no system name: blind
    answers = {
        "rate": [(q, 4) for q in QUESTIONS],
        "compare": [("choice", "left")],
        "rewrite": [
            ("rewrite", {"title": "T", "ingredients": ["1 cup rice"], "steps": ["Cook the rice."]})
        ],
    }
    done = 0
    while task is not None:
        for question, value in answers[task["kind"]]:
            study.answer(first["id"], task["id"], question, value, 20000)
        study.finish(first["id"], task["id"])
        done, last = done + 1, task["id"]
        task = study.next_task(first["id"])
    before = study.judgments()
    with pytest.raises(AnswerError) as replay:
        study.finish(first["id"], last)
    assert replay.value.status == 409
    # A new system: rated on the same recipes and compared with the best one; nothing judged is lost.
    added = extend_study(folder, runs["late"])
    assert added["system"] == "late" and added["tasks"] == {"rate": 12, "compare": 12, "rewrite": 0}
    assert study.judgments() == before and study.systems() == ["guide", "short", "copy", "late"]
    load = Counter(a["judge"] for a in study.assignments())
    assert max(load.values()) - min(load.values()) <= 1
    with pytest.raises(StudyError, match="already has system late"):
        extend_study(folder, runs["late"])
    # A new judge takes unstarted tasks until their open load reaches the others'.
    moved = study.add_judges(["late-judge"], rebalance=True)
    open_load = Counter(a["judge"] for a in study.assignments() if not a["done"])
    assert moved["moved"] > 0 and open_load["late-judge"] >= max(open_load.values()) - 1
    with study.connection() as conn:  # still every task to its number of judges
        assert not conn.execute(
            "SELECT t.id FROM tasks t JOIN assignments a ON a.task = t.id GROUP BY t.id "
            "HAVING COUNT(a.id) != t.judges"
        ).fetchall()
    exported = export_study(study, str(tmp_path / "export"))
    assert exported["judgments"] == len(before)
    human = [
        json.loads(line)
        for line in (tmp_path / "export" / "human" / "rewrites.jsonl").read_text().splitlines()
    ]
    assert all(
        r["system"] == "human" and r["rewrite"]["steps"] == ["Cook the rice."] for r in human
    )
    assert (
        read_system(str(tmp_path / "export" / "human"))[0] == "human"
    )  # the shape jobs/evaluate.py reads


def test_the_schema_migrates_and_refuses_a_newer_file(tmp_path):
    path = str(tmp_path / "old.sqlite")
    conn = connect(path)
    assert migrate(conn) == 0 and migrate(conn) == SCHEMA_VERSION
    assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.execute("UPDATE schema_version SET version = 99")
    conn.close()
    (tmp_path / "newer").mkdir()
    (tmp_path / "old.sqlite").rename(tmp_path / "newer" / "study.sqlite")
    with pytest.raises(StudyError, match="schema 99; this rrt reads up to"):
        Study(str(tmp_path / "newer"))
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "study.sqlite").write_text("not a database at all " * 100)
    with pytest.raises(StudyError, match="not a study database"):
        Study(str(tmp_path / "junk"))


@pytest.mark.parametrize(
    "argv, line",
    [
        (["create", "--rewrites", "/nonexistent/run"], "no rewrites.jsonl in /nonexistent/run"),
        (
            ["create", "--rewrites", "RUN", "--best", "nobody"],
            "best system 'nobody' is none of the runs given",
        ),
        (
            ["create", "--rewrites", "RUN", "--judges-per-item", "0"],
            "judge.judges_per_item must be >= 1 (got 0)",
        ),
        (["create", "--rewrites", "RUN", "--judges", "2"], "needs 5 judges; the study has 2"),
        (["report"], "no study in"),
        (["extend", "--rewrites", "RUN"], "no study in"),
        (["add-judges"], "no study in"),
    ],
)
def test_bad_cli_input_is_one_line(tmp_path, runs, capsys, argv, line):
    argv = [runs["guide"] if a == "RUN" else a for a in argv]
    assert rrt(["judge", *argv, "--study", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert line in err and err.count("\n") == 1 and "Traceback" not in err


# --- the report's figures against hand-worked values ------------------------------------------------

RATINGS = [  # system, question, judge, value
    ("A", "overall", "j1", 4),
    ("A", "overall", "j2", 5),
    ("A", "overall", "j3", 3),
    ("B", "overall", "j1", 2),
    ("B", "overall", "j2", 2),
    ("B", "overall", "j3", 2),
    ("B", "overall", "j4", 4),
]


def test_mean_and_95_percent_interval_by_hand():
    table = human_table(
        [{"system": s, "question": q, "judge": j, "value": v} for s, q, j, v in RATINGS]
    )
    # A: mean 4, sample sd 1, n 3 -> 1.96 / sqrt(3); B: mean 2.5, sd 1, n 4 -> 1.96 / 2.
    assert table["A"]["overall"]["mean"] == 4 and table["A"]["overall"]["ci95"] == pytest.approx(
        1.959964 / math.sqrt(3)
    )
    assert table["B"]["overall"]["mean"] == 2.5 and table["B"]["overall"]["ci95"] == pytest.approx(
        0.979982
    )
    assert table["A"]["ingredients"] == {"mean": None, "ci95": None, "n": 0}
    assert mean_ci([3]) == {"mean": 3, "ci95": 0.0, "n": 1} and Z95 == pytest.approx(1.96, abs=1e-3)


def test_head_to_head_counts_a_majority_of_three_as_a_win_and_less_as_a_tie():
    assert pair_outcome(["A", "A", "A", "B", "same"], "A", "B", 3, 5) == "first"
    assert pair_outcome(["A", "A", "B", "B", "same"], "A", "B", 3, 5) == "tie"
    assert (
        pair_outcome(["B", "B", "B"], "A", "B", 3, 5) == "second"
    )  # decided before all five are in
    assert pair_outcome(["A", "A"], "A", "B", 3, 5) is None
    votes = {
        ("r1", "B"): ["A", "A", "A", "B", "B"],
        ("r2", "B"): ["B", "B", "B", "A", "same"],
        ("r3", "B"): ["A", "same", "same", "B", "A"],
        ("r1", "C"): ["A", "A", "A", "A", "C"],
    }
    rows = [
        {"recipe": r, "constraint": "vegan", "other": o, "vote": v}
        for (r, o), vs in votes.items()
        for v in vs
    ]
    result = head_to_head(rows, "A", 3, 5, others=["B", "C", "D"])
    assert result["B"] == {"wins": 1, "ties": 1, "losses": 1, "pending": 0, "items": 3}
    assert result["C"]["wins"] == 1 and result["D"] == {
        "wins": 0,
        "ties": 0,
        "losses": 0,
        "pending": 0,
        "items": 0,
    }


# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", the example of four observers,
# twelve units and missing values: alpha = 0.743 (nominal), 0.849 (interval), 0.797 (ratio).
KRIPPENDORFF = [
    "1 2 3 3 2 1 4 1 2 . . .",
    "1 2 3 3 2 2 4 1 2 5 . 3",
    ". 3 3 3 2 3 4 2 2 5 1 .",
    "1 2 3 3 2 4 4 1 2 5 1 .",
]


def test_alpha_matches_krippendorffs_published_example():
    units: dict = {}
    for observer, row in enumerate(KRIPPENDORFF):
        for unit, value in enumerate(row.split()):
            if value != ".":
                units.setdefault(unit, {})[f"o{observer}"] = int(value)
    assert round(alpha(units, "nominal"), 3) == 0.743
    assert round(alpha(units, "interval"), 3) == 0.849
    assert round(alpha(units, "ratio"), 3) == 0.797
    assert alpha({0: {"a": 1}}, "nominal") is None  # no unit judged twice
    assert alpha({0: {"a": 3, "b": 3}}, "ordinal") is None  # no variation at all


def test_agreement_of_perfectly_agreeing_judges_is_one_and_judge_times_by_hand():
    ratings = [
        {"system": s, "question": q, "judge": j, "value": v, "recipe": r, "constraint": "vegan"}
        for q in QUESTIONS
        for s, r, v in (("A", "r1", 5), ("A", "r2", 2), ("B", "r1", 3))
        for j in ("j1", "j2")
    ]
    votes = [
        {"recipe": r, "constraint": "vegan", "other": "B", "vote": v, "judge": j}
        for r, v in (("r1", "A"), ("r2", "B"), ("r3", "same"))
        for j in ("j1", "j2", "j3")
    ]
    result = agreement(ratings, votes)
    assert result["ratings"] == {q: 1.0 for q in QUESTIONS} and result["head_to_head"] == 1.0
    times = judge_times(
        [
            {"judge": "j1", "done": True, "seconds": 10},
            {"judge": "j1", "done": True, "seconds": 20},
            {"judge": "j1", "done": True, "seconds": 60},
            {"judge": "j1", "done": False, "seconds": None},
        ]
    )
    assert times["j1"] == {"assigned": 4, "done": 3, "median_s": 20, "mean_s": 30}


def test_the_report_files_of_a_study(tmp_path, runs):
    folder = str(tmp_path / "study")
    create_study(
        folder, [runs["guide"], runs["copy"]], small(recipes=6, judges=5, human_rewrites=0)
    )
    study = Study(folder)
    for person in study.judges():
        while (task := study.next_task(person["id"])) is not None:
            if task["kind"] == "rate":
                for question in QUESTIONS:
                    study.answer(
                        person["id"],
                        task["id"],
                        question,
                        5 if task["rewrites"][0]["steps"] else 1,
                        20000,
                    )
            else:
                left_is_guide = task["rewrites"][0] != task["rewrites"][1]  # guide and copy differ
                study.answer(
                    person["id"],
                    task["id"],
                    "choice",
                    "same" if not left_is_guide else "left",
                    20000,
                )
            study.finish(person["id"], task["id"])
    report = write_report(study, str(tmp_path / "report"))
    assert {p.name for p in (tmp_path / "report").iterdir()} == {
        "report.md",
        "report.json",
        "report.html",
        "head_to_head.png",
    }
    assert (
        report["table"]["guide"]["overall"]["n"] == 30
        and report["table"]["guide"]["overall"]["mean"] == 5
    )
    h2h = report["head_to_head"]["copy"]
    assert (
        h2h["items"] == 6 and h2h["pending"] == 0 and h2h["wins"] + h2h["ties"] + h2h["losses"] == 6
    )
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "| guide | 5.00 ± 0.00 |" in markdown and study_markdown(build_report(study)) == markdown
    assert all(j["done"] == j["assigned"] for j in report["judges"].values())


def test_a_study_of_one_system_gets_head_to_head_pairs_when_a_second_joins(tmp_path, runs):
    folder = str(tmp_path / "study")
    first = create_study(folder, [runs["guide"]], small(recipes=4, judges=5, human_rewrites=0))
    assert first["tasks"] == {"rate": 4, "compare": 0, "rewrite": 0} and first["best"] == "guide"
    assert extend_study(folder, runs["copy"])["tasks"] == {"rate": 4, "compare": 4, "rewrite": 0}


def test_a_sample_smaller_than_asked_is_said_once_on_stderr(tmp_path, runs, capsys):
    assert (
        rrt(
            [
                "judge",
                "create",
                "--study",
                str(tmp_path / "s"),
                "--rewrites",
                runs["guide"],
                "--recipes",
                "500",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert captured.err.count("warning: asked for 500 recipes, but the runs share only") == 1
    made = json.loads((tmp_path / "s" / "create.json").read_text())["recipes"]
    assert f"share only {made} (recipe, constraint)" in captured.err and made < 500


def test_create_names_the_run_compared_with_the_others_without_calling_it_best(
    tmp_path, runs, capsys
):
    study = str(tmp_path / "s")
    rewrites = f"{runs['guide']},{runs['copy']}"
    flags = ["--recipes", "4", "--judges", "5", "--human-rewrites", "0"]
    assert rrt(["judge", "create", "--study", study, "--rewrites", rewrites, *flags]) == 0
    said = capsys.readouterr().out.splitlines()[0]
    assert "systems guide, copy (guide compared with each other run)" in said, said
    assert "best" not in said


def test_a_report_or_export_stopped_midway_leaves_the_earlier_files_whole(
    tmp_path, runs, monkeypatch
):
    import judge.study

    folder = str(tmp_path / "study")
    create_study(
        folder, [runs["guide"], runs["copy"]], small(recipes=4, judges=5, human_rewrites=0)
    )
    study = Study(folder)
    person = study.judges()[0]
    task = study.next_task(person["id"])
    for question, value in (
        [(q, 4) for q in QUESTIONS] if task["kind"] == "rate" else [("choice", "left")]
    ):
        study.answer(person["id"], task["id"], question, value, 20000)
    study.finish(person["id"], task["id"])
    export, report = tmp_path / "export", tmp_path / "report"
    export_study(study, str(export))
    write_report(study, str(report))

    def files() -> dict:
        return {p: p.read_bytes() for p in [*export.rglob("*"), *report.rglob("*")] if p.is_file()}

    before = files()
    assert (report / "head_to_head.png") in before and before[export / "judgments.jsonl"]

    def half_drawn(results, best, path):
        with open(path, "wb") as handle:
            handle.write(b"\x89PNG half a chart")
        raise RuntimeError("stopped")

    def drawn(results, best, path):  # the chart as before, without drawing it again
        with open(path, "wb") as handle:
            handle.write(before[report / "head_to_head.png"])

    def stopped(*args):
        raise RuntimeError("stopped")

    # Each stop comes while a file is being written, as a kill would.
    for chart, page in ((half_drawn, judge.study.report_html), (drawn, stopped)):
        with monkeypatch.context() as patch:
            patch.setattr(judge.study, "plot_head_to_head", chart)
            patch.setattr(judge.study, "report_html", page)
            with pytest.raises(RuntimeError):
                write_report(study, str(report))
        assert files() == before, chart.__name__
    with monkeypatch.context() as patch:
        patch.setattr(Study, "judgments", lambda self: [{"not JSON": object()}])
        with pytest.raises(TypeError):
            export_study(study, str(export))
    assert files() == before

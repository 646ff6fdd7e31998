"""The offline blind reader study, with no server: `rrt judge packet` writes each judge's tasks
blind, two readers fill them in (one as a crowdsourcing results CSV, one as answers.json), `rrt
judge import` reads them back, and `rrt judge report` shows step marks, cookable and agreement.
Bad answers files are refused row by row, and nothing is ever stored twice."""

from __future__ import annotations

import csv
import json
import os
import re
import sqlite3

import pytest
from conftest import SAMPLE

from cli.main import main as rrt
from judge.imports import import_file
from judge.store import AnswerError, ImportRefused, Study
from judge.study import build_report, create_study, study_markdown
from rrt.config import load_settings
from rrt.evaluation.human import QUESTIONS, RUBRIC_VERSION, STEP_MARKS, alpha
from testing.rewrite_runs import write_runs

SETTINGS = load_settings().judge
SYSTEMS = ("guide", "copy")


@pytest.fixture
def study(tmp_path_factory, tmp_path):
    """Six recipes, two systems, two readers who each see every task (and one hand rewrite)."""
    runs = write_runs(str(SAMPLE), str(tmp_path / "runs"), SYSTEMS)
    settings = SETTINGS.model_copy(
        update={"recipes": 6, "judges": 2, "judges_per_item": 2, "majority": 2, "human_rewrites": 1}
    )
    folder = str(tmp_path / "study")
    create_study(folder, [runs[s] for s in SYSTEMS], settings)
    return folder, runs


def truth(folder: str) -> dict[str, dict]:
    """What the test (not the reader) knows of each task: kind, systems, rewrite step counts."""
    conn = sqlite3.connect(f"{folder}/study.sqlite")
    conn.row_factory = sqlite3.Row
    out = {}
    for t in conn.execute("SELECT * FROM tasks"):
        steps = None
        if t["kind"] == "rate":
            record = conn.execute(
                "SELECT record FROM rewrites WHERE recipe = ? AND constraint_name = ? AND system = ?",
                (t["recipe"], t["constraint_name"], t["system"]),
            ).fetchone()[0]
            steps = len(json.loads(record)["rewrite"]["steps"])
        out[t["handle"]] = {
            "kind": t["kind"],
            "system": t["system"],
            "other": t["other"],
            "steps": steps,
        }
    conn.close()
    return out


def reader_answers(reader: int, task: dict) -> dict:
    """A reader's answers: the guide's steps are ok and it is cookable; the copy keeps what the
    constraint forbids, except that reader 2 calls the copy's first step ok; guide wins head to head."""
    if task["kind"] == "compare":
        return {"better": "A" if task["system"] == "guide" else "B"}
    marks = ["ok" if task["system"] == "guide" else "breaks_constraint"] * task["steps"]
    if reader == 2 and task["system"] == "copy" and marks:
        marks[0] = "ok"
    return {
        "ratings": {q: 5 if task["system"] == "guide" else 2 for q in QUESTIONS},
        "cookable": "yes" if task["system"] == "guide" else "no",
        "step_marks": marks,
    }


def results_csv(packet_csv: str, out: str, known: dict) -> None:
    """A crowdsourcing results file from a packet's tasks.csv: Input.<field> for what was shown,
    Answer.<field> filled as reader 1 would (step marks as numbered text), plus the service's own
    columns."""
    with open(packet_csv, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    inputs = [k for k in rows[0] if not k.startswith("Answer.")]
    fields = ["HITId", "WorkerId", "AssignmentStatus", "WorkTimeInSeconds"]
    fields += [f"Input.{k}" for k in inputs] + [k for k in rows[0] if k.startswith("Answer.")]
    with open(out, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for i, row in enumerate(rows):
            given = reader_answers(1, known[row["task_handle"]])
            answers = {f"Answer.{q}": v for q, v in given.get("ratings", {}).items()}
            if "step_marks" in given:
                answers["Answer.cookable"] = given["cookable"].upper()  # case does not matter
                answers["Answer.step_marks"] = "; ".join(
                    f"{n}: {m}" for n, m in enumerate(given["step_marks"], 1)
                )
            if "better" in given:
                answers["Answer.better"] = given["better"]
            writer.writerow(
                {
                    "HITId": f"H{i}",
                    "WorkerId": "W1",
                    "AssignmentStatus": "Submitted",
                    "WorkTimeInSeconds": 40 + i,
                    **{f"Input.{k}": row[k] for k in inputs},
                    **{k: "" for k in fields if k.startswith("Answer.")},
                    **answers,
                }
            )


def filled_json(template_path: str, out: str, known: dict, reader: int) -> None:
    """answers.json with every null replaced as `reader` would."""
    with open(template_path, encoding="utf-8") as handle:
        data = json.load(handle)
    for handle_, entry in data["answers"].items():
        entry.update(reader_answers(reader, known[handle_]))
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(data, handle)


def stored_answers(folder: str) -> int:
    conn = sqlite3.connect(f"{folder}/study.sqlite")
    try:
        return conn.execute("SELECT COUNT(*) FROM answers").fetchone()[0]
    finally:
        conn.close()


def test_packets_import_and_report_without_a_server(study, tmp_path, capsys):
    folder, _runs = study
    known = truth(folder)
    packets = tmp_path / "packets"
    assert (
        rrt(["judge", "packet", "--study", folder, "--output", str(packets), "--readers", "2"]) == 0
    )
    assert "hand rewrites stay on the site" in capsys.readouterr().out
    for judge in ("judge-01", "judge-02"):
        names = {p.name for p in (packets / judge).iterdir()}
        assert names == {"packet.md", "packet.html", "tasks.csv", "answers.json"}
        for name in names:
            text = (packets / judge / name).read_text(encoding="utf-8")
            # Blind: no system name, run folder or score; the rubric version is stated.
            assert not re.search(r"\b(guide|copy|system|score)\b", text, re.IGNORECASE), (
                judge,
                name,
            )
            assert str(tmp_path / "runs") not in text and "runs/" not in text
            assert RUBRIC_VERSION in text
    # The study's own order and handles for that judge, hand rewrites left out.
    with Study(folder).connection() as conn:
        order = [
            r[0]
            for r in conn.execute(
                "SELECT t.handle FROM assignments a JOIN tasks t ON t.id = a.task JOIN judges j ON "
                "j.id = a.judge WHERE j.name = 'judge-01' AND t.kind != 'rewrite' ORDER BY a.position"
            )
        ]
    with open(packets / "judge-01" / "tasks.csv", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["task_handle"] for r in rows] == order
    assert all(not r[k] for r in rows for k in r if k.startswith("Answer."))
    first_rate = next(r for r in rows if r["kind"] == "rate")
    assert first_rate["recipe_source"].startswith("Title: ") and "\n1. " in first_rate["rewrite_a"]
    template = json.loads((packets / "judge-01" / "answers.json").read_text())
    assert list(template["answers"]) == order and template["rubric_version"] == RUBRIC_VERSION
    entry = template["answers"][first_rate["task_handle"]]
    assert entry["cookable"] is None and entry["ratings"] == dict.fromkeys(QUESTIONS)
    assert entry["step_marks"] == [None] * known[first_rate["task_handle"]]["steps"]
    markdown = (packets / "judge-01" / "packet.md").read_text()
    assert (
        "### Rewrite A" in markdown
        and "### Rewrite B" in markdown
        and "Rubric (version 1)" in markdown
    )
    assert "Could a cook follow this and get the dish, within the constraint?" in markdown
    assert "<ol>" in (packets / "judge-01" / "packet.html").read_text()

    # Reader 1 answers through a crowdsourcing service (results CSV), reader 2 in answers.json.
    results = tmp_path / "results.csv"
    results_csv(str(packets / "judge-01" / "tasks.csv"), str(results), known)
    answers = tmp_path / "judge-02.json"
    filled_json(str(packets / "judge-02" / "answers.json"), str(answers), known, reader=2)
    capsys.readouterr()
    assert rrt(["judge", "import", "--study", folder, "--answers", str(results)]) == 0
    assert (
        rrt(
            ["judge", "import", "--study", folder, "--answers", str(answers), "--judge", "judge-02"]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert f"{len(order)} tasks stored, 0 already stored" in printed
    # Stored as if given on the site: finished, each task's answers once, origin and rubric kept.
    s = Study(folder)
    rows_by_judge = {}
    for row in s.judgments():
        rows_by_judge.setdefault(row["judge"], []).append(row)
        assert row["origin"].startswith("import:") and row["rubric"] == RUBRIC_VERSION
    rated = sum(k["kind"] == "rate" for k in known.values())
    compared = sum(k["kind"] == "compare" for k in known.values())
    assert all(len(r) == rated * 6 + compared for r in rows_by_judge.values())
    times = {a["judge"]: a for a in s.assignments() if a["kind"] == "rate"}
    assert times["judge-01"]["seconds"] >= 40  # WorkTimeInSeconds of the results file

    # The report: step marks per system and constraint, cookable share, agreement.
    output = tmp_path / "report"
    assert rrt(["judge", "report", "--study", folder, "--output", str(output)]) == 0
    report = json.loads((output / "report.json").read_text())
    assert report["rubric_version"] == RUBRIC_VERSION
    marks = report["step_marks"]
    guide, copy = marks["tables"]["by_system"]["guide"], marks["tables"]["by_system"]["copy"]
    copy_steps = sum(
        k["steps"] for k in known.values() if k["kind"] == "rate" and k["system"] == "copy"
    )
    copy_items = sum(k["kind"] == "rate" and k["system"] == "copy" for k in known.values())
    assert guide["shares"]["ok"] == 1 and guide["cookable"] == 1 and guide["recipes"] == 2 * 6
    assert copy["steps"] == 2 * copy_steps and copy["cookable"] == 0
    assert copy["shares"]["ok"] == pytest.approx(copy_items / (2 * copy_steps))
    assert copy["shares"]["breaks_constraint"] == pytest.approx(1 - copy_items / (2 * copy_steps))
    assert sum(v for v in copy["shares"].values()) == pytest.approx(1)
    per_constraint = marks["tables"]["by_constraint"]
    assert len(per_constraint) == 2 * 6 and sum(r["steps"] for r in per_constraint.values()) == (
        guide["steps"] + copy["steps"]
    )
    agreement = marks["agreement"]["step_marks"]
    units = guide["steps"] // 2 + copy_steps
    assert agreement["units"] == agreement["pairs"] == units
    assert agreement["percent"] == pytest.approx(100 * (units - copy_items) / units)
    codes = {m: i for i, m in enumerate(STEP_MARKS)}
    by_unit: dict = {}
    for row in s.judgments():
        if row["question"] == "step_marks":
            for i, m in enumerate(row["value"]):
                by_unit.setdefault((row["task"], i), {})[row["judge"]] = codes[m]
    assert agreement["alpha"] == pytest.approx(alpha(by_unit, "nominal"))
    assert 0 < agreement["alpha"] < 1
    assert marks["agreement"]["cookable"]["percent"] == 100
    assert marks["agreement"]["cookable"]["alpha"] == 1
    assert report["head_to_head"]["copy"]["wins"] == 6
    md = (output / "report.md").read_text()
    assert "## Step marks and cookable (rubric version 1)" in md and "Rubric version 1." in md
    assert "| guide | " in md and "| copy / " in md and "| step marks | " in md
    assert "Step marks and cookable" in (output / "report.html").read_text()
    assert md == study_markdown(build_report(s))
    # ... and the export carries them.
    assert rrt(["judge", "export", "--study", folder, "--output", str(tmp_path / "export")]) == 0
    exported = [
        json.loads(line)
        for line in (tmp_path / "export" / "judgments.jsonl").read_text().splitlines()
    ]
    assert {r["question"] for r in exported} >= {"step_marks", "cookable", "choice", *QUESTIONS}


def test_importing_twice_stores_nothing_twice(study, tmp_path, capsys):
    folder, _ = study
    known = truth(folder)
    packets = tmp_path / "packets"
    assert (
        rrt(["judge", "packet", "--study", folder, "--output", str(packets), "--judge", "judge-01"])
        == 0
    )
    assert not (packets / "judge-02").exists()
    answers = tmp_path / "a.json"
    filled_json(str(packets / "judge-01" / "answers.json"), str(answers), known, reader=1)
    results = tmp_path / "results.csv"
    results_csv(str(packets / "judge-01" / "tasks.csv"), str(results), known)
    s = Study(folder)
    first = import_file(s, str(answers), None, 20000)
    assert first["stored"] > 0 and first["already"] == 0
    count = stored_answers(folder)
    # The same file, and the same answers as a results CSV: nothing new.
    again = import_file(s, str(answers), None, 20000)
    assert again["stored"] == 0 and again["already"] == first["stored"]
    as_csv = import_file(s, str(results), "judge-01", 20000)
    assert as_csv["stored"] == 0 and as_csv["already"] == first["stored"]
    assert stored_answers(folder) == count
    # Other answers to a finished task are refused: answers are final.
    data = json.loads(answers.read_text())
    handle = next(h for h, e in data["answers"].items() if e["kind"] == "compare")
    data["answers"][handle]["better"] = "same"
    answers.write_text(json.dumps(data))
    with pytest.raises(ImportRefused) as refused:
        import_file(s, str(answers), None, 20000)
    assert any("already finished with other answers" in r for _, r in refused.value.errors)
    assert stored_answers(folder) == count
    # A packet written now holds only what is left: the hand rewrite stays on the site.
    assert (
        rrt(
            [
                "judge",
                "packet",
                "--study",
                folder,
                "--output",
                str(tmp_path / "p2"),
                "--judge",
                "judge-01",
            ]
        )
        == 0
    )
    assert "judge-01: 0 tasks" in capsys.readouterr().out


def test_a_bad_answers_file_names_each_bad_row_and_stores_nothing(study, tmp_path, capsys):
    folder, _ = study
    known = truth(folder)
    packets = tmp_path / "packets"
    assert rrt(["judge", "packet", "--study", folder, "--output", str(packets)]) == 0
    template = json.loads((packets / "judge-01" / "answers.json").read_text())
    handles = list(template["answers"])
    for h in handles:
        template["answers"][h].update(reader_answers(1, known[h]))
    rates = [h for h in handles if known[h]["kind"] == "rate"]
    compare = next(h for h in handles if known[h]["kind"] == "compare")
    template["answers"][rates[0]]["ratings"]["overall"] = 7
    template["answers"][rates[1]]["cookable"] = "maybe"
    template["answers"][rates[2]]["step_marks"] = ["ok"]
    template["answers"][rates[3]]["step_marks"][0] = "tasty"
    template["answers"][rates[4]]["better"] = "A"
    template["answers"][compare]["better"] = "left"
    template["answers"][rates[5]]["ratings"]["closeness"] = None
    template["answers"]["0" * 24] = {"better": "A"}
    # The hand rewrite: one judge's task, done on the site only.
    hand = next(h for h, k in known.items() if k["kind"] == "rewrite")
    with Study(folder).connection() as conn:
        holder = conn.execute(
            "SELECT j.name FROM assignments a JOIN judges j ON j.id = a.judge JOIN tasks t "
            "ON t.id = a.task WHERE t.handle = ?",
            (hand,),
        ).fetchone()[0]
    template["answers"][hand] = {"better": "A"}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(template))
    before = stored_answers(folder)
    capsys.readouterr()
    assert rrt(["judge", "import", "--study", folder, "--answers", str(path)]) == 2
    err = capsys.readouterr().err
    row = {h: i for i, h in enumerate(template["answers"], 1)}
    expected = [
        (rates[0], "a whole number from 1 to 5 (got 7)"),
        (rates[1], "cookable is yes or no (got 'maybe')"),
        (rates[2], "one mark per rewritten step"),
        (rates[3], "'tasty' is no mark"),
        (rates[4], "is a rating task: leave better empty"),
        (compare, "better is A, B or same (got 'left')"),
        (rates[5], "needs: closeness"),
        ("0" * 24, "no task '000000000000000000000000' in this study"),
        (
            hand,
            "is a hand rewrite: those are done on the site"
            if holder == "judge-01"
            else "is not one of judge-01's tasks",
        ),
    ]
    for handle, reason in expected:
        line = next((ln for ln in err.splitlines() if f"row {row[handle]}:" in ln), "")
        assert reason in line, (handle, reason, err)
    assert "9 bad row(s); nothing imported" in err.splitlines()[-1]
    assert stored_answers(folder) == before  # nothing, not even the good rows
    # A CSV: rows counted as in a spreadsheet (header row 1); blank rows are skipped.
    with open(packets / "judge-02" / "tasks.csv", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    rows[0]["Answer.overall"] = "four"
    rows[1]["Answer.step_marks"] = "2: ok, 1: ok"
    bad_csv = tmp_path / "bad.csv"
    with open(bad_csv, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert rrt(["judge", "import", "--study", folder, "--answers", str(bad_csv)]) == 2
    err = capsys.readouterr().err
    assert "row 2: task" in err and "overall is a whole number 1-5 (got 'four')" in err
    assert "row 3: task" in err and "number every step 1, 2, 3" in err
    assert "2 bad row(s)" in err and stored_answers(folder) == before
    for argv, line in (
        (["--answers", str(tmp_path / "none.json")], "no answers file"),
        (["--answers", str(packets / "judge-01" / "packet.md")], "answers come as .csv or .json"),
        (["--answers", str(packets / "judge-01" / "answers.json")], "holds no answers"),
        (["--answers", str(path), "--judge", "judge-02"], "row 1: task"),
    ):
        assert rrt(["judge", "import", "--study", folder, *argv]) == 2
        assert line in capsys.readouterr().err


def test_the_site_takes_step_marks_and_cookable_but_does_not_require_them(study):
    folder, _ = study
    s = Study(folder)
    judge = s.judges()[0]["id"]
    while (task := s.next_task(judge))["kind"] != "rate":
        s.answer(judge, task["id"], "choice", "left", 20000)
        s.finish(judge, task["id"])
    steps = len(task["rewrites"][0]["steps"])
    with pytest.raises(AnswerError, match="one mark per rewritten step"):
        s.answer(judge, task["id"], "step_marks", ["ok"] * (steps + 1), 20000)
    for bad in ("ok", [1], [{"a": 1}], ["fine"]):
        with pytest.raises(AnswerError):
            s.answer(judge, task["id"], "step_marks", bad, 20000)
    with pytest.raises(AnswerError, match="yes or no"):
        s.answer(judge, task["id"], "cookable", True, 20000)
    partial = [None] * steps
    partial[0] = "no_sense"
    assert s.answer(judge, task["id"], "step_marks", partial, 20000)[0] == partial
    assert s.answer(judge, task["id"], "cookable", "no", 20000)[0] == "no"
    for q in QUESTIONS:
        s.answer(judge, task["id"], q, 3, 20000)
    s.finish(judge, task["id"])
    report = build_report(s)
    row = next(iter(report["step_marks"]["tables"]["by_system"].values()))
    assert row["steps"] == 1 and row["shares"]["no_sense"] == 1 and row["cookable"] == 0


def test_a_two_reader_study_is_created_from_the_command_line_with_its_majority(tmp_path, capsys):
    runs = write_runs(str(SAMPLE), str(tmp_path / "runs"), SYSTEMS)
    folder = str(tmp_path / "study")
    base = ["judge", "create", "--study", folder, "--rewrites", ",".join(runs[s] for s in SYSTEMS)]
    two = ["--recipes", "4", "--judges", "2", "--judges-per-item", "2", "--human-rewrites", "0"]
    # The config's majority (3) cannot be reached by two readers: a one-line error, nothing made.
    assert rrt([*base, *two]) == 2 and not os.path.exists(os.path.join(folder, "create.json"))
    assert "majority must be at most judges_per_item" in capsys.readouterr().err
    assert rrt([*base, *two, "--majority", "2"]) == 0
    assert Study(folder).meta()["majority"] == 2

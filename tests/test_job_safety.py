"""Run folders stay safe: --overwrite replaces only a run of the same job, manifests are written
whole, cut JSONL lines are skipped, one run at a time holds a folder, and dropped tasks are counted.
Library functions are called directly; no test here starts Ray."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, SAMPLE

from runtime.runs import (
    LOCK_FILE,
    JobError,
    check_claim,
    check_replaceable,
    claim_output,
    read_jsonl,
    read_manifest,
    write_json_atomic,
)


def manifest(folder) -> dict:
    return json.loads((folder / "run.json").read_text())


# --- item 8: --overwrite ------------------------------------------------------------------------


def test_overwrite_refuses_the_current_folder_its_ancestors_and_home(tmp_path, monkeypatch):
    here = tmp_path / "a" / "b"
    here.mkdir(parents=True)
    (here / "keep.txt").write_text("mine")
    home = tmp_path / "home"
    home.mkdir()
    (home / "keep.txt").write_text("mine")
    monkeypatch.chdir(here)
    monkeypatch.setenv("HOME", str(home))
    for out in (".", str(here), str(tmp_path / "a"), str(tmp_path), "~", str(home)):
        with pytest.raises(JobError, match="will not delete"):
            claim_output(os.path.expanduser(out), "rewrite", "f1", {}, overwrite=True)
    assert (here / "keep.txt").exists() and (home / "keep.txt").exists()


def test_overwrite_refuses_the_root_folder():
    with pytest.raises(JobError, match="will not delete /"):
        check_replaceable("/", "rewrite")


def test_overwrite_refuses_a_folder_of_unrelated_files(tmp_path):
    out = tmp_path / "thesis"
    out.mkdir()
    (out / "chapter1.tex").write_text("years of work")
    with pytest.raises(
        JobError, match="replaces only a rewrite run.*files that are not an rrt run"
    ):
        claim_output(str(out), "rewrite", "f1", {}, overwrite=True)
    assert (out / "chapter1.tex").exists() and not (out / LOCK_FILE).exists()


def test_overwrite_refuses_a_run_of_another_job_and_a_run_naming_no_job(tmp_path):
    prepared = tmp_path / "prepared"
    claim_output(str(prepared), "prepare_data", "p1", {}, overwrite=False)
    (prepared / "recipes").mkdir()
    with pytest.raises(JobError, match="replaces only a rewrite run.*a prepare_data run"):
        claim_output(str(prepared), "rewrite", "r1", {}, overwrite=True)
    assert (prepared / "recipes").is_dir() and manifest(prepared)["job"] == "prepare_data"
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "run.json").write_text(json.dumps({"fingerprint": "r1", "settings": {}}))
    with pytest.raises(JobError, match="does not name its job"):
        claim_output(str(legacy), "rewrite", "r1", {}, overwrite=True)
    assert (legacy / "run.json").exists()
    # A run written before manifests named their job is known by its settings: a prepared folder
    # stays, a rewrite folder is replaced by a rewrite run.
    (legacy / "run.json").write_text(
        json.dumps({"fingerprint": "p0", "settings": {"inputs": ["a.jsonl"]}})
    )
    with pytest.raises(JobError, match="a prepare_data run"):
        claim_output(str(legacy), "train", "t1", {}, overwrite=True)
    (legacy / "run.json").write_text(
        json.dumps({"fingerprint": "r0", "settings": {"system": "retrieval"}})
    )
    assert claim_output(str(legacy), "rewrite", "r1", {}, overwrite=True) is False


def test_overwrite_replaces_a_run_of_the_same_job_and_takes_missing_or_empty_folders(tmp_path):
    out = tmp_path / "run"
    assert claim_output(str(out), "rewrite", "r1", {"n": 1}, overwrite=False) is False
    assert manifest(out)["job"] == "rewrite"
    (out / "rewrites.jsonl").write_text("{}\n")
    (out / "sub").mkdir()
    assert claim_output(str(out), "rewrite", "r2", {"n": 2}, overwrite=True) is False
    assert sorted(os.listdir(out)) == ["run.json", LOCK_FILE]
    assert manifest(out)["fingerprint"] == "r2" and manifest(out)["settings"] == {"n": 2}
    empty = tmp_path / "empty"
    empty.mkdir()
    assert claim_output(str(empty), "train", "t1", {}, overwrite=True) is False
    assert claim_output(str(tmp_path / "missing"), "train", "t1", {}, overwrite=True) is False


def test_resuming_into_a_run_of_another_job_is_refused(tmp_path):
    out = tmp_path / "run"
    claim_output(str(out), "prepare_data", "same", {}, overwrite=False)
    with pytest.raises(JobError, match="holds a prepare_data run, not a rewrite run"):
        claim_output(str(out), "rewrite", "same", {}, overwrite=False)


def test_a_claim_that_would_be_refused_is_told_before_any_start_and_touches_nothing(tmp_path):
    out = tmp_path / "run"
    claim_output(str(out), "train", "same", {}, overwrite=False)
    held = sorted(os.listdir(out))
    for job, mark, resume, message in [
        ("train", "other", None, "a run with other inputs or settings"),
        ("train", "same", False, "pass --resume to continue it"),
        ("rewrite", "same", None, "holds a train run, not a rewrite run"),
    ]:
        with pytest.raises(JobError, match=message):
            check_claim(str(out), job, mark, False, resume)
        with pytest.raises(JobError, match=message):  # claim_output judges alike
            claim_output(str(out), job, mark, {}, False, resume)
    check_claim(str(out), "train", "same", False, None)  # the same run resumes
    check_claim(str(out), "train", "other", True)  # --overwrite replaces a run of the same job
    assert sorted(os.listdir(out)) == held
    new = tmp_path / "new"
    check_claim(str(new), "train", "same", False)
    with pytest.raises(JobError, match="nothing to resume"):
        check_claim(str(new), "train", "same", False, True)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("buy flour")
    with pytest.raises(JobError, match="holds no rrt run"):
        check_claim(str(tmp_path / "notes"), "train", "same", False)
    assert not new.exists() and os.listdir(tmp_path / "notes") == ["todo.txt"]


def test_a_refused_overwrite_is_one_error_line_and_exit_code_2(tmp_path, capsys):
    from jobs.prepare_data import main

    out = tmp_path / "notes"
    out.mkdir()
    (out / "todo.txt").write_text("buy flour")
    assert main(["--input", str(SAMPLE), "--output", str(out), "--overwrite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "prepare_data: error: --overwrite replaces only a prepare_data run"
    )
    assert (out / "todo.txt").exists()


# --- item 9: atomic manifests, cut JSONL lines ---------------------------------------------------


def test_a_manifest_write_killed_before_it_is_whole_leaves_no_manifest(tmp_path, monkeypatch):
    out = tmp_path / "run"

    def killed(fd):
        raise OSError("killed mid-write")

    monkeypatch.setattr(os, "fsync", killed)
    with pytest.raises(OSError, match="killed mid-write"):
        claim_output(str(out), "rewrite", "r1", {}, overwrite=False)
    assert os.listdir(out) == [LOCK_FILE]
    monkeypatch.undo()
    assert claim_output(str(out), "rewrite", "r1", {}, overwrite=False) is False
    assert manifest(out)["fingerprint"] == "r1"


def test_an_interrupted_rewrite_of_a_json_file_keeps_the_old_one(tmp_path, monkeypatch):
    path = tmp_path / "run.json"
    write_json_atomic(str(path), {"counts": 1})
    monkeypatch.setattr(
        os, "replace", lambda *a: (_ for _ in ()).throw(OSError("killed before rename"))
    )
    with pytest.raises(OSError):
        write_json_atomic(str(path), {"counts": 2})
    assert json.loads(path.read_text()) == {"counts": 1} and os.listdir(tmp_path) == ["run.json"]


def test_a_half_written_run_json_is_a_clear_job_error(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text('{"job": "rewrite", "fingerp')
    for overwrite in (False, True):
        with pytest.raises(JobError, match="run.json is unreadable.*delete it by hand"):
            claim_output(str(out), "rewrite", "r1", {}, overwrite=overwrite)
    with pytest.raises(JobError, match="unreadable"):
        read_manifest(str(out))
    assert (out / "run.json").exists()


def test_jsonl_readers_skip_a_cut_last_line_only(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0}\n{"step": 5}\n{"step": 1')
    assert read_jsonl(str(path)) == [{"step": 0}, {"step": 5}]
    path.write_text('{"step": 0}\n{"st\n{"step": 5}\n')
    with pytest.raises(JobError, match="line 2 is not JSON"):
        read_jsonl(str(path))


def test_a_resume_cuts_metrics_back_to_the_checkpoint_past_a_cut_line(tmp_path):
    from jobs.train_worker import trim_metrics

    rows = [{"step": s, "train_loss": 1.0, "eval_loss": None} for s in (0, 5, 10, 15)]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 20, "train_lo')
    trim_metrics(str(tmp_path), 10)
    assert path.read_text().endswith("\n") and [r["step"] for r in read_jsonl(str(path))] == [
        0,
        5,
        10,
    ]
    trim_metrics(str(tmp_path), -1)
    assert path.read_text() == ""


def test_the_loss_plot_reads_metrics_with_a_cut_last_line(tmp_path):
    from jobs.train import plot_loss

    rows = [
        {"step": 0, "train_loss": None, "eval_loss": 3.0},
        {"step": 5, "train_loss": 2.5, "eval_loss": 2.4},
    ]
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows) + '{"step": 10, "tr'
    )
    plot_loss(str(tmp_path))
    assert (tmp_path / "loss.png").stat().st_size > 0


# --- item 10: odd ids on resume, one run per folder ---------------------------------------------


def test_resume_reads_ids_holding_unicode_line_breaks(tmp_path):
    from jobs.rewrite import done_keys

    ids = ["plain", "line\u2028sep", "para\u2029sep", "next\x85line", "form\x0cfeed"]
    path = tmp_path / "rewrites.jsonl"
    text = "".join(
        json.dumps({"id": i, "constraint": "vegan"}, ensure_ascii=False) + "\n" for i in ids
    )
    assert "\u2028" in text
    path.write_text(text + '{"id": "cut", "constr', encoding="utf-8")
    assert done_keys(str(path)) == {(i, "vegan") for i in ids}
    assert path.read_text(encoding="utf-8") == text


def test_a_folder_held_by_another_run_is_refused_until_that_run_ends(tmp_path):
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys; from runtime.runs import claim_output; "
                f"claim_output({str(out)!r}, 'rewrite', 'r1', {{}}, False); print('claimed', flush=True); sys.stdin.read()"
            ),
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "claimed"
        with pytest.raises(JobError, match="another run holds .*choose another --output"):
            claim_output(str(out), "rewrite", "r1", {}, overwrite=False)
        with pytest.raises(JobError, match="another run holds"):
            claim_output(str(out), "rewrite", "r1", {}, overwrite=True)
        assert manifest(out)["fingerprint"] == "r1"
    finally:
        holder.stdin.close()
        holder.wait()
    assert holder.returncode == 0
    assert claim_output(str(out), "rewrite", "r1", {}, overwrite=False) is True


def test_the_lock_is_taken_on_every_claim(tmp_path):
    out = tmp_path / "run"
    claim_output(str(out), "train", "t1", {}, overwrite=False)
    with open(out / LOCK_FILE) as other, pytest.raises(BlockingIOError):
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)


# --- item 11: dropped tasks ---------------------------------------------------------------------


def test_tasks_whose_source_recipe_is_missing_are_counted_and_named():
    from jobs.rewrite import build_tasks, dropped_warning

    keys = [("a", "vegan"), ("b", "vegan,nut-free"), ("gone1", "vegan"), ("gone2", "egg-free")]
    recipes = {"a": {"id": "a"}, "b": {"id": "b"}}
    tasks, missing = build_tasks(keys, recipes)
    assert [(t["id"], t["constraints"]) for t in tasks] == [
        ("a", ["vegan"]),
        ("b", ["vegan", "nut-free"]),
    ]
    assert missing == ["gone1", "gone2"]
    assert dropped_warning(missing) == (
        "rewrite: warning: 2 tasks dropped: source recipe missing (first ids: gone1, gone2)"
    )
    assert dropped_warning([]) is None
    assert dropped_warning([f"x{n}" for n in range(9)]).endswith("(first ids: x0, x1, x2, x3, x4)")


def test_the_rewrite_run_reports_and_records_dropped_tasks(tmp_path, monkeypatch, capsys):
    from jobs import rewrite
    from rrt.config import load_settings

    config = load_settings()
    settings = rewrite.RewriteRun.model_validate(
        {
            **config.rewrite.model_dump(),
            "output": str(tmp_path / "run"),
            "data": str(tmp_path / "data"),
            "system": "rule_based",
            "constrained": False,
            "seed": 1,
            "ray": config.ray.model_dump(),
        }
    )
    task = {"id": "a", "constraints": ["vegan"], "source": {"id": "a"}, "retrieved": None}
    claim_output(
        settings.output,
        "rewrite",
        rewrite.fingerprint(settings),
        settings.model_dump(),
        overwrite=False,
    )
    # The one kept task is already written, so the run needs no Ray work.
    (tmp_path / "run" / rewrite.REWRITES).write_text(
        json.dumps({"id": "a", "constraint": "vegan"}) + "\n"
    )
    monkeypatch.setattr(rewrite, "start_ray", lambda *_: False)
    monkeypatch.setattr(
        rewrite, "plan_tasks", lambda _settings: ([task], ["gone1", "gone2", "gone3"])
    )
    result = rewrite.run(settings, overwrite=False)
    err = capsys.readouterr().err
    assert (
        "rewrite: warning: 3 tasks dropped: source recipe missing (first ids: gone1, gone2, gone3)"
        in err
    )
    assert result["dropped"] == {"source_recipe_missing": 3}
    assert manifest(tmp_path / "run")["dropped"] == {"source_recipe_missing": 3}


def test_a_resumed_rewrite_with_nothing_left_prints_no_empty_rate():
    from jobs.rewrite import summary

    counts = {
        "written": 0,
        "done_earlier": 9,
        "steps": 0,
        "steps_fallback": 0,
        "empty_steps": 0,
        "disguised_food_steps": 0,
    }
    line = summary(
        {"counts": counts, "steps_per_s": None, "actors_used": 0, "engine": {}}, False, "out/rw"
    )
    assert (
        line.startswith("rewrite: 0 recipes written (9 done earlier), 0 steps; ")
        and "None" not in line
    )
    # Counts from a run before decisions were counted say none; a run with them says them.
    assert "steps kept" not in line
    decided = {**counts, "steps": 3, "steps_kept": 1, "steps_guide": 2, "steps_model": 0}
    assert "steps kept 1, the guide's 2, the model's 0" in summary(
        {"counts": decided, "steps_per_s": 1.0, "actors_used": 1, "engine": {}}, False, "out/rw"
    )
    busy = summary(
        {
            "counts": {**counts, "written": 9, "done_earlier": 0, "steps": 36},
            "steps_per_s": 3.7,
            "actors_used": 2,
            "engine": {"words_taken_back": 4},
        },
        True,
        "out/rw",
    )
    assert (
        "36 steps, 3.7 steps/s on 2 actors;" in busy
        and ", 4 forbidden words taken back while sampling;" in busy
    )


# --- a rewrites.jsonl cut by a stopped run ------------------------------------------------------


def test_a_cut_rewrites_file_is_refused_with_the_command_that_resumes_its_run(
    tmp_path, monkeypatch, capsys
):
    from cli.main import main as rrt
    from jobs import rewrite
    from jobs.evaluate import read_run
    from rrt.config import load_settings

    # The job keeps the command that resumes it (without --overwrite) before its first record.
    config = load_settings()
    out = tmp_path / "run"
    settings = rewrite.RewriteRun.model_validate(
        {
            **config.rewrite.model_dump(),
            "output": str(out),
            "data": str(tmp_path / "data"),
            "system": "rule_based",
            "ray": config.ray.model_dump(),
        }
    )
    monkeypatch.setattr(rewrite, "start_ray", lambda *_: False)
    monkeypatch.setattr(rewrite, "plan_tasks", lambda _settings: ([], []))
    argv = ["--system", "rule_based", "--output", str(out), "--overwrite"]
    rewrite.run(settings, overwrite=False, command=rewrite.resume_command(argv))
    command = f"python jobs/rewrite.py --system rule_based --output {out}"
    assert manifest(out)["command"] == command
    # A run whose last record was cut: rrt judge create and jobs/evaluate.py name that command.
    folder = str(tmp_path / "cut")
    os.mkdir(folder)
    recipe = {"title": "Milk Soup", "ingredients": ["1 cup milk"], "steps": ["Warm the milk."]}
    line = json.dumps({"id": "a", "constraint": "vegan", "source": recipe, "rewrite": recipe})
    with open(os.path.join(folder, "rewrites.jsonl"), "w", encoding="utf-8") as handle:
        handle.write(line + "\n" + line[: len(line) // 2])
    run_json = os.path.join(folder, "run.json")
    write_json_atomic(run_json, {"job": "rewrite", "command": command})
    assert rrt(["judge", "create", "--study", str(tmp_path / "s"), "--rewrites", folder]) == 2
    err = capsys.readouterr().err
    assert "is cut short" in err and "Resuming the job repairs the file" in err
    assert err.rstrip().endswith(command) and err.count("\n") == 1
    with pytest.raises(JobError, match="Resuming the job repairs the file") as refused:
        read_run(folder)
    assert str(refused.value).endswith(command)
    # A run from before the command was kept: the message names its folder.
    write_json_atomic(run_json, {"job": "rewrite"})
    with pytest.raises(JobError, match=f"jobs/rewrite.py command that wrote it, --output {folder}"):
        read_run(folder)

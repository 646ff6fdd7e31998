"""runtime/checkpoints.py: the checkpoint folders under a run's ray/ that Ray Train's snapshot does not
list (left by a worker that failed while reporting) are named and removed; the listed ones stay. A
resume loads only a checkpoint whose files match the manifests its workers wrote."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from runtime.checkpoints import (
    MANIFEST,
    SNAPSHOT,
    check_manifest,
    check_resumable,
    registered,
    remove_unregistered,
    unregistered,
    write_manifest,
)
from runtime.runs import JobError

KEPT, LATEST, PENDING, ORPHAN = (f"checkpoint_2026-01-01_00-00-0{i}.000000" for i in range(4))


def _run_folder(tmp_path, snapshot: str | None):
    """A ray/ folder with four checkpoint folders, a file and another folder, and the given snapshot."""
    folder = tmp_path / "ray"
    for name in (KEPT, LATEST, PENDING, ORPHAN, "other"):
        (folder / name).mkdir(parents=True)
        (folder / name / "train_state.0.json").write_text("{}")
    (folder / "checkpoint_notes.txt").write_text("not a folder")
    if snapshot is not None:
        (folder / SNAPSHOT).write_text(snapshot)
    return folder


def _snapshot() -> str:
    """Ray Train's snapshot as 2.60 writes it: kept results, the latest, a checkpoint awaiting validation."""
    return json.dumps(
        {
            "ray_version": "2.60.0",
            "checkpoint_results": [{"checkpoint_dir_name": KEPT, "metrics": {"step": 10}}],
            "latest_checkpoint_result": {"checkpoint_dir_name": LATEST, "metrics": {"step": 20}},
            "pending_training_results": [[{"checkpoint_dir_name": PENDING}, True]],
        }
    )


def test_only_the_folders_no_list_holds_are_removed(tmp_path):
    folder = _run_folder(tmp_path, _snapshot())
    assert registered(str(folder)) == {KEPT, LATEST, PENDING}
    assert unregistered(str(folder)) == [ORPHAN]
    assert remove_unregistered(str(folder)) == [ORPHAN]
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [KEPT, LATEST, PENDING, "other", "checkpoint_notes.txt", SNAPSHOT]
    )
    assert remove_unregistered(str(folder)) == []


def test_without_a_readable_snapshot_nothing_is_removed(tmp_path):
    for snapshot in (None, "{not json"):
        folder = _run_folder(tmp_path / str(snapshot is None), snapshot)
        assert registered(str(folder)) is None
        assert remove_unregistered(str(folder)) == [] and (folder / ORPHAN).exists()
    assert remove_unregistered(str(tmp_path / "missing")) == []


# --- resuming loads only checkpoints the run wrote (#62 item 12) ----------------------------------


def _two_workers(folder):
    """A checkpoint as two workers report it: each writes its files and its manifest in a folder of
    its own, and Ray merges the folders."""
    parts = {
        0: {
            "ds/mp_rank_00_model_states.pt": b"weights",
            "latest": b"ds",
            "train_state.0.json": b"{}",
        },
        1: {
            "ds/zero_pp_rank_1_mp_rank_00_optim_states.pt": b"moments",
            "train_state.1.json": b"{}",
        },
    }
    for rank, files in parts.items():
        own = folder.parent / f"worker{rank}"
        for name, data in files.items():
            (own / name).parent.mkdir(parents=True, exist_ok=True)
            (own / name).write_bytes(data)
        write_manifest(str(own), rank)
        shutil.copytree(own, folder, dirs_exist_ok=True)
    return folder


def _refused(folder, why: str) -> None:
    with pytest.raises(JobError, match=why) as caught:
        check_manifest(str(folder))
    assert "\n" not in str(caught.value) and "refused" in str(caught.value)


def test_a_checkpoint_the_run_wrote_passes_and_any_change_is_refused(tmp_path):
    folder = _two_workers(tmp_path / "ray" / KEPT)
    check_manifest(str(folder))
    shard = folder / "ds" / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    shard.write_bytes(b"cos\nsystem\n(S'echo owned'\ntR.")  # a pickle that runs a command
    _refused(folder, "zero_pp_rank_1_mp_rank_00_optim_states.pt does not match")
    shard.write_bytes(b"moments")
    (folder / "ds" / "extra.pt").write_bytes(b"x")
    _refused(folder, "ds/extra.pt is in no manifest")
    (folder / "ds" / "extra.pt").unlink()
    (folder / "latest").unlink()
    _refused(folder, "latest is missing")
    (folder / "latest").write_bytes(b"ds")
    (folder / MANIFEST.format(rank=0)).write_text("{not json")
    _refused(folder, "unreadable")
    for manifest in folder.glob(MANIFEST.format(rank="*")):
        manifest.unlink()
    _refused(folder, "no manifest")


def test_a_resume_checks_every_checkpoint_the_snapshot_lists(tmp_path):
    folder = tmp_path / "ray"
    _two_workers(folder / KEPT)
    (folder / LATEST / "ds").mkdir(parents=True)
    (folder / LATEST / "ds" / "mp_rank_00_model_states.pt").write_bytes(b"from elsewhere")
    (folder / SNAPSHOT).write_text(_snapshot())
    with pytest.raises(JobError, match=f"checkpoint {LATEST} .* no manifest"):
        check_resumable(str(folder))
    shutil.rmtree(folder / LATEST)
    check_resumable(str(folder))  # a listed folder that is gone is Ray's to report
    check_resumable(str(tmp_path / "no_run"))


def test_the_training_worker_writes_the_manifest_and_refuses_a_changed_shard(tmp_path, monkeypatch):
    import contextlib
    from types import SimpleNamespace

    import ray.train

    from jobs import train_worker

    class Engine:
        """Saves and loads a shard as DeepSpeed's engine does, into folder/tag."""

        loaded = 0

        def save_checkpoint(self, folder, tag):
            os.makedirs(os.path.join(folder, tag))
            with open(os.path.join(folder, tag, "shard.pt"), "wb") as handle:
                handle.write(b"weights")

        def load_checkpoint(self, folder, tag):
            self.loaded += 1

    stored = tmp_path / "ray" / KEPT

    def report(metrics, checkpoint):
        shutil.copytree(checkpoint.path, stored)

    monkeypatch.setattr(ray.train, "report", report)
    train_worker._checkpoint(Engine(), {"step": 5}, {"step": 5}, 0)
    assert (stored / MANIFEST.format(rank=0)).exists()

    @contextlib.contextmanager
    def as_directory():
        yield str(stored)

    monkeypatch.setattr(
        ray.train, "get_checkpoint", lambda: SimpleNamespace(as_directory=as_directory)
    )
    engine = Engine()
    assert train_worker._restore(engine, str(tmp_path), 0)["step"] == 5 and engine.loaded == 1
    (stored / "ds" / "shard.pt").write_bytes(b"another run's shard")
    with pytest.raises(JobError, match="shard.pt does not match"):
        train_worker._restore(engine, str(tmp_path), 0)
    assert engine.loaded == 1

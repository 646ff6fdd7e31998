"""runtime/checkpoints.py: the checkpoint folders under a run's ray/ that Ray Train's snapshot does not
list (left by a worker that failed while reporting) are named and removed; the listed ones stay."""

from __future__ import annotations

import json

from runtime.checkpoints import SNAPSHOT, registered, remove_unregistered, unregistered

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

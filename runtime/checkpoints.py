"""The checkpoint folders Ray Train keeps under a training run's `<output>/ray/`.

Ray Train writes a checkpoint's folder before its controller registers it. When a worker fails in
between, the folder stays on disk but is in no checkpoint list: no resume can use it, and
`keep_checkpoints` never deletes it (a gpt2-medium checkpoint with its optimizer shards takes
gigabytes). After a run ends, `unregistered` names such folders and `remove_unregistered` deletes
them; the training job reports what it removed.
"""

from __future__ import annotations

import json
import os
import shutil

SNAPSHOT = "checkpoint_manager_snapshot.json"  # Ray Train's list of the checkpoints it keeps
PREFIX = "checkpoint_"  # its checkpoint folders' names


def registered(folder: str) -> set[str] | None:
    """The checkpoint folder names the run's snapshot lists; None when there is no readable snapshot."""
    try:
        with open(os.path.join(folder, SNAPSHOT), encoding="utf-8") as handle:
            snapshot = json.load(handle)
    except (OSError, ValueError):
        return None
    names: set[str] = set()

    def collect(value) -> None:
        """Every `checkpoint_dir_name` anywhere in the snapshot (kept, latest, pending validation)."""
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "checkpoint_dir_name" and isinstance(item, str):
                    names.add(item)
                else:
                    collect(item)
        elif isinstance(value, list):
            for item in value:
                collect(item)

    collect(snapshot)
    return names


def unregistered(folder: str) -> list[str]:
    """Checkpoint folders under `folder` that its snapshot does not list (none without a snapshot)."""
    kept = registered(folder)
    if kept is None or not os.path.isdir(folder):
        return []
    return sorted(
        name
        for name in os.listdir(folder)
        if name.startswith(PREFIX)
        and name not in kept
        and os.path.isdir(os.path.join(folder, name))
    )


def remove_unregistered(folder: str) -> list[str]:
    """Delete the checkpoint folders no checkpoint list holds; their names."""
    names = unregistered(folder)
    for name in names:
        shutil.rmtree(os.path.join(folder, name))
    return names

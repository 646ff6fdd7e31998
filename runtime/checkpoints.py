"""The checkpoint folders Ray Train keeps under a training run's `<output>/ray/`.

Ray Train writes a checkpoint's folder before its controller registers it. When a worker fails in
between, the folder stays on disk but is in no checkpoint list: no resume can use it, and
`keep_checkpoints` never deletes it (a gpt2-medium checkpoint with its optimizer shards takes
gigabytes). After a run ends, `unregistered` names such folders and `remove_unregistered` deletes
them; the training job reports what it removed.

Resuming unpickles a checkpoint's files (DeepSpeed loads its shards with `weights_only=False`), so a
checkpoint runs code. Each worker writes a manifest beside its files, their SHA-256 each
(`write_manifest`); a resume refuses a checkpoint whose files are not exactly those its manifests
list, with those hashes, or that has no manifest (`check_manifest`, `check_resumable`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

from runtime.runs import JobError

SNAPSHOT = "checkpoint_manager_snapshot.json"  # Ray Train's list of the checkpoints it keeps
PREFIX = "checkpoint_"  # its checkpoint folders' names
MANIFEST = "rrt_manifest.{rank}.json"  # a worker's files in a checkpoint, with their SHA-256
MANIFESTS = "rrt_manifest."  # what every worker's manifest name starts with


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


def _files(folder: str) -> dict[str, str]:
    """Every file under `folder` but the manifests, by its path relative to `folder`."""
    found = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            relative = os.path.relpath(path, folder).replace(os.sep, "/")
            if not (root == folder and name.startswith(MANIFESTS)):
                found[relative] = path
    return found


def _sha256(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def write_manifest(folder: str, rank: int) -> str:
    """Record the SHA-256 of every file a worker wrote into its checkpoint `folder`; the manifest's path."""
    listed = {relative: _sha256(path) for relative, path in sorted(_files(folder).items())}
    path = os.path.join(folder, MANIFEST.format(rank=rank))
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"sha256": listed}, handle, indent=0)
    return path


def check_manifest(folder: str) -> None:
    """Refuse (JobError, one line) a checkpoint whose files are not exactly those its workers'
    manifests list with those hashes, or that has no manifest: the run did not write it."""
    name = os.path.basename(os.path.normpath(folder))

    def refuse(why: str) -> JobError:
        return JobError(
            f"checkpoint {name} in {os.path.dirname(os.path.normpath(folder))}: {why}; this run did "
            "not write it as it is, and resuming would unpickle it, so it is refused (start over "
            "with --overwrite, or resume a copy you trust)"
        )

    manifests = sorted(n for n in os.listdir(folder) if n.startswith(MANIFESTS))
    if not manifests:
        raise refuse("it has no manifest of its files")
    listed: dict[str, str] = {}
    for manifest in manifests:
        try:
            with open(os.path.join(folder, manifest), encoding="utf-8") as handle:
                hashes = json.load(handle)["sha256"]
            entries = [(str(k), str(v)) for k, v in hashes.items()]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise refuse(f"its manifest {manifest} is unreadable") from None
        for relative, digest in entries:
            if listed.setdefault(relative, digest) != digest:
                raise refuse(f"its manifests disagree on {relative}")
    present = _files(folder)
    unlisted = sorted(set(present) - set(listed))
    if unlisted:
        raise refuse(f"{unlisted[0]} is in no manifest")
    missing = sorted(set(listed) - set(present))
    if missing:
        raise refuse(f"{missing[0]} is missing")
    for relative, digest in sorted(listed.items()):
        if _sha256(present[relative]) != digest:
            raise refuse(f"{relative} does not match its manifest")


def check_resumable(folder: str) -> None:
    """Check every checkpoint that the run's snapshot under `folder` (its `ray/`) lists, before a
    resume loads one; a JobError line for the first that fails."""
    for name in sorted(registered(folder) or ()):
        if os.path.isdir(os.path.join(folder, name)):
            check_manifest(os.path.join(folder, name))

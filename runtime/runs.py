"""Run folders: one-line job errors, the folder a job claims (locked, replaced only when it holds
a run of the same job, resumed when its fingerprint matches), atomic manifest writes and
append-only JSONL records."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import time
import uuid

MANIFEST = "run.json"
LOCK_FILE = "run.lock"
# Open lock files by run folder: closing one would release its lock, so they live as long as the process.
_HELD_LOCKS: dict[str, object] = {}


class JobError(Exception):
    """A problem to report as one line before (or instead of) any work."""


def write_atomic(path: str, text: str) -> None:
    """Write a file whole or not at all: a temp file beside it, fsynced, then renamed over it."""
    tmp = f"{path}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_json_atomic(path: str, value) -> None:
    """Write a JSON document (a manifest, stats) atomically, indented for reading."""
    write_atomic(path, json.dumps(value, indent=2, default=str))


def read_jsonl(path: str) -> list[dict]:
    """The rows of an append-only JSONL file; a cut last line (a writer killed mid-line) is skipped,
    an unreadable line before it is a JobError."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        lines = [line for line in handle.read().split("\n") if line.strip()]
    rows = []
    for number, line in enumerate(lines, 1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines):
                raise JobError(f"{path} line {number} is not JSON; the file is damaged") from None
    return rows


def read_manifest(out: str) -> dict | None:
    """A run folder's run.json, None when it has none; an unreadable one is a JobError."""
    path = os.path.join(out, MANIFEST)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise JobError(
            f"{path} is unreadable ({type(err).__name__}), likely cut off mid-write; "
            f"look at {out} and delete it by hand to start again"
        ) from None
    if not isinstance(manifest, dict):
        raise JobError(
            f"{path} is not an rrt run manifest; look at {out} and delete it by hand to start again"
        )
    return manifest


def _entries(out: str) -> list[str]:
    """What a folder holds besides the run lock; [] when the folder is missing."""
    return [name for name in os.listdir(out) if name != LOCK_FILE] if os.path.isdir(out) else []


# Runs written before manifests named their job: each job's settings have a key of their own.
_LEGACY_KEYS = {"system": "rewrite", "variant": "train", "inputs": "prepare_data"}


def job_of(manifest: dict) -> str | None:
    """The job that wrote a run manifest (read from its settings for runs that predate the name)."""
    if manifest.get("job"):
        return manifest["job"]
    settings = manifest.get("settings") if isinstance(manifest.get("settings"), dict) else {}
    return next((job for key, job in _LEGACY_KEYS.items() if key in settings), None)


def check_replaceable(out: str, job: str) -> None:
    """Refuse --overwrite of anything but a missing or empty folder or a run of this same job.

    rmtree cannot be undone: a slip such as `--output .` or `--output ~`, or the data folder of
    another stage given as --output, would otherwise delete the checkout, a home or the inputs.
    """
    path = os.path.realpath(out)
    here = os.path.realpath(os.getcwd())
    guarded = {os.path.realpath(os.path.expanduser("~")), os.path.realpath(os.sep)}
    if path in guarded or here == path or here.startswith(path.rstrip(os.sep) + os.sep):
        raise JobError(
            f"--overwrite will not delete {out}: it is the current folder, one above it, "
            "the home folder or /; choose a run folder of its own"
        )
    if not _entries(path):
        return
    earlier = read_manifest(path)
    if earlier is None or job_of(earlier) != job:
        what = (
            "files that are not an rrt run"
            if earlier is None
            else f"a {job_of(earlier)} run"
            if job_of(earlier)
            else "a run that does not name its job"
        )
        raise JobError(
            f"--overwrite replaces only a {job} run, and {out} holds {what}; "
            "choose another --output or delete it by hand"
        )


def lock_output(out: str) -> None:
    """Hold an exclusive lock on a run folder until this process ends (the kernel drops a flock
    with its holder, killed or not), so two runs never write into one folder at once."""
    os.makedirs(out, exist_ok=True)
    path = os.path.realpath(out)
    if path in _HELD_LOCKS:
        return
    handle = open(os.path.join(path, LOCK_FILE), "a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise JobError(
            f"another run holds {out} (its {LOCK_FILE} is locked); wait for it to end "
            "or choose another --output"
        ) from None
    except OSError as err:
        # Some network and FUSE filesystems have no flock; the run goes on, as it did before locks.
        handle.close()
        print(
            f"note: {out} cannot be locked ({err.strerror}); make sure no other run writes into it",
            file=sys.stderr,
        )
        return
    _HELD_LOCKS[path] = handle


def _clear(out: str) -> None:
    """Delete what a run folder holds, keeping its lock file (and so the lock) in place."""
    for name in _entries(out):
        path = os.path.join(out, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def _check_folder(out: str, job: str, overwrite: bool) -> None:
    """The refusals told before the lock file is made, so a folder that is not ours is left untouched."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise JobError(f"{out} is a file, not a folder")
    if overwrite:
        check_replaceable(out, job)
    elif _entries(out) and not os.path.exists(os.path.join(out, MANIFEST)):
        raise JobError(f"{out} is not empty and holds no rrt run; choose an empty or new folder")


def _judge_earlier(out: str, job: str, fingerprint: str, resume: bool | None) -> bool:
    """Whether the run in `out` is to be resumed; a JobError when it may be neither resumed nor
    started in that folder."""
    earlier = read_manifest(out)
    if earlier is not None:
        if job_of(earlier) not in (job, None):
            raise JobError(
                f"{out} holds a {job_of(earlier)} run, not a {job} run; use another --output"
            )
        if earlier.get("fingerprint") != fingerprint:
            raise JobError(
                f"{out} holds a run with other inputs or settings; use a new --output, "
                "or --overwrite to replace it"
            )
        if resume is False:
            raise JobError(
                f"{out} holds an earlier run; pass --resume to continue it or --overwrite to replace it"
            )
        return True
    if resume:
        raise JobError(f"nothing to resume in {out}: it holds no run")
    return False


def check_claim(
    out: str, job: str, fingerprint: str, overwrite: bool, resume: bool | None = None
) -> None:
    """claim_output's refusals as the folder stands, told without taking or touching it, so a job
    can say them before a slow start (a Ray to start or join); claim_output judges again under
    its lock."""
    _check_folder(out, job, overwrite)
    if overwrite:
        if resume:  # what --overwrite clears cannot be resumed
            raise JobError(f"nothing to resume in {out}: it holds no run")
        return
    _judge_earlier(out, job, fingerprint, resume)


def claim_output(
    out: str,
    job: str,
    fingerprint: str,
    settings: dict,
    overwrite: bool,
    resume: bool | None = None,
) -> bool:
    """Lock and create or resume a run folder of `job`; refuse one that holds anything else.
    True = resuming.

    resume None resumes a matching run silently; False refuses any earlier run; True needs one.
    """
    _check_folder(out, job, overwrite)
    lock_output(out)
    if overwrite:
        _clear(out)
    if _judge_earlier(out, job, fingerprint, resume):
        return True
    write_json_atomic(
        os.path.join(out, MANIFEST),
        {
            "job": job,
            "fingerprint": fingerprint,
            "settings": settings,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        },
    )
    return False

"""One idle CPU group for the helper processes of a job's own Ray (Linux cgroups, where writable).

SCHED_IDLE on each helper thread (rrt.scheduling) keeps a helper from preempting a compute
thread when it wakes, but the scheduler still credits every waking task on its own: seventeen
helpers that each wake a hundred times a second still took about 12% of a core from a two-core
training run. A cgroup whose `cpu.idle` is 1 competes as one idle entity for all of its tasks,
so together they get only what the compute threads leave: about 9% faster tiny-preset steps
again. Creating one needs write access to the cpu controller (root, or a delegated subtree);
where that is missing every function here returns None or 0 and the per-thread policy is all.
"""
from __future__ import annotations

import os
import time

PROC = "/proc"
PREFIX = "rrt-helpers-"


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, file system type, options) of every cgroup mount."""
    try:
        with open(f"{PROC}/self/mounts", encoding="utf-8") as handle:
            rows = [line.split() for line in handle]
    except OSError:
        return []
    return [(row[1], row[2], set(row[3].split(","))) for row in rows if len(row) > 3 and row[2] in ("cgroup", "cgroup2")]


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per hierarchy: 'cpu' (v1 cpu controller) and/or 'unified' (v2)."""
    paths = {}
    try:
        with open(f"{PROC}/self/cgroup", encoding="utf-8") as handle:
            for line in handle:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if controllers == "":
                    paths["unified"] = path
                elif "cpu" in controllers.split(","):
                    paths["cpu"] = path
    except (OSError, ValueError):
        pass
    return paths


def _write(path: str, value: str) -> bool:
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(value)
        return True
    except OSError:
        return False


def _parent_dir() -> str | None:
    """The writable cgroup folder, with the cpu controller, that this process belongs to."""
    paths = _own_paths()
    for mount, kind, options in _mounts():
        if kind == "cgroup" and "cpu" in options and "cpu" in paths:
            folder = os.path.join(mount, paths["cpu"].lstrip("/"))
        elif kind == "cgroup2" and "unified" in paths:
            folder = os.path.join(mount, paths["unified"].lstrip("/"))
            try:
                with open(os.path.join(folder, "cgroup.subtree_control"), encoding="utf-8") as handle:
                    enabled = handle.read().split()
            except OSError:
                continue
            # A v2 group gets cpu files only when its parent hands the controller down.
            if "cpu" not in enabled and not _write(os.path.join(folder, "cgroup.subtree_control"), "+cpu"):
                continue
        else:
            continue
        if os.path.isdir(folder) and os.access(folder, os.W_OK):
            return folder
    return None


def available() -> bool:
    """True where this process may create an idle group."""
    return _parent_dir() is not None


def _groups(parent: str) -> list[str]:
    return sorted(os.path.join(parent, n) for n in os.listdir(parent) if n.startswith(PREFIX))


def leftovers() -> list[str]:
    """Idle groups of jobs that are still present next to this process's own group."""
    parent = _parent_dir()
    return _groups(parent) if parent else []


def create(owner: int) -> str | None:
    """A new idle group for the job whose driver is `owner`, next to this process's own group;
    None where cgroups cannot be written. Empty groups left by jobs that have ended are removed."""
    parent = _parent_dir()
    if parent is None:
        return None
    for stale in _groups(parent):
        owner_pid = os.path.basename(stale)[len(PREFIX):]
        if owner_pid.isdigit() and not os.path.exists(f"{PROC}/{owner_pid}"):
            remove(stale, wait_s=0)
    group = os.path.join(parent, f"{PREFIX}{owner}")
    try:
        os.makedirs(group, exist_ok=True)
    except OSError:
        return None
    # cpu.idle (Linux 5.15+); a minimal weight is the nearest older equivalent.
    if _write(os.path.join(group, "cpu.idle"), "1") or _write(os.path.join(group, "cpu.shares"), "2") \
            or _write(os.path.join(group, "cpu.weight"), "1"):
        return group
    remove(group, wait_s=0)
    return None


def join(group: str, pids: list[int]) -> int:
    """Move these processes (all their threads; what they start later follows) into the group;
    returns how many moved (a helper may exit at any time)."""
    return sum(_write(os.path.join(group, "cgroup.procs"), str(pid)) for pid in pids)


def join_threads(group: str, tids: list[int]) -> int:
    """Move single threads into the group: cgroup v1 only (v2 moves whole processes); returns how many."""
    tasks = os.path.join(group, "tasks")
    return sum(_write(tasks, str(tid)) for tid in tids) if os.path.exists(tasks) else 0


def leave(group: str, pid: int) -> bool:
    """Move a process back to the group's parent (a worker restarted by an idle raylet starts inside)."""
    return _write(os.path.join(os.path.dirname(group), "cgroup.procs"), str(pid))


def contains(group: str, pid: int) -> bool:
    """True when the process is in the group."""
    try:
        with open(os.path.join(group, "cgroup.procs"), encoding="utf-8") as handle:
            return str(pid) in handle.read().split()
    except OSError:
        return False


def remove(group: str | None, wait_s: float = 5.0) -> bool:
    """Delete the group once its processes have exited (they leave as the job's Ray stops)."""
    if not group:
        return False
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.rmdir(group)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

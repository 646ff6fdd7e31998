"""Keep a node's helper processes off the cores that CPU training needs (Linux).

torch's compute threads meet at a barrier after every operation, so when any other process
wakes on one of their cores, all of them wait. The helper processes of a local Ray (daemons,
agents, idle actors) each wake about a hundred times a second; on a two-core machine that cost
a training step about 9%. Under SCHED_IDLE the kernel runs a thread only where a core would
otherwise idle and never lets it preempt a normal one; threads and processes it starts inherit
the policy. An unprivileged process cannot leave SCHED_IDLE again, so only processes that end
with the job should be put there.
"""
from __future__ import annotations

import os

PROC = "/proc"


def supported() -> bool:
    """True where processes can be put on SCHED_IDLE (Linux with /proc)."""
    return hasattr(os, "SCHED_IDLE") and hasattr(os, "sched_setscheduler") and os.path.isdir(PROC)


def command_line(pid: int) -> str:
    """A process's command line, arguments joined by spaces ('' once it has gone)."""
    try:
        with open(f"{PROC}/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def parent(pid: int) -> int | None:
    """A process's parent, or None once it has gone."""
    try:
        with open(f"{PROC}/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _parents() -> dict[int, int]:
    """Every live process and its parent."""
    found = {}
    for name in os.listdir(PROC):
        if name.isdigit():
            ppid = parent(int(name))
            if ppid is not None:
                found[int(name)] = ppid
    return found


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`."""
    return sorted(child for child, ppid in _parents().items() if ppid == pid)


def process_tree(root: int) -> list[int]:
    """`root` and every process descended from it."""
    parents = _parents()
    tree, frontier = [root], [root]
    while frontier:
        frontier = sorted(child for child, ppid in parents.items() if ppid in frontier)
        tree += frontier
    return tree


def threads(pid: int) -> list[int]:
    """The thread ids of a process ([] once it has gone)."""
    try:
        return [int(tid) for tid in os.listdir(f"{PROC}/{pid}/task")]
    except OSError:
        return []


def set_threads_idle(pid: int, keep: set[int]) -> int:
    """Put the threads of one process on SCHED_IDLE, except those in `keep`; returns how many changed."""
    changed = 0
    for tid in threads(pid):
        if tid not in keep:
            try:
                os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
                changed += 1
            except OSError:
                pass
    return changed


def set_idle(pids: list[int]) -> int:
    """Put every thread of these processes on SCHED_IDLE; returns how many processes changed
    (ones that have gone or refuse are skipped: a helper may exit at any time)."""
    return sum(set_threads_idle(pid, set()) > 0 for pid in pids)


def is_idle(pid: int) -> bool:
    """True when the process's main thread runs under SCHED_IDLE."""
    try:
        return os.sched_getscheduler(pid) == os.SCHED_IDLE
    except OSError:
        return False


def restore_normal(pid: int) -> bool:
    """Move a process's idle threads back to the normal policy; False where that is not permitted
    (only a privileged process may leave SCHED_IDLE)."""
    for tid in threads(pid):
        try:
            if os.sched_getscheduler(tid) == os.SCHED_IDLE:
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
        except OSError:
            return False
    return True

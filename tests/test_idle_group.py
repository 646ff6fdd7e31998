"""The helpers' idle CPU group (rrt/idle_group.py): made, joined, left and removed for real."""
from __future__ import annotations

import os
import subprocess
import time

import pytest

from conftest import kill_tree
from rrt import idle_group, scheduling

needs_cgroups = pytest.mark.skipif(not idle_group.available(),
                                   reason="no writable cgroup cpu controller here (needs root or a delegated one)")


def cgroup_of(pid: int) -> str:
    """The process's cgroup lines, for membership checks."""
    with open(f"/proc/{pid}/cgroup", encoding="utf-8") as handle:
        return handle.read()


@pytest.fixture
def group():
    made = idle_group.create(2 ** 22 + 7)
    assert made is not None
    yield made
    idle_group.remove(made, wait_s=2)


@pytest.fixture
def shell():
    """A shell that starts a child when told, and the means to stop it."""
    process = subprocess.Popen(["sh", "-c", "read line; sleep 60 & wait"], stdin=subprocess.PIPE, text=True)
    yield process
    kill_tree(process)


@needs_cgroups
def test_a_new_group_is_idle_and_what_joins_it_takes_its_children_along(group, shell):
    files = {name: open(os.path.join(group, name)).read().strip() for name in ("cpu.idle", "cpu.shares", "cpu.weight")
             if os.path.exists(os.path.join(group, name))}
    assert files.get("cpu.idle") == "1" or files.get("cpu.shares") == "2" or files.get("cpu.weight") == "1", files
    assert idle_group.join(group, [shell.pid, 2 ** 22 + 1]) == 1  # a process that has gone is skipped
    assert idle_group.contains(group, shell.pid) and not idle_group.contains(group, os.getpid())
    shell.stdin.write("go\n")
    shell.stdin.flush()
    for _ in range(100):
        kids = scheduling.children(shell.pid)
        if kids:
            break
        time.sleep(0.05)
    # A process started inside the group stays there: the raylet starts the Data tasks' workers.
    assert kids and idle_group.contains(group, kids[0])
    assert idle_group.leave(group, shell.pid) and not idle_group.contains(group, shell.pid)
    assert os.path.basename(group) in cgroup_of(kids[0])


@needs_cgroups
def test_a_group_goes_once_empty_and_stale_ones_are_swept(group, shell):
    idle_group.join(group, [shell.pid])
    assert idle_group.remove(group, wait_s=0) is False  # still holds a process
    shell.kill()
    shell.wait()
    assert idle_group.remove(group, wait_s=5) and not os.path.exists(group)
    stale = os.path.join(os.path.dirname(group), f"{idle_group.PREFIX}{2 ** 22 + 3}")  # no such process
    os.makedirs(stale, exist_ok=True)
    fresh = idle_group.create(os.getpid())
    try:
        assert fresh and not os.path.exists(stale) and fresh in idle_group.leftovers()
    finally:
        idle_group.remove(fresh, wait_s=0)


@needs_cgroups
def test_single_threads_move_on_cgroup_v1_only(group):
    moved = idle_group.join_threads(group, [2 ** 22 + 1])
    assert moved == 0  # no such thread, on either version


def test_without_writable_cgroups_nothing_is_made(monkeypatch, tmp_path):
    monkeypatch.setattr(idle_group, "PROC", str(tmp_path))  # no mounts, no cgroup file
    assert idle_group.available() is False and idle_group.create(os.getpid()) is None
    assert idle_group.leftovers() == [] and idle_group.remove(None) is False

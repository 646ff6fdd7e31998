"""Helper processes put on SCHED_IDLE, found by process tree (rrt/scheduling.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from conftest import kill_tree
from rrt import scheduling

pytestmark = pytest.mark.skipif(not scheduling.supported(), reason="SCHED_IDLE and /proc are Linux only")


@pytest.fixture
def helper_tree():
    """A shell that has started one child of its own: (shell, child)."""
    shell = subprocess.Popen(["sh", "-c", "sleep 60 & wait"])
    try:
        for _ in range(100):
            kids = scheduling.children(shell.pid)
            if kids:
                break
            time.sleep(0.05)
        assert kids, "the shell started no child"
        yield shell.pid, kids[0]
    finally:
        kill_tree(shell)


def test_the_tree_holds_the_root_and_every_descendant(helper_tree):
    shell, child = helper_tree
    assert scheduling.process_tree(shell) == [shell, child]
    assert scheduling.parent(child) == shell and scheduling.children(child) == []
    assert "sleep 60" in scheduling.command_line(child)
    assert scheduling.command_line(2 ** 22 + 1) == "" and scheduling.parent(2 ** 22 + 1) is None


def test_idle_processes_and_their_new_children_stay_idle(helper_tree):
    shell, child = helper_tree
    assert not scheduling.is_idle(shell)
    assert scheduling.set_idle([shell, child, 2 ** 22 + 1]) == 2  # a process that has gone is skipped
    assert scheduling.is_idle(shell) and scheduling.is_idle(child)
    # What an idle process starts is idle too: Ray's raylet starts the Data tasks' workers.
    probe = subprocess.run([sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
                           capture_output=True, text=True, preexec_fn=lambda: scheduling.set_idle([os.getpid()]))
    assert int(probe.stdout) == os.SCHED_IDLE
    assert not scheduling.is_idle(os.getpid())  # this process was never touched


def test_only_a_privileged_process_leaves_idle_again(helper_tree):
    _, child = helper_tree
    scheduling.set_idle([child])
    restored = scheduling.restore_normal(child)
    assert restored == (os.geteuid() == 0)
    assert scheduling.is_idle(child) == (not restored)


def test_a_plain_process_is_left_as_it_is():
    assert scheduling.restore_normal(os.getpid()) is True and not scheduling.is_idle(os.getpid())


def test_threads_of_one_process_go_idle_except_the_kept_ones():
    code = ("import threading, time, sys\n"
            "for _ in range(2): threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
            "print(threading.get_native_id(), flush=True); time.sleep(60)\n")
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        main = int(process.stdout.readline())
        threads = [int(t) for t in os.listdir(f"/proc/{process.pid}/task")]
        assert len(threads) == 3 and main in threads
        assert scheduling.set_threads_idle(process.pid, {main}) == 2
        assert {t: os.sched_getscheduler(t) == os.SCHED_IDLE for t in threads} == {t: t != main for t in threads}
    finally:
        process.kill()
        process.wait()

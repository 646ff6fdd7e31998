"""A job run as a child process while its process tree is sampled: what the memory benchmarks
(prepare_scale.py, heavy_dish.py, train_streaming.py) share."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable

import psutil

SAMPLE_EVERY_S = 0.5


def run_sampled(
    command: list[str], env: dict, sample: Callable[[psutil.Process], None], cwd: str | None = None
) -> tuple[int, str]:
    """Run `command`, calling `sample(root process)` every half second until it ends; (return code, stderr)."""
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd
    )
    root = psutil.Process(proc.pid)

    def watch() -> None:
        while proc.poll() is None:
            sample(root)
            time.sleep(SAMPLE_EVERY_S)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    _, err = proc.communicate()
    thread.join()
    return proc.returncode, err

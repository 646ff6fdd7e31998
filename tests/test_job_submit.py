"""`ray job submit` against a local `ray start --head` cluster runs the training job, as in the README."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

from conftest import ROOT, needs_shared_data, quick_train_config

PORT, DASHBOARD = 6391, 8276  # outside the default worker port range and any default Ray's ports
BIN = os.path.dirname(sys.executable)


def _ray(*args: str, env: dict, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([os.path.join(BIN, "ray"), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=ROOT)


def _stop_cluster(temp_dir: str) -> None:
    """Stop only the Ray processes of this test's cluster (`ray stop` would stop every Ray)."""
    ours = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if temp_dir in cmdline or f"127.0.0.1:{PORT}" in cmdline:
            ours.append(proc)
    for proc in ours:
        for child in proc.children(recursive=True) + [proc]:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
    psutil.wait_procs(ours, timeout=20)


@pytest.fixture
def cluster():
    """A head node on its own ports and temp dir; yields the environment a client needs."""
    temp_dir = tempfile.mkdtemp(prefix="rrt-ray-")  # short: Ray's socket paths must stay short
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "RAY_AUTH_MODE": "token",
           "RAY_ADDRESS": f"http://127.0.0.1:{DASHBOARD}", "RAY_DATA_DISABLE_PROGRESS_BARS": "1"}
    started = _ray("start", "--head", "--port", str(PORT), "--dashboard-port", str(DASHBOARD), "--num-cpus", "2",
                   "--min-worker-port", "20102", "--max-worker-port", "20200", "--temp-dir", temp_dir,
                   "--disable-usage-stats", env={k: v for k, v in env.items() if k != "RAY_ADDRESS"})
    assert started.returncode == 0, started.stderr[-2000:]
    try:
        yield env, temp_dir
    finally:
        _stop_cluster(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(1500)
@needs_shared_data
def test_ray_job_submit_runs_train_contextual(cluster, prepared, tmp_path):
    env, temp_dir = cluster
    out = tmp_path / "run"
    command = ["job", "submit", "--no-wait", "--working-dir", ".", "--", "python", "jobs/train_contextual.py",
               "--data", str(prepared[0]), "--output", str(out), "--max-steps", "6", "--config", quick_train_config(tmp_path)]
    deadline = time.time() + 240
    while True:  # the job agent needs a few seconds after `ray start` (a minute or more on busy cores)
        submitted = _ray(*command, env=env)
        if submitted.returncode == 0 or time.time() > deadline:
            break
        time.sleep(3)
    assert submitted.returncode == 0, submitted.stderr[-2000:]
    said = submitted.stdout + submitted.stderr  # the Ray CLI logs to stderr
    job_id = re.search(r"raysubmit_[A-Za-z0-9]+", said).group(0)  # the CLI wraps it in colour codes
    status = ""
    deadline = time.time() + 720
    while time.time() < deadline:
        answer = _ray("job", "status", job_id, env=env)
        status = (answer.stdout + answer.stderr).lower()  # "Job 'raysubmit_…' succeeded"
        if any(f"' {word}" in status for word in ("succeeded", "failed", "stopped")):
            break
        time.sleep(5)
    answer = _ray("job", "logs", job_id, env=env)
    logs = answer.stdout + answer.stderr
    assert "' succeeded" in status, status[-1000:] + logs[-4000:]
    assert "train_contextual: 6 steps of contextual" in logs
    driver_log = os.path.join(temp_dir, "session_latest", "logs", f"job-driver-{job_id}.log")
    assert os.path.exists(driver_log)
    assert json.loads((out / "model" / "rrt_meta.json").read_text())["steps"] == 6
    assert (out / "metrics.jsonl").exists() and (out / "loss.png").exists()

"""`ray job submit` against a `ray start --head` cluster (the session's) runs the training job, as in the README."""
from __future__ import annotations

import json
import os
import re
import time

import pytest

from conftest import needs_shared_data, quick_train_config


@pytest.mark.slow
@pytest.mark.timeout(1500)
@needs_shared_data
def test_ray_job_submit_runs_train_contextual(ray_cluster, prepared, tmp_path):
    env = {"RAY_ADDRESS": ray_cluster.dashboard}   # the job client talks to the dashboard
    temp_dir = ray_cluster.temp_dir
    _ray = ray_cluster.ray
    out = tmp_path / "run"
    command = ["job", "submit", "--no-wait", "--working-dir", ".", "--", "python", "jobs/train_contextual.py",
               "--data", str(prepared[0]), "--output", str(out), "--max-steps", "6", "--num-workers", "1",
               "--config", quick_train_config(tmp_path)]
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

"""`ray job submit` against a `ray start --head` cluster (the session's) runs the training job, as in the README,
on two workers with the plain PyTorch engine."""
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
    # Without --no-wait the client follows the job to its end, printing its logs.
    command = ["job", "submit", "--working-dir", ".", "--", "python", "jobs/train_contextual.py",
               "--data", str(prepared[0]), "--output", str(out), "--max-steps", "6", "--num-workers", "2",
               # The plain PyTorch engine here (DDP over two workers); the other training tests run DeepSpeed.
               "--config", quick_train_config(tmp_path, engine="torch", checkpoint_interval=3)]
    deadline = time.time() + 240
    while True:  # the job agent needs a few seconds after `ray start` (a minute or more on busy cores)
        submitted = _ray(*command, env=env, timeout=900)
        said = submitted.stdout + submitted.stderr  # the Ray CLI logs to stderr
        found = re.search(r"raysubmit_[A-Za-z0-9]+", said)  # the CLI wraps the id in colour codes
        if found or time.time() > deadline:
            break
        time.sleep(3)
    assert found, said[-2000:]
    job_id = found.group(0)
    answer = _ray("job", "status", job_id, env=env)
    status = (answer.stdout + answer.stderr).lower()  # "Job 'raysubmit_…' succeeded"
    answer = _ray("job", "logs", job_id, env=env)
    logs = answer.stdout + answer.stderr
    assert "' succeeded" in status, status[-1000:] + logs[-4000:]
    assert "train_contextual: 6 steps of contextual" in logs
    driver_log = os.path.join(temp_dir, "session_latest", "logs", f"job-driver-{job_id}.log")
    assert os.path.exists(driver_log)
    assert json.loads((out / "model" / "rrt_meta.json").read_text())["steps"] == 6
    assert (out / "metrics.jsonl").exists() and (out / "loss.png").exists()
    assert json.loads((out / "train_stats.json").read_text())["world_size"] == 2
    # Each checkpoint Ray keeps holds rank 0's weights, optimizer and schedule and every rank's state
    # (tests/test_engine.py resumes from such a folder to the same weights).
    checkpoints = [p for p in (out / "ray").iterdir() if p.name.startswith("checkpoint_") and p.is_dir()]
    assert len(checkpoints) == 2 and all((c / "ds" / "engine.pt").exists() for c in checkpoints)
    assert all((c / "train_state.1.json").exists() for c in checkpoints)

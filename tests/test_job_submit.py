"""`ray job submit` against a `ray start --head` cluster (the session's) runs the training job, as in the README:
the shared two-worker DeepSpeed run is resumed to its end by a submitted job."""

from __future__ import annotations

import json
import os

import pytest
from conftest import ORPHAN_CHECKPOINT, needs_shared_data


@pytest.mark.slow
@needs_shared_data
def test_ray_job_submit_runs_train_contextual(ray_cluster, trained_contextual):
    out, job, _ = trained_contextual
    assert job.succeeded, job.status[-1000:] + job.logs[-4000:]
    assert "train_contextual: 30 steps of contextual" in job.logs
    driver_log = os.path.join(
        ray_cluster.temp_dir, "session_latest", "logs", f"job-driver-{job.job_id}.log"
    )
    assert os.path.exists(driver_log)
    assert json.loads((out / "model" / "rrt_meta.json").read_text())["steps"] == 30
    assert (out / "metrics.jsonl").exists() and (out / "loss.png").exists()
    stats = json.loads((out / "train_stats.json").read_text())
    assert stats["world_size"] == 2
    # The planted folder no checkpoint list holds is removed and reported; Ray's own are kept.
    assert ORPHAN_CHECKPOINT in stats["unregistered_checkpoints_removed"]
    assert not (out / "ray" / ORPHAN_CHECKPOINT).exists() and "train: removed" in job.logs
    # Each checkpoint Ray keeps holds every rank's ZeRO optimizer shard and training state.
    checkpoints = [
        p for p in (out / "ray").iterdir() if p.name.startswith("checkpoint_") and p.is_dir()
    ]
    assert len(checkpoints) == 2, checkpoints
    for checkpoint in checkpoints:
        assert (checkpoint / "ds" / "mp_rank_00_model_states.pt").exists()
        assert all(
            (checkpoint / "ds" / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").exists()
            for rank in (0, 1)
        )
        assert all((checkpoint / f"train_state.{rank}.json").exists() for rank in (0, 1))

"""A job that names no cluster starts a Ray of its own, even beside a running multi-node Ray on this
machine (testing.cluster), and never joins it.

A worker node killed mid-job is a benchmark, not a test of this suite: benchmarks/node_failure.py
kills a node of prepare_data, the rewrite job and two-worker training past a checkpoint, and
benchmarks/serve_node_failure.py a replica's node under load; each exits non-zero when the killed
run loses or doubles work (a step, a recipe, a request) that the uninterrupted run did not.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

from testing.cluster import LocalCluster


@pytest.fixture(scope="module")
def cluster():
    """A head and one one-CPU worker node."""
    with LocalCluster(workers=1) as made:
        yield made


def test_a_job_naming_no_cluster_starts_its_own_ray_beside_a_running_one(cluster):
    # ray.init() with no address joins the latest Ray it finds on the machine, and then refuses the
    # local settings with a traceback; a job naming no cluster must start its own.
    env = {k: v for k, v in cluster.env().items() if k != "RAY_ADDRESS"}
    probe = (
        "import ray; from rrt.config import load_settings; from runtime.cluster import start_ray; "
        "local = {'address': None, 'num_cpus': 1, 'object_store_memory': 10**8}; "
        "started = start_ray(load_settings().ray.model_copy(update=local)); "
        "print(started, len(ray.nodes()))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.split() == ["True", "1"], done.stderr[-2000:]

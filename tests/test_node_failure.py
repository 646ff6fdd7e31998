"""A worker node dies mid-job on a multi-node Ray on this machine (testing.cluster): the job still
completes, and nothing it writes is lost or doubled; training continues from its last checkpoint;
the service (testing.cluster_service) answers every request its clients retry. The jobs join the
cluster through RAY_ADDRESS, as on a real one. benchmarks/node_failure.py and
benchmarks/serve_node_failure.py measure the same at a larger size.
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest
from conftest import ROOT, SAMPLE, quick_train_config

from runtime.checkpoints import registered
from testing.cluster import LocalCluster
from testing.cluster_service import ClusterService, Load, serve_config
from testing.local_service import tiny_model, write_config

# Figures a run measures about itself, which differ between any two runs.
TIMINGS = ("seconds_per_stage", "recipes_per_second", "resumed")


@pytest.fixture(scope="module")
def cluster():
    """A head and two one-CPU worker nodes, shared by the module's tests."""
    with LocalCluster(workers=2) as made:
        yield made


class Job:
    """A job joining the cluster, as a user starts it there, its output read as it comes."""

    def __init__(self, cluster: LocalCluster, script: str, *args: str):
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "jobs" / script), *args],
            cwd=ROOT,
            env=cluster.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(
            target=lambda: self.lines.extend(self.process.stdout), daemon=True
        )
        self.reader.start()

    def said(self, text: str) -> bool:
        """True once a line of the job's output holds `text`."""
        return any(text in line for line in list(self.lines))

    def finished(self, timeout: int = 600) -> str:
        """The job's output once it ended well."""
        self.process.wait(timeout=timeout)
        self.reader.join(timeout=30)
        out = "".join(self.lines)
        assert self.process.returncode == 0, out[-3000:]
        return out


def kill_when(cluster: LocalCluster, ready, job: Job, timeout: float = 120) -> None:
    """Kill a worker node once `ready()` says the job is mid-work, then add a replacement."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert job.process.poll() is None, "the job ended before the node could be killed"
        assert time.monotonic() < deadline, "the job never got under way"
        time.sleep(0.05)
    cluster.kill(0)
    cluster.add()


def stats(folder) -> dict:
    """A prepared folder's stats.json without its timings."""
    with open(os.path.join(folder, "stats.json"), encoding="utf-8") as handle:
        return {k: v for k, v in json.load(handle).items() if k not in TIMINGS}


@pytest.fixture(scope="module")
def prepared_here(cluster, tmp_path_factory):
    """The bundled sample prepared on the cluster, uninterrupted."""
    out = str(tmp_path_factory.mktemp("prepared") / "clean")
    Job(cluster, "prepare_data.py", "--input", str(SAMPLE), "--output", out).finished()
    return out


def test_data_preparation_survives_a_node_death_with_the_same_stats(
    cluster, prepared_here, tmp_path
):
    out = str(tmp_path / "killed")
    job = Job(cluster, "prepare_data.py", "--input", str(SAMPLE), "--output", out)
    kill_when(
        cluster, lambda: job.said("[prepare_data] writing"), job
    )  # the recipes are being read
    job.finished()
    assert stats(out) == stats(prepared_here)


def test_batch_rewriting_survives_a_node_death_with_each_recipe_once(
    cluster, prepared_here, tmp_path
):
    model = tiny_model(str(tmp_path / "model"))
    out = tmp_path / "rewrites"
    job = Job(
        cluster,
        "rewrite.py",
        "--data",
        prepared_here,
        "--split",
        "test",
        "--system",
        "contextual",
        "--model",
        model,
        "--output",
        str(out),
        "--actors",
        "2",
        "--batch-recipes",
        "1",
    )
    written = out / "rewrites.jsonl"
    kill_when(cluster, lambda: written.exists() and written.read_text().count("\n") >= 2, job)
    job.finished()
    rows = [json.loads(line) for line in written.read_text().splitlines()]
    keys = collections.Counter((r["id"], r["constraint"]) for r in rows)
    expected = json.loads((out / "run.json").read_text())["counts"]["recipes"]
    assert len(keys) == expected and set(keys.values()) == {1}
    assert cluster.alive() == 2


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


def rewrite_bodies(count: int) -> list[dict]:
    """Requests for the service: the sample's recipes in turn, two candidates a step."""
    from rrt.recipes.loaders import read_recipes

    recipes = [r for r in read_recipes([str(SAMPLE)]) if r.steps][:count]
    return [
        {
            "recipe": {"title": r.title, "ingredients": r.ingredients, "steps": r.steps},
            "constraint": "vegan",
            "candidates": 2,
            "seed": i,
        }
        for i, r in enumerate(recipes)
    ]


def test_serving_answers_every_request_when_a_replica_node_dies(cluster, tmp_path):
    # Two replicas, one a node; the HTTP proxy and the Gateway run on the head (testing.cluster_service).
    # Clients retry a 503 after its Retry-After, as the README recommends; a 503 without one, or any
    # other error, ends a request with that status.
    two = {"min_replicas": 2, "max_replicas": 2, "target_ongoing_requests": 8}
    model = tiny_model(str(tmp_path / "model"))
    app_config = write_config(str(tmp_path), max_step_tokens=12, autoscaling=two)
    service = ClusterService(
        cluster, serve_config(str(tmp_path), model, app_config, {"autoscaling_config": two})
    )
    try:
        service.deploy(replicas=2)
        before = service.running()
        assert len(set(before.values())) == 2  # a replica on each worker node
        load = Load(service.url, rewrite_bodies(8), clients=2).start()
        wait_for(lambda: len(load.answers) >= 4, "no answers before the kill")
        cluster.kill(cluster.index_of(min(before.values())))
        cluster.add()
        service.wait(2, new_since=before)
        served = len(load.answers)
        wait_for(lambda: len(load.answers) >= served + 4, "no answers after the new replica")
        answers = load.stop()
    finally:
        service.shutdown()
    assert {a.status for a in answers} == {200}, answers
    assert cluster.alive() == 2


def wait_for(done, what: str, timeout: float = 180) -> None:
    """Wait until done() holds; fail with `what` after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def train_steps(folder) -> list[int]:
    """The steps metrics.jsonl logs so far."""
    path = os.path.join(folder, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line)["step"] for line in handle if line.strip()]


def last_dev_losses(folder) -> list[float]:
    """The dev losses metrics.jsonl logs, in order."""
    with open(os.path.join(folder, "metrics.jsonl"), encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return [r["eval_loss"] for r in rows if r.get("eval_loss") is not None]


def test_training_continues_from_its_checkpoint_when_a_worker_node_dies(
    cluster, prepared_here, tmp_path
):
    # One worker a node: 0.75 CPU of each one-CPU node, the rest for the tokenizing tasks.
    config = quick_train_config(
        tmp_path,
        tiny={"n_layer": 1, "n_head": 2, "n_embd": 64, "vocab_size": 4000, "lr": 1.0e-3},
        cpus_per_worker=0.75,
        checkpoint_interval=3,
        eval_interval=3,
        eval_examples=16,
        log_interval=1,
    )
    train = ["--variant", "contextual", "--data", prepared_here, "--config", config]
    train += ["--num-workers", "2", "--max-steps", "9", "--output"]
    # The uninterrupted run to compare the final dev loss with is the benchmark's
    # (benchmarks/node_failure.py); the suite's budget holds one run.
    killed = str(tmp_path / "killed")
    job = Job(cluster, "train.py", *train, killed)
    # Killed past a checkpoint Ray Train has registered (listed in its snapshot), with work since.
    kill_when(
        cluster,
        lambda: (
            max(train_steps(killed), default=0) >= 4
            and bool(registered(os.path.join(killed, "ray")))
        ),
        job,
        timeout=300,
    )
    out = job.finished()
    resumed = [int(s) for s in re.findall(r"resumed from the checkpoint of step (\d+)", out)]
    assert resumed and resumed[0] >= 3, out[-3000:]
    assert train_steps(killed) == list(range(10))  # every step once, none doubled
    losses = last_dev_losses(killed)  # steps 0, 3, 6 and 9: the run still learns after the resume
    assert losses[-1] < losses[0] and losses[-1] <= 1.01 * losses[-2], losses
    assert cluster.alive() == 2

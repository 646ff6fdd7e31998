"""Resources a job asks for that its Ray cannot give: one error line where the Ray is the job's
own (it never grows), a warning where it joined a cluster (which may add nodes), never a silent wait."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import ROOT

from rrt.config import load_config
from runtime import cluster
from runtime.cluster import bundle, describe, ensure_room, unplaced
from runtime.runs import JobError


def test_bundles_are_placed_first_fit_each_on_one_node():
    nodes = [{"CPU": 4.0, "GPU": 1.0}, {"CPU": 4.0}]
    assert unplaced(nodes, 2, bundle(2, 1)) == 1  # one GPU in all
    assert unplaced(nodes, 3, bundle(3)) == 1  # 3 CPUs fit once per node, not across two
    assert unplaced(nodes, 16, bundle(0.5)) == 0
    assert unplaced(nodes, 1, bundle(5)) == 1
    assert unplaced([], 1, bundle(0.5)) == 1
    assert bundle(1) == {"CPU": 1.0} and bundle(8, True) == {"CPU": 8.0, "GPU": 1.0}
    assert (
        describe(bundle(8, 1)) == "1 GPU and 8 CPUs"
        and describe({"CPU": 2.0, "GPU": 0.0}) == "0 GPUs and 2 CPUs"
    )


@pytest.fixture(scope="module")
def own_ray():
    """A Ray of two CPUs and no GPU started in this process for these tests, as a job's own (it
    never grows); the service's test, last, ends it as the service ends its Ray."""
    import ray

    if ray.is_initialized():
        pytest.skip("a Ray of another test runs in this process")
    ray.init(address="local", num_cpus=2, num_gpus=0, include_dashboard=False)
    before, cluster._STARTED["local"] = cluster._STARTED["local"], True
    try:
        yield ray
    finally:
        cluster._STARTED["local"] = before
        ray.shutdown()


def test_a_shortfall_stops_a_job_on_its_own_ray_and_is_a_warning_on_a_joined_one(
    own_ray, monkeypatch, capsys
):
    capsys.readouterr()  # Ray's own start-up lines
    ensure_room("training worker", "train.num_workers", 4, bundle(0.5))
    ensure_room(
        "rewriter actor", "rewrite.actors", 8, bundle(1), needed=1
    )  # a pool starts on those that fit
    with pytest.raises(JobError) as caught:
        ensure_room("training worker", "train.num_workers, train.use_gpu", 2, bundle(0.5, 1))
    assert str(caught.value).startswith(
        "2 training workers of 1 GPU and 0.5 CPUs each (train.num_workers, "
        "train.use_gpu) cannot start on this machine's Ray, which has 0 GPUs "
        "and 2 CPUs in all"
    )
    with pytest.raises(JobError, match="1 rewriter actor of 4 CPUs each"):
        ensure_room("rewriter actor", "rewrite.cpus_per_actor", 1, bundle(4), needed=1)
    assert capsys.readouterr().err == ""
    monkeypatch.setitem(cluster._STARTED, "local", False)
    ensure_room("training worker", "train.use_gpu", 2, bundle(0.5, 1))
    warned = capsys.readouterr().err.strip().splitlines()
    assert len(warned) == 1 and warned[0].startswith("warning: 2 training workers of 1 GPU")
    assert "the job waits for nodes to be added" in warned[0]


@pytest.mark.timeout(120)  # without the check, Ray Train would wait for the GPUs for ever
def test_training_that_asks_for_gpus_its_ray_lacks_is_one_line_and_claims_nothing(
    own_ray, tmp_path, capsys
):
    from jobs.train import main

    data = tmp_path / "prepared"
    for split in ("train", "dev"):
        (data / "step_pairs" / "contextual" / split).mkdir(parents=True)
        pq.write_table(
            pa.table({"text": ["<|startoftext|> a <tgt:vegan> b <|endoftext|>"] * 512}),
            data / "step_pairs" / "contextual" / split / "part.parquet",
        )
    capsys.readouterr()
    code = main(
        [
            "--data",
            str(data),
            "--output",
            str(tmp_path / "out"),
            "--model",
            "tiny",
            "--micro-batch",
            "1",
            "--use-gpu",
        ],
        name="train_contextual",
    )
    said = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(said) == 1, said
    assert (
        said[0].startswith("train_contextual: error: 2 training workers of 1 GPU and 0.5 CPUs each")
        and "which has 0 GPUs" in said[0]
    ), said
    assert not (tmp_path / "out").exists()  # nothing claimed: the corrected rerun just works


@pytest.mark.timeout(120)  # without the check, the scoring pool would wait for the GPUs for ever
def test_evaluation_that_asks_for_gpus_its_ray_lacks_is_one_line(own_ray, tmp_path, capsys):
    from test_evaluate import contextual_records, write_run
    from test_metrics import export_tiny_lm

    from jobs.evaluate import main

    rewrites = write_run(tmp_path / "contextual", "contextual", True, contextual_records())
    export_tiny_lm(tmp_path / "lm")
    capsys.readouterr()
    code = main(
        [
            "--rewrites",
            str(rewrites),
            "--lm",
            str(tmp_path / "lm"),
            "--output",
            str(tmp_path / "out"),
            "--use-gpu",
        ]
    )
    said = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and said[-1].startswith(
        "evaluate: error: 2 scoring actors of 1 GPU and 1 CPU each"
    ), said
    assert not (tmp_path / "out").exists()


@pytest.mark.timeout(120)
def test_rrt_serve_with_gpus_its_ray_lacks_is_one_line(own_ray, tmp_path, monkeypatch, capsys):
    from serve import app

    (tmp_path / "config.json").write_text("{}")
    config = load_config(str(ROOT / "ray_config.yaml"), "local")
    config["serve"]["num_gpus"] = 1
    config.pop("profile", None)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(
        app, "start_local_ray", lambda settings, verbose=False: None
    )  # the service's own Ray: this one
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        app.run(str(tmp_path), config=str(tmp_path / "config.yaml"))
    said = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and "Traceback" not in "\n".join(said), said
    assert (
        said[-1].startswith("rrt serve: error: 1 rewriter replica of 1 GPU and 1 CPU each")
        and "serve deploy serve/config.yaml" in said[-1]
    ), said
    assert not own_ray.is_initialized()  # the service stops the Ray it would have run on


def test_a_local_rays_worker_drops_only_the_placement_group_cleaners_thread_error():
    """quiet_local_ray (the local Ray's worker setup hook): the cleaner's monitor thread dies when
    another Ray runs on the machine; its traceback is dropped, any other thread's still shows."""
    import subprocess
    import sys

    script = (
        "import threading\n"
        "from runtime.cluster import CLEANER_THREAD, quiet_local_ray\n"
        "quiet_local_ray()\n"
        "def fail(what):\n"
        "    raise ConnectionError(what)\n"
        "for name in (CLEANER_THREAD, 'another'):\n"
        "    t = threading.Thread(target=fail, args=(f'from {name}',), name=name)\n"
        "    t.start(); t.join()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "from another" in done.stderr, done.stderr
    assert "PlacementGroupCleanerMonitor" not in done.stderr, done.stderr

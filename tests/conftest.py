"""Shared fixtures: the bundled sample corpus and the real data in ../shared/data."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from rrt.config import load_config, load_settings
from rrt.modelling.rewriter import Rewriter
from rrt.modelling.sampling import SamplingSettings
from rrt.modelling.selection import dictionary_missing
from rrt.recipes.recipe import Recipe
from runtime.cluster import own_tools_first

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "sample" / "recipes.jsonl"
SHARED_DATA = Path(os.environ.get("RRT_SHARED_DATA", ROOT.parent / "shared" / "data"))
WEB_RECIPES = SHARED_DATA / "web_recipes" / "recipes.jsonl"
PAPER_SAMPLE = SHARED_DATA / "paper_sample"

DECODING = load_settings().rewrite

# Every process of the session (this one, the jobs, the session's Ray) finds the environment's own tools
# first: `ray job submit -- python ...` runs the `python` it finds on PATH.
own_tools_first()
# Every Ray the suite starts (the session's, the multi-node clusters', a job's own) starts its Python
# workers when a task asks for one, not one a CPU ahead on each driver's arrival: the suite starts some
# thirty drivers, and on two cores the workers started ahead were CPU the tests waited on
# (benchmarks/RESULTS.md). A real cluster keeps Ray's default.
os.environ.setdefault("RAY_enable_worker_prestart", "0")


def sampling(**changes) -> SamplingSettings:
    """Decoding settings from ray_config.yaml's rewrite block, with a test's changes."""
    return SamplingSettings.from_config(
        DECODING, changes.pop("candidates", DECODING.candidates), **changes
    )


def tiny_random_lm():
    """A tokenizer trained on the bundled sample and a 2-layer GPT-2 with random weights: (lm, tokenizer)."""
    from rrt.corpus import formats
    from rrt.modelling.models import build_model, train_tiny_tokenizer
    from rrt.recipes.loaders import read_recipes

    recipes = list(read_recipes([str(SAMPLE)]))
    tok = train_tiny_tokenizer(
        [formats.no_source(r.title, r.ingredients, r.steps) for r in recipes], 1200
    )
    lm = build_model(
        "tiny",
        len(tok),
        {"n_layer": 2, "n_head": 2, "n_embd": 64},
        seed=3,
        pad_token_id=tok.pad_token_id,
    ).eval()
    return lm, tok


def make_rewriter(
    system: str, lm, tokenizer, block: int, settings: SamplingSettings, **changes
) -> Rewriter:
    """A Rewriter with ray_config.yaml's engine settings, with a test's changes."""
    return Rewriter(
        system,
        lm,
        tokenizer,
        block,
        settings,
        **{
            "recipe_tokens": DECODING.recipe_tokens,
            "selection": DECODING.selection,
            "closed_foods": DECODING.closed_foods,
            "steps": DECODING.steps,
            **changes,
        },
    )


needs_shared_data = pytest.mark.skipif(
    not WEB_RECIPES.exists() or not PAPER_SAMPLE.exists(),
    reason=f"real recipes and paper samples not found in {SHARED_DATA} (a fresh clone has no ../shared)",
)


# Selecting among rewrite candidates needs pyenchant's dictionary (system packages that `make`
# skips when it cannot install them): the tests that rewrite skip without it.
needs_dictionary = pytest.mark.skipif(
    bool(dictionary_missing()), reason=f"no dictionary: {dictionary_missing()}"
)


def make_recipe(
    ingredients, steps=("Mix everything.", "Serve."), title="Test Dish", rid="t1"
) -> Recipe:
    """A small recipe for table-driven tests."""
    return Recipe(rid, title, list(ingredients), list(steps), "test")


class RayCluster:
    """One `ray start --head` for the session on its own ports and temp dir: the jobs under test
    join it (RAY_ADDRESS) instead of each starting a Ray, and `ray job submit` talks to it."""

    # Outside the default worker port range and any default Ray's ports; RRT_TEST_PORT_OFFSET
    # moves them all, so two sessions on one machine do not meet, and each pytest-xdist worker
    # has a session Ray of its own on ports of its own.
    WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    OFFSET = int(os.environ.get("RRT_TEST_PORT_OFFSET", "0")) + 50 * WORKER
    WORKER_PORTS = (20102 + 100 * WORKER, 20200 + 100 * WORKER)
    PORT, DASHBOARD = 6391 + OFFSET, 8276 + OFFSET
    # The job agent's HTTP port: Ray's default, or ours when that is taken.
    AGENT, SPARE_AGENT = 52365 + OFFSET, 8277 + OFFSET

    def __init__(self):
        self.temp_dir = tempfile.mkdtemp(
            prefix="rrt-ray-"
        )  # short: Ray's socket paths must stay short
        self.address = f"127.0.0.1:{self.PORT}"
        self.dashboard = f"http://127.0.0.1:{self.DASHBOARD}"
        # The head runs with token authentication; clients read the token with this set. (PATH,
        # with this environment's tools first, is set for the whole session above.)
        self.env = {"RAY_ADDRESS": self.address, "RAY_AUTH_MODE": "token"}

    def ray(
        self, *args: str, env: dict | None = None, timeout: int = 120
    ) -> subprocess.CompletedProcess:
        """The `ray` CLI of this environment."""
        return subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "ray"), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
            env={**os.environ, **self.env, **(env or {})},
        )

    def start(self) -> RayCluster:
        """Start the head node (two CPUs, as a laptop's local Ray here)."""
        # With RAY_AUTH_MODE=token, `ray start` needs a token to exist and makes none; on a machine
        # that never ran a local `ray.init()` there is none yet (the README's first command, too).
        made = self.ray("get-auth-token", "--generate", env={"RAY_ADDRESS": ""})
        if made.returncode != 0:
            raise RuntimeError(f"ray get-auth-token --generate failed:\n{made.stderr[-2000:]}")
        started = self.ray(
            "start",
            "--head",
            "--port",
            str(self.PORT),
            "--dashboard-port",
            str(self.DASHBOARD),
            "--dashboard-agent-listen-port",
            str(self._agent_port()),
            "--num-cpus",
            "2",
            "--object-store-memory",
            str(10**9),
            "--min-worker-port",
            str(self.WORKER_PORTS[0]),
            "--max-worker-port",
            str(self.WORKER_PORTS[1]),
            "--temp-dir",
            self.temp_dir,
            "--disable-usage-stats",
            env={"RAY_ADDRESS": ""},
        )
        if started.returncode != 0:
            raise RuntimeError(f"ray start failed:\n{started.stderr[-2000:]}")
        return self

    def _agent_port(self) -> int:
        # Another Ray (a test's own, on the other test worker) may hold the default port, and then
        # `ray job submit` finds no agent. Ours in every run made the suite slower on 2 cores
        # (benchmarks/RESULTS.md): likely since the other Rays' agents, failing to bind the port this
        # cluster holds, exit early.
        with socket.socket() as probe:
            try:
                probe.bind(("0.0.0.0", self.AGENT))
            except OSError:
                return self.SPARE_AGENT
        return self.AGENT

    def processes(self) -> list:
        """Every process of this cluster (its command line names its temp dir or port). The client
        proxy names the head by the node's own IP, not 127.0.0.1, so the port is matched on any host."""
        import psutil

        head = re.compile(rf"--address=\S+:{self.PORT}\b")
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = " ".join(proc.info["cmdline"] or [])
            if self.temp_dir in cmdline or self.address in cmdline or head.search(cmdline):
                found.append(proc)
        return found

    def stop(self) -> None:
        """Stop only this cluster's processes (`ray stop` would stop every Ray on the machine)."""
        import psutil

        ours = self.processes()
        for proc in ours:
            for member in proc.children(recursive=True) + [proc]:
                try:
                    member.kill()
                except psutil.NoSuchProcess:
                    pass
        psutil.wait_procs(ours, timeout=20)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


_cluster: RayCluster | None = None


@pytest.fixture(scope="session")
def ray_cluster():
    """The session's Ray, started on first use; every later `run_script` joins it."""
    global _cluster
    _cluster = RayCluster().start()
    try:
        yield _cluster
    finally:
        cluster, _cluster = _cluster, None
        cluster.stop()


def run_script(
    script: str, *args: str, timeout: int = 900, env: dict | None = None, own_ray: bool = False
) -> subprocess.CompletedProcess:
    """Run one of the jobs/ scripts as a user would, capturing its output; it joins the
    session's Ray once that runs, unless `own_ray` (then it starts and stops a Ray of its own)."""
    merged = {**os.environ, "RAY_DATA_DISABLE_PROGRESS_BARS": "1", "PYTHONUNBUFFERED": "1"}
    if _cluster is not None and not own_ray:
        merged.update(_cluster.env)
    merged.update(env or {})
    return subprocess.run(
        [sys.executable, str(ROOT / "jobs" / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=merged,
    )


def job_env() -> dict:
    """The environment of a job a test starts itself: the session's Ray to join, once it runs."""
    return {
        **os.environ,
        "RAY_DATA_DISABLE_PROGRESS_BARS": "1",
        "PYTHONUNBUFFERED": "1",
        **(_cluster.env if _cluster is not None else {}),
    }


@pytest.fixture(scope="session")
def prepared(request, tmp_path_factory):
    """prepare_data run once on the real web recipes and the paper's samples: (folder, inputs, result)."""
    if not WEB_RECIPES.exists() or not PAPER_SAMPLE.exists():
        pytest.skip(f"real recipes and paper samples not found in {SHARED_DATA}")
    request.getfixturevalue("ray_cluster")
    out = tmp_path_factory.mktemp("prepared") / "run"
    inputs = f"{WEB_RECIPES},{PAPER_SAMPLE}"
    done = run_script(
        "prepare_data.py",
        "--input",
        inputs,
        "--output",
        str(out),
        "--dish-key",
        "head",
        "--num-cpus",
        "2",
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out, inputs, done


def _steps(out) -> list[int]:
    path = Path(out) / "metrics.jsonl"
    return (
        [json.loads(line)["step"] for line in path.read_text().splitlines()]
        if path.exists()
        else []
    )


ORPHAN_CHECKPOINT = (
    "checkpoint_2000-01-01_00-00-00.000000"  # planted by trained_contextual before its resume
)


@pytest.fixture(scope="session")
def trained_contextual(request, prepared, tmp_path_factory):
    """One two-worker Contextual Rewriter run on the prepared real data, made the hard way: 20 steps,
    a rerun refused without --resume, a checkpoint folder no list holds planted, then resumed to 30
    steps by `ray job submit`, as the README submits jobs to a cluster. (A worker lost mid-run:
    benchmarks/node_failure.py kills a worker node past a checkpoint.)
    (folder, the resumed job (its id, status and logs), what happened before it)."""
    folder = tmp_path_factory.mktemp("train")
    out = folder / "run"
    args = [
        "--data",
        str(prepared[0]),
        "--output",
        str(out),
        "--num-workers",
        "2",
        "--config",
        quick_train_config(folder),
    ]
    ran = run_script("train_contextual.py", *args, "--max-steps", "20")
    first = {
        "returncode": ran.returncode,
        "output": ran.stdout + ran.stderr,
        "steps": _steps(out),
        "stats": json.loads((out / "train_stats.json").read_text())
        if (out / "train_stats.json").exists()
        else {},
    }
    first["refused"] = run_script("train_contextual.py", *args, "--max-steps", "30")
    # A checkpoint folder that no checkpoint list holds, as a worker that fails while reporting leaves one.
    (out / "ray" / ORPHAN_CHECKPOINT).mkdir()
    (out / "ray" / ORPHAN_CHECKPOINT / "train_state.0.json").write_text("{}")
    done = submit_job(
        request.getfixturevalue("ray_cluster"),
        "jobs/train_contextual.py",
        *args,
        "--max-steps",
        "30",
        "--resume",
    )
    assert done.succeeded, done.status[-1000:] + done.logs[-4000:]
    return out, done, first


@dataclass
class SubmittedJob:
    """A job run by `ray job submit`: its id, what `ray job status` and `ray job logs` said."""

    job_id: str
    status: str
    logs: str

    @property
    def succeeded(self) -> bool:
        """Whether Ray reports the job succeeded."""
        return "' succeeded" in self.status.lower()  # "Job 'raysubmit_…' succeeded"


def submit_job(cluster: RayCluster, script: str, *args: str) -> SubmittedJob:
    """Submit one jobs/ script to the session's Ray with `ray job submit --working-dir .` and follow it
    to its end."""
    env = {"RAY_ADDRESS": cluster.dashboard}  # the job client talks to the dashboard
    command = ["job", "submit", "--working-dir", ".", "--", "python", script, *args]
    deadline = time.time() + 240
    while (
        True
    ):  # the job agent needs a few seconds after `ray start` (a minute or more on busy cores)
        submitted = cluster.ray(*command, env=env, timeout=900)
        said = submitted.stdout + submitted.stderr  # the Ray CLI logs to stderr
        found = re.search(r"raysubmit_[A-Za-z0-9]+", said)  # the CLI wraps the id in colour codes
        if found or time.time() > deadline:
            break
        time.sleep(3)
    assert found, said[-2000:]
    job_id = found.group(0)
    status = cluster.ray("job", "status", job_id, env=env)
    logs = cluster.ray("job", "logs", job_id, env=env)
    return SubmittedJob(job_id, status.stdout + status.stderr, logs.stdout + logs.stderr)


def config_copy(folder, **sections) -> str:
    """A copy of ray_config.yaml's local settings with some keys of its sections replaced, written into folder."""
    config = load_config(str(ROOT / "ray_config.yaml"), "local")
    for section, values in sections.items():
        config[section].update(values)
    config.pop("profile", None)
    path = Path(folder) / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def quick_train_config(folder, **train) -> str:
    """A copy of ray_config.yaml with a smaller, quicker training block, written into folder."""
    return config_copy(
        folder,
        train={
            "model": "tiny",
            "tiny": {"n_layer": 2, "n_head": 4, "n_embd": 128, "vocab_size": 4000, "lr": 1.0e-3},
            "eval_examples": 96,
            "log_interval": 5,
            "eval_interval": 10,
            "checkpoint_interval": 10,
            **train,
        },
    )


# `make test` runs the suite on two pytest-xdist workers, a module at a time (its module fixtures are made
# once). Each worker starts a session Ray of its own on first use (RayCluster's ports move with the
# worker) and prepares the real recipes once; the tests of the trained run share one worker, so the
# run is trained once: these modules hold them, and collection fails if another module uses it.
TRAINED_RUN = "trained_contextual"
TRAINED_RUN_MODULES = {"test_job_submit", "test_rewrite", "test_train"}


def pytest_collection_modifyitems(config, items):
    """A test of the trained run outside TRAINED_RUN_MODULES is a usage error: it could run on the
    other worker, and train the run again there."""
    strays = sorted(
        {
            item.module.__name__
            for item in items
            if TRAINED_RUN in set(getattr(item, "fixturenames", ()))
            and item.module.__name__ not in TRAINED_RUN_MODULES
        }
    )
    if strays:
        raise pytest.UsageError(f"tests of the trained run outside TRAINED_RUN_MODULES: {strays}")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's scheduling by module, with the trained run's modules as one unit."""
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "trained-run" if Path(module).stem in TRAINED_RUN_MODULES else module

    return ByModule(config, log)

"""Jobs on a multi-node Ray on this machine, each run twice side by side: uninterrupted, and with a
worker node killed mid-run (a replacement joins at once). Reports each run's seconds, whether
the killed run's output equals the uninterrupted one's (prepare_data: stats.json less its
timings; rewrite: every (recipe, constraint) once), and the ratio of the killed run's time to
the uninterrupted one's last.

    python benchmarks/node_failure.py
    python benchmarks/node_failure.py --input ../shared/data/web_recipes/recipes.jsonl --json out/node_failure.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from runtime.checkpoints import registered
from testing.cluster import LocalCluster
from testing.local_service import SAMPLE, tiny_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMINGS = ("seconds_per_stage", "recipes_per_second", "resumed")
JOB_TIMEOUT_S = 600


def run_job(
    cluster: LocalCluster, args: list[str], kill_at=None
) -> tuple[float, float | None, str]:
    """Run a job on the cluster; with `kill_at(lines) -> bool`, kill worker node 0 (and add one) the
    first time it holds. (seconds, seconds into the run of the kill, output)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        env=cluster.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    killed = None
    while process.poll() is None:
        if kill_at is not None and killed is None and kill_at(lines):
            cluster.kill(0)
            killed = time.perf_counter() - started
            cluster.add()
        if time.perf_counter() - started > JOB_TIMEOUT_S:
            process.kill()
            raise SystemExit(
                f"{args[0]} ran past {JOB_TIMEOUT_S}s; its last output:\n{''.join(lines)[-3000:]}"
            )
        time.sleep(0.05)
    reader.join(timeout=30)
    out = "".join(lines)
    if process.returncode != 0:
        raise SystemExit(f"{args[0]} failed:\n{out[-3000:]}")
    return time.perf_counter() - started, killed, out


def lines_in(path: str) -> int:
    """How many lines a file holds so far (0 before it exists)."""
    if not os.path.exists(path):
        return 0
    with open(path, encoding="utf-8") as handle:
        return sum(1 for _ in handle)


def prepared_stats(folder: str) -> dict:
    """stats.json less the run's own timings."""
    with open(os.path.join(folder, "stats.json"), encoding="utf-8") as handle:
        return {k: v for k, v in json.load(handle).items() if k not in TIMINGS}


def rewrite_keys(folder: str) -> collections.Counter:
    """How often each (recipe, constraint) is in rewrites.jsonl."""
    with open(os.path.join(folder, "rewrites.jsonl"), encoding="utf-8") as handle:
        return collections.Counter((r["id"], r["constraint"]) for r in map(json.loads, handle))


def train_config(folder: str) -> str:
    """ray_config.yaml with a tiny model, 1.5 CPUs a worker, checkpointed and evaluated every 5 steps, into folder."""
    import yaml

    from rrt.config import load_config

    config = load_config(os.path.join(ROOT, "ray_config.yaml"), "local")
    config["train"].update(
        model="tiny",
        cpus_per_worker=1.5,
        checkpoint_interval=5,
        eval_interval=5,
        eval_examples=64,
        log_interval=1,
        tiny={**config["train"]["tiny"], "n_layer": 2, "n_head": 4, "n_embd": 128},
    )
    config.pop("profile", None)
    path = os.path.join(folder, "train_config.yaml")
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump(config, handle)
    return path


def metrics(folder: str) -> list[dict]:
    """metrics.jsonl of a training run."""
    with open(os.path.join(folder, "metrics.jsonl"), encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def checkpoints(folder: str) -> int:
    """Checkpoints of a training run that Ray Train has registered so far (a folder on disk that
    its snapshot does not list yet is no checkpoint a restart resumes from)."""
    return len(registered(os.path.join(folder, "ray")) or ())


def training_row(cluster: LocalCluster, work: str, steps: int) -> dict:
    """Two training workers, one per node, uninterrupted and with one node killed after a checkpoint."""
    config = train_config(work)
    train = [
        "jobs/train.py",
        "--variant",
        "contextual",
        "--data",
        f"{work}/prepared",
        "--config",
        config,
        "--num-workers",
        "2",
        "--max-steps",
        str(steps),
        "--output",
    ]
    clean, _, _ = run_job(cluster, [*train, f"{work}/train"])
    reached = []  # the last step logged when the node was killed

    def past_two_checkpoints(lines) -> bool:
        if checkpoints(f"{work}/train-killed") < 2:
            return False
        reached.append(max(r["step"] for r in metrics(f"{work}/train-killed")))
        return True

    hit, at, out = run_job(cluster, [*train, f"{work}/train-killed"], past_two_checkpoints)
    resumed = [int(n) for n in re.findall(r"resumed from the checkpoint of step (\d+)", out)]
    # Steps run again: those between the checkpoint it resumed from and the step it had reached.
    redone = reached[0] - resumed[0] if resumed else None
    logged = [r["step"] for r in metrics(f"{work}/train-killed") if r.get("train_loss") is not None]
    last = {
        name: [r["eval_loss"] for r in metrics(f"{work}/{name}") if r.get("eval_loss") is not None][
            -1
        ]
        for name in ("train", "train-killed")
    }
    print(
        f"training: dev loss uninterrupted {last['train']:.3f}, with a node killed {last['train-killed']:.3f}; "
        f"killed at step {reached[0]}, resumed from the checkpoint of step "
        f"{resumed[0] if resumed else None}: {redone} steps run again; metrics.jsonl logs each step "
        f"{'once' if len(logged) == len(set(logged)) else 'more than once'}"
    )
    return {
        "job": "train",
        "uninterrupted_s": clean,
        "killed_s": hit,
        "killed_at_s": at,
        "output_equal": max(logged) == steps and len(logged) == len(set(logged)) and bool(resumed),
        "dev_loss": last,
        "steps_redone": redone,
    }


def prepare_row(cluster, work: str, recipes: str) -> dict:
    """prepare_data uninterrupted, then with a node killed once it writes; whether both wrote the
    same stats."""
    prepare = ["jobs/prepare_data.py", "--input", recipes, "--output"]
    clean, _, _ = run_job(cluster, [*prepare, f"{work}/prepared"])
    hit, at, _ = run_job(
        cluster,
        [*prepare, f"{work}/prepared-killed"],
        lambda lines: any("[prepare_data] writing" in line for line in lines),
    )
    same = prepared_stats(f"{work}/prepared") == prepared_stats(f"{work}/prepared-killed")
    return {
        "job": "prepare_data",
        "uninterrupted_s": clean,
        "killed_s": hit,
        "killed_at_s": at,
        "output_equal": same,
    }


def rewrite_row(cluster, work: str, actors: int) -> dict:
    """The rewrite job (a tiny random model) uninterrupted, then with a node killed once two
    recipes are written; whether each (recipe, constraint) was written once."""
    model = tiny_model(f"{work}/model")
    rewrite = [
        "jobs/rewrite.py",
        "--data",
        f"{work}/prepared",
        "--split",
        "test",
        "--system",
        "contextual",
        "--model",
        model,
        "--actors",
        str(actors),
        "--batch-recipes",
        "1",
        "--output",
    ]
    clean, _, _ = run_job(cluster, [*rewrite, f"{work}/rw"])
    written = f"{work}/rw-killed/rewrites.jsonl"
    hit, at, _ = run_job(
        cluster, [*rewrite, f"{work}/rw-killed"], lambda lines: lines_in(written) >= 2
    )
    keys, baseline = rewrite_keys(f"{work}/rw-killed"), rewrite_keys(f"{work}/rw")
    return {
        "job": "rewrite",
        "uninterrupted_s": clean,
        "killed_s": hit,
        "killed_at_s": at,
        "output_equal": set(keys) == set(baseline) and set(keys.values()) == {1},
    }


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's flags."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--input", default=str(SAMPLE), help="recipes to prepare (default: the bundled sample)"
    )
    parser.add_argument("--workers", type=int, default=2, help="worker nodes (default 2)")
    parser.add_argument(
        "--train-steps",
        type=int,
        default=40,
        help="steps of the two-worker training run, checkpointed every 5 (0: no training run)",
    )
    parser.add_argument("--json", help="also write the figures here")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run both jobs twice on a fresh multi-node cluster and print the table."""
    args = build_parser().parse_args(argv)
    work = tempfile.mkdtemp(prefix="rrt-node-failure-")
    # Two CPUs a node: room for one training worker (1.5 CPUs, train_config) beside a tokenize task,
    # so the two training workers land on two nodes.
    with LocalCluster(workers=args.workers, cpus=2) as cluster:
        rows = [prepare_row(cluster, work, args.input), rewrite_row(cluster, work, args.workers)]
        if args.train_steps:
            rows.append(training_row(cluster, work, args.train_steps))
    print(
        f"{'job':<14} {'uninterrupted s':>16} {'node killed s':>14} {'killed at s':>12} {'output equal':>13}"
    )
    for row in rows:
        print(
            f"{row['job']:<14} {row['uninterrupted_s']:>16.1f} {row['killed_s']:>14.1f} "
            f"{row['killed_at_s'] or 0:>12.1f} {row['output_equal']!s:>13}"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=2)
    for row in rows:
        print(
            f"{row['job']}: time with a node killed / uninterrupted = {row['killed_s'] / row['uninterrupted_s']:.2f}"
        )
    return 0 if all(r["output_equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

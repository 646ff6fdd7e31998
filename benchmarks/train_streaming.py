"""Training streams at scale: jobs/train.py on prepared folders of growing size, side by side.

    python benchmarks/train_streaming.py                          # 100k and 2M step pairs
    python benchmarks/train_streaming.py --sizes 20000,200000     # a quicker look

Each folder is written by testing/synthetic_prepared.py in the layout prepare_data writes
(step_pairs/<variant>/{train,dev,test}/ Parquet shards of a few thousand rows, a dish at a
time). The job runs as a subprocess with its own local Ray (the tiny model, a few steps);
the process tree is sampled twice a second for the resident memory (RSS) of the driver,
of the Ray Train workers and of everything together. Time to the first step is from the
job's launch to the end of rank 0's first optimizer step (`first_step_at` in
train_stats.json). A training run this short reads only the head of the data, so any cost
that grows with the rows is start-up work or read-ahead: the ratios should stay near 1.
Each line printed is JSON; the last is the ratios of the largest size over the smallest.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from testing.sampled_run import run_sampled
from testing.synthetic_prepared import write_prepared

MB = 2**20


def _role(proc: psutil.Process, root: psutil.Process) -> str:
    """driver, train_worker (a Ray Train worker actor), ray_worker (Ray Data tasks, the train
    controller, idle workers) or daemon (raylet, GCS and the like)."""
    if proc.pid == root.pid:
        return "driver"
    title = " ".join(proc.cmdline()[:1]) or proc.name()
    if title.startswith("ray::"):
        return "train_worker" if "RayTrainWorker" in title else "ray_worker"
    return "daemon"


def sample_tree(root: psutil.Process) -> dict[str, list[int]]:
    """RSS of every process in the tree under `root`, by role."""
    roles: dict[str, list[int]] = {}
    for proc in [root] + root.children(recursive=True):
        try:
            roles.setdefault(_role(proc, root), []).append(proc.memory_info().rss)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return roles


def run_train(data: str, variant: str, steps: int, workers: int) -> dict:
    """Run jobs/train.py on one prepared folder; peak RSS by role, time to the first step, wall time."""
    out = tempfile.mkdtemp(prefix="rrt-train-stream-")
    ray_tmp = tempfile.mkdtemp(prefix="rrt-ts-")
    # A Ray temp folder of its own, removed after the run: a large run's spilled objects and logs
    # are not left in the machine's shared one.
    env = {
        **{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
        "RAY_TMPDIR": ray_tmp,
        "RAY_DATA_DISABLE_PROGRESS_BARS": "1",
    }
    command = [
        sys.executable,
        os.path.join(ROOT, "jobs", "train.py"),
        "--variant",
        variant,
        "--model",
        "tiny",
        "--data",
        data,
        "--output",
        out,
        "--max-steps",
        str(steps),
        "--num-workers",
        str(workers),
        "--overwrite",
    ]
    launched = time.time()
    peak = {"driver": 0, "train_workers": 0, "train_worker_max": 0, "ray_workers": 0, "total": 0}

    def watch(root) -> None:
        roles = sample_tree(root)
        now = {
            "driver": sum(roles.get("driver", [])),
            "train_workers": sum(roles.get("train_worker", [])),
            "train_worker_max": max(roles.get("train_worker", [0])),
            "ray_workers": sum(roles.get("ray_worker", [])),
            "total": sum(sum(v) for v in roles.values()),
        }
        for key, value in now.items():
            peak[key] = max(peak[key], value)

    returncode, err = run_sampled(command, env, watch, cwd=ROOT)
    wall = time.time() - launched
    try:
        if returncode != 0:
            raise SystemExit(f"train.py failed on {data}:\n{err[-3000:]}")
        with open(os.path.join(out, "train_stats.json"), encoding="utf-8") as handle:
            stats = json.load(handle)
    finally:
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    return {
        "wall_s": round(wall, 1),
        "first_step_s": round(stats["first_step_at"] - launched, 1),
        "fit_s": stats["wall_s"],
        "train_rows": stats["train_rows"],
        "steps": stats["steps"],
        **{f"peak_{k}_mb": round(v / MB) for k, v in peak.items()},
    }


def main() -> None:
    """Write each prepared folder, train on it, print one JSON line per size and the ratios."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--sizes", default="100000,2000000", help="comma list of step pairs per folder"
    )
    parser.add_argument("--variant", default="contextual", choices=("contextual", "no_context"))
    parser.add_argument("--max-steps", type=int, default=3, help="optimizer steps per run")
    parser.add_argument("--num-workers", type=int, default=2, help="Ray Train workers")
    parser.add_argument(
        "--scratch",
        help="folder for the prepared data (kept, and reused when already written); "
        "default: a temporary folder, removed at the end",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    scratch = args.scratch or tempfile.mkdtemp(prefix="rrt-train-stream-data-")
    results = {}
    try:
        for size in sizes:
            data = os.path.join(scratch, f"{args.variant}-{size}")
            if not os.path.exists(os.path.join(data, "stats.json")):
                started = time.perf_counter()
                write_prepared(data, size, args.variant)
                print(
                    json.dumps(
                        {
                            "wrote": data,
                            "rows": size,
                            "seconds": round(time.perf_counter() - started, 1),
                        }
                    ),
                    flush=True,
                )
            results[size] = run_train(data, args.variant, args.max_steps, args.num_workers)
            print(json.dumps({"rows": size, **results[size]}), flush=True)
    finally:
        if not args.scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    small, large = results[sizes[0]], results[sizes[-1]]
    ratio = {
        key: round(large[key] / small[key], 2) if small[key] else None
        for key in (
            "peak_driver_mb",
            "peak_train_workers_mb",
            "peak_train_worker_max_mb",
            "peak_total_mb",
            "first_step_s",
        )
    }
    print(
        json.dumps(
            {
                "ratio": f"{sizes[-1]} / {sizes[0]} rows",
                **ratio,
                "targets": {"memory": 1.2, "first_step_s": 1.5},
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()

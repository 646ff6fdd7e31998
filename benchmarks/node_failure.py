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
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from testing.cluster import LocalCluster
from testing.local_service import SAMPLE, tiny_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMINGS = ("seconds_per_stage", "recipes_per_second", "resumed")


def run_job(cluster: LocalCluster, args: list[str], kill_at=None) -> tuple[float, float | None, str]:
    """Run a job on the cluster; with `kill_at(lines) -> bool`, kill worker node 0 (and add one) the
    first time it holds. (seconds, seconds into the run of the kill, output)."""
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, *args], cwd=ROOT, env=cluster.env(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    killed = None
    while kill_at is not None and killed is None and process.poll() is None:
        if kill_at(lines):
            cluster.kill(0)
            killed = time.perf_counter() - started
            cluster.add()
        time.sleep(0.05)
    process.wait()
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


def main(argv: list[str] | None = None) -> int:
    """Run both jobs twice on a fresh multi-node cluster and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", default=str(SAMPLE), help="recipes to prepare (default: the bundled sample)")
    parser.add_argument("--workers", type=int, default=2, help="worker nodes of one CPU each (default 2)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="rrt-node-failure-")
    rows = []
    with LocalCluster(workers=args.workers) as cluster:
        prepare = ["jobs/prepare_data.py", "--input", args.input, "--output"]
        clean, _, _ = run_job(cluster, [*prepare, f"{work}/prepared"])
        hit, at, _ = run_job(cluster, [*prepare, f"{work}/prepared-killed"],
                             lambda lines: any("[prepare_data] writing" in line for line in lines))
        same = prepared_stats(f"{work}/prepared") == prepared_stats(f"{work}/prepared-killed")
        rows.append({"job": "prepare_data", "uninterrupted_s": clean, "killed_s": hit, "killed_at_s": at,
                     "output_equal": same})
        model = tiny_model(f"{work}/model")
        rewrite = ["jobs/rewrite.py", "--data", f"{work}/prepared", "--split", "test", "--system", "contextual",
                   "--model", model, "--actors", str(args.workers), "--batch-recipes", "1", "--output"]
        clean, _, _ = run_job(cluster, [*rewrite, f"{work}/rw"])
        written = f"{work}/rw-killed/rewrites.jsonl"
        hit, at, _ = run_job(cluster, [*rewrite, f"{work}/rw-killed"], lambda lines: lines_in(written) >= 2)
        keys, baseline = rewrite_keys(f"{work}/rw-killed"), rewrite_keys(f"{work}/rw")
        rows.append({"job": "rewrite", "uninterrupted_s": clean, "killed_s": hit, "killed_at_s": at,
                     "output_equal": set(keys) == set(baseline) and set(keys.values()) == {1}})
    print(f"{'job':<14} {'uninterrupted s':>16} {'node killed s':>14} {'killed at s':>12} {'output equal':>13}")
    for row in rows:
        print(f"{row['job']:<14} {row['uninterrupted_s']:>16.1f} {row['killed_s']:>14.1f} "
              f"{row['killed_at_s'] or 0:>12.1f} {row['output_equal']!s:>13}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=2)
    for row in rows:
        print(f"{row['job']}: time with a node killed / uninterrupted = {row['killed_s'] / row['uninterrupted_s']:.2f}")
    return 0 if all(r["output_equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

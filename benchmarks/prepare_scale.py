"""Scale benchmark of jobs/prepare_data.py: throughput and peak memory as the corpus grows.

    python benchmarks/prepare_scale.py                      # 25k, 100k, 200k recipes; 1 vs 2 workers
    python benchmarks/prepare_scale.py --sizes 5000,20000   # a quicker look

Corpora are built from the real web recipes in ../shared/data: copies with perturbed
titles and ids, half of each dish rewritten by the substitution guide so that every dish
holds recipes that break and obey constraints. Dishes keep about six recipes at every
size, so the work per recipe is the same and only the corpus grows. For each size the
job runs as a subprocess; the peak memory is the summed PSS of the job and every Ray
process it started, sampled twice a second. Each line printed is JSON; the last is the
scaling factor: throughput with 2 Ray workers over 1 worker.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from rrt.recipes.lexicon import CONSTRAINTS
from rrt.recipes.loaders import read_recipes
from rrt.recipes.substitutions import substitute_recipe
from testing.sampled_run import run_sampled

WEB = os.path.join(os.path.dirname(ROOT), "shared", "data", "web_recipes", "recipes.jsonl")
DISH_SIZE = 6
SHARDS = 8
PAPER_RECIPES = 1_250_000
PAPER_CORES = 64


def build_corpus(size: int, folder: str, seed: int = 0) -> None:
    """Write `size` perturbed copies of the web recipes as JSONL shards in `folder`."""
    base = list(read_recipes([WEB]))
    rng = random.Random(seed)
    versions = {r.id: [substitute_recipe(r, c).recipe for c in CONSTRAINTS] for r in base}
    variants = max(1, round(size / (len(base) * DISH_SIZE)))
    os.makedirs(folder, exist_ok=True)
    shards = [
        open(os.path.join(folder, f"part-{k:02d}.jsonl"), "w", encoding="utf-8")
        for k in range(SHARDS)
    ]
    puffery = ["Best", "Easy", "Homemade", "Perfect", "Ultimate", "Classic", ""]
    for n in range(size):
        recipe = base[n % len(base)]
        variant = (n // len(base)) % variants
        copy = recipe if rng.random() < 0.5 else rng.choice(versions[recipe.id])
        row = {
            "id": f"{recipe.id}~{n}",
            "title": f"{rng.choice(puffery)} {recipe.title} {variant}".strip(),
            "ingredients": copy.ingredients,
            "steps": copy.steps,
            "source": recipe.source,
        }
        shards[n % SHARDS].write(json.dumps(row, ensure_ascii=False) + "\n")
    for handle in shards:
        handle.close()


def _role(proc: psutil.Process, root: psutil.Process) -> str:
    """Which part of the job a process is: the driver, a Ray daemon, or a Ray worker."""
    if proc.pid == root.pid:
        return "driver"
    name = proc.name()
    return "ray_workers" if name.startswith("ray::") else name


def tree_pss(process: psutil.Process) -> tuple[int, dict[str, int], list[int]]:
    """Summed PSS of a process tree, its split by role (driver, raylet, workers, ...), and
    the PSS of each Ray worker."""
    total, roles, workers = 0, {}, []
    for proc in [process] + process.children(recursive=True):
        try:
            pss = proc.memory_full_info().pss
            role = _role(proc, process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        total += pss
        roles[role] = roles.get(role, 0) + pss
        if role == "ray_workers":
            workers.append(pss)
    return total, roles, workers


def _shm_used() -> int:
    """Bytes used in /dev/shm, where a local Ray keeps its object store."""
    try:
        return psutil.disk_usage("/dev/shm").used
    except OSError:
        return 0


def prepare_command(corpus: str, out: str, workers: int) -> list[str]:
    """The prepare_data command both benchmarks of data preparation run: title dishes, a local Ray
    of `workers` CPUs, the output replaced."""
    return [
        sys.executable,
        os.path.join(ROOT, "jobs", "prepare_data.py"),
        "--input",
        corpus,
        "--output",
        out,
        "--dish-key",
        "title",
        "--num-cpus",
        str(workers),
        "--overwrite",
    ]


def run_job(corpus: str, workers: int) -> dict:
    """Run prepare_data on a corpus; wall time, peak memory and the job's own stats."""
    out = tempfile.mkdtemp(prefix="rrt-scale-out-")
    env = {**os.environ, "RAY_DATA_DISABLE_PROGRESS_BARS": "1"}
    command = prepare_command(corpus, out, workers)
    started = time.perf_counter()
    peak = {"total": 0, "roles": {}, "workers": [], "shm": 0, "at": 0.0}

    def sample(watcher) -> None:
        total, roles, workers = tree_pss(watcher)
        if total > peak["total"]:
            peak.update(
                total=total,
                roles=roles,
                workers=workers,
                shm=_shm_used(),
                at=time.perf_counter() - started,
            )

    returncode, err = run_sampled(command, env, sample)
    wall = time.perf_counter() - started
    if returncode != 0:
        raise SystemExit(f"prepare_data failed on {corpus}:\n{err[-2000:]}")
    with open(os.path.join(out, "stats.json"), encoding="utf-8") as handle:
        stats = json.load(handle)
    shutil.rmtree(out, ignore_errors=True)
    return {
        "wall_s": round(wall, 1),
        "peak_mem_mb": round(peak["total"] / 2**20),
        "peak_by_role_mb": {
            k: round(v / 2**20) for k, v in sorted(peak["roles"].items(), key=lambda kv: -kv[1])
        },
        "peak_at_s": round(peak["at"], 1),
        "workers_at_peak": len(peak["workers"]),
        "largest_worker_mb": round(max(peak["workers"], default=0) / 2**20),
        "shm_at_peak_mb": round(peak["shm"] / 2**20),
        "stats": stats,
    }


def main() -> None:
    """Build each corpus, run the job, print one JSON line per run and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="25000,100000,200000", help="comma list of corpus sizes")
    parser.add_argument(
        "--workers", type=int, default=2, help="Ray workers (CPUs) for the size sweep"
    )
    parser.add_argument(
        "--skip-scaling", action="store_true", help="skip the 1-worker run of the first size"
    )
    args = parser.parse_args()
    if not os.path.exists(WEB):
        raise SystemExit(f"needs the real web recipes at {WEB}")
    sizes = [int(s) for s in args.sizes.split(",")]
    scratch = tempfile.mkdtemp(prefix="rrt-scale-")
    results = {}
    try:
        for size in sizes:
            corpus = os.path.join(scratch, f"corpus-{size}")
            build_corpus(size, corpus)
            runs = {args.workers: run_job(corpus, args.workers)}
            if size == sizes[0] and args.workers != 1 and not args.skip_scaling:
                runs[1] = run_job(corpus, 1)
            for workers, run in runs.items():
                stats = run["stats"]
                pairs = sum(sum(t["recipe_pairs"].values()) for t in stats["table1"].values())
                line = {
                    "recipes": stats["recipes"],
                    "workers": workers,
                    "wall_s": run["wall_s"],
                    "recipes_per_s": round(stats["recipes"] / run["wall_s"], 1),
                    "recipes_per_s_per_core": round(stats["recipes"] / run["wall_s"] / workers, 1),
                    "peak_mem_mb": run["peak_mem_mb"],
                    "peak_by_role_mb": run["peak_by_role_mb"],
                    "peak_at_s": run["peak_at_s"],
                    "workers_at_peak": run["workers_at_peak"],
                    "largest_worker_mb": run["largest_worker_mb"],
                    "shm_at_peak_mb": run["shm_at_peak_mb"],
                    "recipe_pairs": pairs,
                    "seconds_per_stage": stats["seconds_per_stage"],
                }
                results[(size, workers)] = line
                print(json.dumps(line), flush=True)
            shutil.rmtree(corpus, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    first, last = results[(sizes[0], args.workers)], results[(sizes[-1], args.workers)]
    scaling = (
        results[(sizes[0], args.workers)]["recipes_per_s"] / results[(sizes[0], 1)]["recipes_per_s"]
        if (sizes[0], 1) in results
        else None
    )
    efficiency = (scaling / args.workers) if scaling else 1.0
    per_core = last["recipes_per_s_per_core"]
    projected_h = PAPER_RECIPES / (per_core * PAPER_CORES * efficiency) / 3600
    print(
        json.dumps(
            {
                "peak_mem_ratio_largest_to_smallest": round(
                    last["peak_mem_mb"] / first["peak_mem_mb"], 2
                ),
                "target_peak_mem_ratio_max": 1.5,
                "projected_wall_h_1.25M_recipes_64_cores": round(projected_h, 2),
            }
        )
    )
    if scaling is not None:
        print(json.dumps({"scaling_factor_2_workers_over_1": round(scaling, 2)}))


if __name__ == "__main__":
    main()

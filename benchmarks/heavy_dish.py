"""Heavy-tailed dishes: jobs/prepare_data.py on a corpus where one dish has thousands of versions,
beside a corpus of the same size with evenly spread dishes.

    python benchmarks/heavy_dish.py                               # 20,000 versions of one dish
    python benchmarks/heavy_dish.py --versions 2000 --background 2000   # a quicker look

The heavy corpus holds `--versions` recipes titled as one dish ("Best Chocolate Chip Cookies",
"Easy Chocolate Chip Cookies", ...: one dish key), made from the real web recipes' chocolate
chip cookies: half rewritten by the substitution guide for a constraint, and their steps
perturbed (neighbours swapped or merged, a step dropped, times changed), so no two are the
same. Beside it `--background` recipes in dishes of about six (benchmarks/prepare_scale.py's
corpus). The even corpus is the same number of recipes, all in dishes of about six. Each
corpus runs through prepare_data as a subprocess with its own local Ray; the peak memory is
the summed PSS of the job and its Ray processes, sampled twice a second. Pairs per dish are
counted in recipe_pairs/. Each line printed is JSON; the last is the ratios heavy / even.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.prepare_scale import WEB, build_corpus, prepare_command, tree_pss
from rrt.corpus.dish import dish_key
from rrt.recipes.lexicon import CONSTRAINTS
from rrt.recipes.loaders import read_recipes
from rrt.recipes.substitutions import substitute_recipe
from runtime.parquet import parquet_files
from testing.sampled_run import run_sampled

TITLE = "Chocolate Chip Cookies"
PUFFERY = [
    "",
    "Best",
    "Easy",
    "Homemade",
    "Perfect",
    "Ultimate",
    "Classic",
    "Simple",
    "Quick",
    "My Favorite",
]


def _perturbed(steps: list[str], rng: random.Random) -> list[str]:
    """One version's steps: neighbours swapped or merged, a step dropped, or times changed."""
    steps = list(steps)
    action = rng.choice(["swap", "merge", "drop", "times", "times"])
    if action == "swap" and len(steps) >= 3:
        k = rng.randrange(len(steps) - 1)
        steps[k], steps[k + 1] = steps[k + 1], steps[k]
    elif action == "merge" and len(steps) >= 3:
        k = rng.randrange(len(steps) - 1)
        steps[k : k + 2] = [f"{steps[k]} {steps[k + 1]}"]
    elif action == "drop" and len(steps) >= 3:
        steps.pop(rng.randrange(len(steps)))
    else:
        steps = [
            re.sub(
                r"\b(\d+)(?= ?min)",
                lambda m: str(max(1, int(m.group(1)) + rng.choice((-2, -1, 1, 2)))),
                s,
            )
            for s in steps
        ]
    return steps


def write_big_dish(folder: str, versions: int, seed: int = 1) -> None:
    """`versions` recipes of one dish as JSONL shards in `folder`."""
    bases = [r for r in read_recipes([WEB]) if "chip cookie" in dish_key(r.title)]
    rng = random.Random(seed)
    rewrites = {r.id: [substitute_recipe(r, c).recipe for c in CONSTRAINTS] for r in bases}
    os.makedirs(folder, exist_ok=True)
    shards: list[list[str]] = [[] for _ in range(4)]
    for n in range(versions):
        base = bases[n % len(bases)]
        recipe = base if rng.random() < 0.5 else rng.choice(rewrites[base.id])
        row = {
            "id": f"cookie~{n}",
            "title": f"{rng.choice(PUFFERY)} {TITLE}".strip(),
            "ingredients": list(recipe.ingredients),
            "steps": _perturbed(list(recipe.steps), rng),
            "source": base.source,
        }
        shards[n % len(shards)].append(json.dumps(row, ensure_ascii=False) + "\n")
    for k, lines in enumerate(shards):
        with open(os.path.join(folder, f"dish-{k:02d}.jsonl"), "w", encoding="utf-8") as handle:
            handle.writelines(lines)


def pairs_per_dish(output: str) -> Counter:
    """Recipe pairs per dish key in a prepare_data output."""
    import pyarrow.dataset as pads

    counts: Counter = Counter()
    files = parquet_files(os.path.join(output, "recipe_pairs"))
    for batch in (
        pads.dataset(files, format="parquet").to_batches(columns=["dish"]) if files else []
    ):
        counts.update(batch.column("dish").to_pylist())
    return counts


def run_prepare(corpus: str, workers: int) -> dict:
    """Run prepare_data on a corpus: wall time, peak memory, the job's stats and pairs per dish."""
    out = tempfile.mkdtemp(prefix="rrt-heavy-out-")
    ray_tmp = tempfile.mkdtemp(prefix="rrt-hd-")
    # A Ray temp folder of its own, removed after the run: a large run's spilled objects and logs
    # are not left in the machine's shared one.
    env = {
        **{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
        "RAY_TMPDIR": ray_tmp,
        "RAY_DATA_DISABLE_PROGRESS_BARS": "1",
    }
    command = prepare_command(corpus, out, workers)
    started = time.perf_counter()
    peak = {"total": 0, "largest_worker": 0}

    def watch(root) -> None:
        total, _, workers_pss = tree_pss(root)
        peak["total"] = max(peak["total"], total)
        peak["largest_worker"] = max([peak["largest_worker"], *workers_pss])

    returncode, err = run_sampled(command, env, watch, cwd=ROOT)
    wall = time.perf_counter() - started
    try:
        if returncode != 0:
            raise SystemExit(f"prepare_data failed on {corpus}:\n{err[-3000:]}")
        with open(os.path.join(out, "stats.json"), encoding="utf-8") as handle:
            stats = json.load(handle)
        per_dish = pairs_per_dish(out)
    finally:
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    big = dish_key(TITLE)
    return {
        "recipes": stats["recipes"],
        "wall_s": round(wall, 1),
        "peak_mem_mb": round(peak["total"] / 2**20),
        "largest_ray_worker_mb": round(peak["largest_worker"] / 2**20),
        "recipe_pairs": sum(per_dish.values()),
        "dishes_paired": len(per_dish),
        "max_pairs_per_dish": max(per_dish.values(), default=0),
        "big_dish_pairs": per_dish.get(big, 0),
        "unpaired_capped_recipes": stats["unpaired_capped_recipes"],
        "seconds_per_stage": stats["seconds_per_stage"],
    }


def main() -> None:
    """Build both corpora, run the job on each, print one JSON line per corpus and the ratios."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--versions", type=int, default=20000, help="recipes of the one big dish")
    parser.add_argument(
        "--background", type=int, default=4000, help="other recipes, in dishes of about six"
    )
    parser.add_argument("--workers", type=int, default=2, help="CPUs of the job's local Ray")
    args = parser.parse_args()
    if not os.path.exists(WEB):
        raise SystemExit(f"needs the real web recipes at {WEB}")
    scratch = tempfile.mkdtemp(prefix="rrt-heavy-")
    results = {}
    try:
        heavy, even = os.path.join(scratch, "heavy"), os.path.join(scratch, "even")
        build_corpus(args.background, heavy)
        write_big_dish(heavy, args.versions)
        build_corpus(args.background + args.versions, even)
        for name, corpus in (("heavy", heavy), ("even", even)):
            results[name] = run_prepare(corpus, args.workers)
            print(json.dumps({"corpus": name, **results[name]}), flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    heavy, even = results["heavy"], results["even"]
    print(
        json.dumps(
            {
                "ratio": "heavy / even",
                "wall": round(heavy["wall_s"] / even["wall_s"], 2),
                "peak_mem": round(heavy["peak_mem_mb"] / even["peak_mem_mb"], 2),
                "largest_ray_worker": round(
                    heavy["largest_ray_worker_mb"] / even["largest_ray_worker_mb"], 2
                ),
                "max_pairs_per_dish": round(
                    heavy["max_pairs_per_dish"] / max(1, even["max_pairs_per_dish"]), 2
                ),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()

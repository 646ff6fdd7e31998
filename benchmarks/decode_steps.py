"""Decode steps side by side: the growing cache (`rewrite.decode_step: dynamic`, the baseline)
against the preallocated static cache (`static`, with the copied and the shared prompt cache;
`graph` on CUDA; `-step`: step-level batching, `rewrite.schedule: step`), one trained model
rewriting the same recipes the way the rewrite job does (continuous batching).

    python benchmarks/decode_steps.py --model out/quality/train/contextual_rule/model \\
        --data out/quality/prepared --recipes 16

Each way runs once untimed (its caches and kernels), then `--rounds` times in turns, so a slow
moment of the machine falls on every way alike; the median is reported. The ways draw the same
numbers, so the records must be the same (on CPU in fp32, token for token; in a GPU's 16 bits up
to rounding where a next-token distribution is nearly flat); the script says whether they are.
Prints a JSON line per way and the ratio of the fastest static way to the dynamic one last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from rewrite_throughput import input_arguments, load_inputs

from rrt.config import load_settings
from rrt.modelling import static_decode
from rrt.modelling.loading import build_rewriter
from rrt.modelling.scheduler import rewrite_all

# way: (rewrite.decode_step, rewrite.prompt_cache, rewrite.schedule)
WAYS = {
    "dynamic": ("dynamic", "copied", "round"),
    "static": ("static", "copied", "round"),
    "static-shared": ("static", "shared", "round"),
    "static-step": ("static", "shared", "step"),
    "graph": ("graph", "copied", "round"),
    "graph-shared": ("graph", "shared", "round"),
    "graph-step": ("graph", "shared", "step"),
}
DEFAULT_WAYS = {"cpu": "dynamic,static,static-shared", "cuda": "dynamic,graph,graph-shared"}


def step_lengths(records: list[dict], tokenizer) -> dict:
    """How long the sampled steps ran: the mean tokens of a candidate and of each step's longest
    candidate (a stop counted as a token), which a round of recipes waits for."""
    steps = [
        [
            len(tokenizer(c["text"], add_special_tokens=False)["input_ids"])
            + (c["ended"] == "stop")
            for c in entry["candidates"]
        ]
        for r in records
        for entry in r["steps"]
        if entry["candidates"] and "ended" in entry["candidates"][0]
    ]
    flat = [n for step in steps for n in step]
    return {
        "sampled_steps": len(steps),
        "mean_candidate_tokens": round(statistics.mean(flat), 2) if flat else None,
        "mean_longest_tokens": round(statistics.mean(max(s) for s in steps), 2) if steps else None,
    }


def differing_candidates(records: list[dict], baseline: list[dict]) -> int:
    """Sampled candidates whose text differs from the baseline's at the same recipe, step and place
    (a changed choice changes every later prompt of its recipe)."""
    return sum(
        a["text"] != b["text"]
        for r, q in zip(records, baseline)
        for e, f in zip(r["steps"], q["steps"])
        for a, b in zip(e["candidates"], f["candidates"])
    )


def main() -> None:
    """Time each decode step on the same recipes; print a JSON line each and the ratio last."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    input_arguments(parser, 16, os.path.join(ROOT, "out", "demo", "contextual_rule", "model"))
    parser.add_argument(
        "--slots", type=int, help="recipes in flight (default: rewrite.batch_recipes)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="timed runs of each way, in turns (0: the first run of each only, its shapes' "
        "set-up in its time: for the records and counts)",
    )
    parser.add_argument(
        "--constrained",
        action="store_true",
        help="constrained decoding (the guard checks each drawn token), as the job's --constrained",
    )
    parser.add_argument("--device", default="cpu", choices=sorted(DEFAULT_WAYS))
    parser.add_argument(
        "--ways",
        help=f"comma list of: {', '.join(WAYS)} (graph: CUDA only; default: "
        f"{DEFAULT_WAYS['cpu']} on cpu, {DEFAULT_WAYS['cuda']} on cuda)",
    )
    args = parser.parse_args()
    args.ways = args.ways or DEFAULT_WAYS[args.device]
    ways = [w.strip() for w in args.ways.split(",")]
    unknown = [w for w in ways if w not in WAYS]
    if unknown or "dynamic" not in ways:
        raise SystemExit(f"--ways must name dynamic and any of {', '.join(WAYS)} (got {args.ways})")
    if args.device == "cpu" and any(WAYS[w][0] == "graph" for w in ways):
        raise SystemExit("the graph ways need --device cuda")
    model, tasks = load_inputs(args)
    settings = load_settings().rewrite.model_dump()
    slots = args.slots or settings["batch_recipes"]

    def run(way: str) -> tuple[float, list[dict], dict]:
        """Seconds, records and engine counts of one rewrite of every task this way."""
        step, cache, schedule = WAYS[way]
        rewriter = build_rewriter(
            model,
            {**settings, "decode_step": step, "prompt_cache": cache, "schedule": schedule},
            settings["candidates"],
            constrained=args.constrained,
        )
        started = time.perf_counter()
        records = rewrite_all(rewriter, tasks, slots)
        return time.perf_counter() - started, records, rewriter.stats

    first, counts, first_seconds = {}, {}, {}
    stats: dict[str, dict] = {}
    for (
        way
    ) in ways:  # untimed: each way's first shapes and kernels (and what the static cache counted)
        before = dict(static_decode.STATS)
        seconds, first[way], stats[way] = run(way)
        first_seconds[way] = seconds
        counts[way] = {k: v - before[k] for k, v in static_decode.STATS.items() if v != before[k]}
    times: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(args.rounds):
        for way in ways:
            seconds, _records, stats[way] = run(way)
            times[way].append(seconds)
    steps = sum(len(r["rewrite"]["steps"]) for r in first["dynamic"])
    print(json.dumps({"lengths": step_lengths(first["dynamic"], model.tokenizer)}), flush=True)
    speed = {}
    for way in ways:
        median = statistics.median(times[way] or [first_seconds[way]])
        speed[way] = steps / median
        print(
            json.dumps(
                {
                    "way": way,
                    "recipes": len(tasks),
                    "steps": steps,
                    "slots": slots,
                    "seconds": [round(t, 2) for t in times[way] or [first_seconds[way]]],
                    "first_run_only": not times[way],
                    "steps_per_s": round(speed[way], 3),
                    "sampling_s": round(stats[way]["sampling_s"], 2),
                    "static_decode": counts[way],
                    # decode steps run: what a GPU pays for, at nearly one cost for any rows
                    "decode_steps": counts[way].get("replays", 0)
                    + counts[way].get("eager_steps", 0),
                    "same_records_as_dynamic": first[way] == first["dynamic"],
                    "records_differing": sum(a != b for a, b in zip(first[way], first["dynamic"])),
                    "candidates_differing": differing_candidates(first[way], first["dynamic"]),
                    "constrained": args.constrained,
                    "model": args.model,
                    "device": args.device,
                    "threads": args.threads,
                }
            ),
            flush=True,
        )
    best = max((w for w in ways if w != "dynamic"), key=lambda w: speed[w], default=None)
    if best:
        print(f"ratio {best} / dynamic: {speed[best] / speed['dynamic']:.2f}")


if __name__ == "__main__":
    main()

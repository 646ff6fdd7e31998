"""Serve throughput: the rewriter service with request batching on, against batch size 1.

    python benchmarks/serve_throughput.py                          # a tiny random-weight model
    python benchmarks/serve_throughput.py --model out/demo/grounded_rule/model --requests 400
    python benchmarks/serve_throughput.py --recipes ../shared/data/web_recipes/recipes.jsonl --requests 120
    python benchmarks/serve_throughput.py --model M --use-gpu                                # target 5x

Starts `rrt serve` twice on this machine (one rewriter replica each), same model, same config
but `serve.batch.max_batch_size` (the config's, and 1), and sends both the same requests (one
recipe each, the bundled sample's or --recipes', constraints cycling, ten candidates per step) from 16 concurrent
clients. The two take turns, a slice of the requests each, so load from other work on a shared
machine falls on both alike. Prints one JSON line per setting (requests/s, p50/p95 latency,
errors, mean batch), the ratio batched / unbatched last.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from rrt.config import load_settings
from rrt.recipes.lexicon import CONSTRAINTS
from rrt.recipes.loaders import read_recipes
from testing.local_service import SAMPLE, LocalService, free_port, tiny_model, write_config


def sample_requests(count: int, candidates: int, source: str = str(SAMPLE)) -> list[dict]:
    """`count` request bodies: the recipes of `source` (default the bundled sample) in turn, constraints cycling."""
    recipes = [r for r in read_recipes([source]) if r.steps]
    pairs = zip(itertools.cycle(recipes), itertools.cycle(CONSTRAINTS))
    return [
        {
            "recipe": {"title": r.title, "ingredients": r.ingredients, "steps": r.steps},
            "constraint": c,
            "candidates": candidates,
            "seed": i,
        }
        for i, (r, c) in zip(range(count), pairs)
    ]


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) of values."""
    ordered = sorted(values)
    return (
        ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]
        if ordered
        else float("nan")
    )


def send_all(url: str, bodies: list[dict], concurrency: int) -> tuple[list[tuple], float]:
    """Send every body from `concurrency` clients: (status, seconds, batch size) each, and the wall time."""
    import requests

    local = threading.local()

    def send(body: dict) -> tuple[int, float, int]:
        """One request on this thread's session: status, seconds, batch size."""
        local.session = getattr(local, "session", None) or requests.Session()
        started = time.perf_counter()
        try:
            reply = local.session.post(url + "/v1/rewrite", json=body, timeout=120)
            status = reply.status_code
            batch = reply.json()["timings"]["batch_size"] if status == 200 else 0
        except requests.RequestException:
            status, batch = 0, 0
        return status, time.perf_counter() - started, batch

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(send, bodies))
    return results, time.perf_counter() - started


def summary(results: list[tuple], wall: float) -> dict:
    """Requests/s, latency percentiles, errors and mean batch size of one setting's requests."""
    ok = [r for r in results if r[0] == 200]
    latencies = [r[1] for r in ok]
    return {
        "requests": len(results),
        "errors": len(results) - len(ok),
        "seconds": round(wall, 2),
        "requests_per_s": round(len(ok) / wall, 2),
        "p50_s": round(percentile(latencies, 50), 3),
        "p95_s": round(percentile(latencies, 95), 3),
        "mean_batch": round(sum(r[2] for r in ok) / max(1, len(ok)), 2),
    }


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's flags."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", help="an exported model folder (default: build a tiny random-weight one)"
    )
    parser.add_argument("--config", default=os.path.join(ROOT, "ray_config.yaml"))
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--candidates", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=16)
    parser.add_argument(
        "--rounds", type=int, default=4, help="turns each setting takes, a slice of requests each"
    )
    parser.add_argument("--max-step-tokens", type=int, help="override serve.max_step_tokens")
    parser.add_argument(
        "--recipes",
        default=str(SAMPLE),
        help="recipes the requests carry (any corpus file; default: the bundled sample), e.g. "
        "../shared/data/web_recipes/recipes.jsonl, whose step counts vary as users' do",
    )
    parser.add_argument(
        "--use-gpu", action="store_true", help="one GPU per replica (serve.num_gpus: 1); target 5x"
    )
    return parser


def take_turns(args, settings: dict[str, int], bodies: list[dict]) -> dict[str, tuple]:
    """Start one service per setting (its max_batch_size), warm each up, then send each a slice
    of the requests in turn; (answers, seconds) per setting."""
    serve = load_settings(args.config).serve.model_dump()
    batch = serve["batch"]
    # One replica each: the comparison is batching, not autoscaling.
    fixed = {
        "autoscaling": {"min_replicas": 1, "max_replicas": 1},
        "max_step_tokens": args.max_step_tokens or serve["max_step_tokens"],
        "num_gpus": 1 if args.use_gpu else serve["num_gpus"],
    }
    results = {name: ([], 0.0) for name in settings}
    with tempfile.TemporaryDirectory(prefix="rrt-serve-bench-") as tmp:
        model = args.model or tiny_model(os.path.join(tmp, "model"))
        services = {}
        try:
            for name, size in settings.items():
                config = write_config(
                    tmp,
                    f"{name}.yaml",
                    base=args.config,
                    port=free_port(),
                    **fixed,
                    batch={**batch, "max_batch_size": size},
                )
                services[name] = LocalService(model, config).start()
                send_all(services[name].url, bodies[: args.warmup], args.concurrency)
            step = -(-len(bodies) // args.rounds)
            for lo in range(0, len(bodies), step):
                for name, service in services.items():
                    done, wall = send_all(service.url, bodies[lo : lo + step], args.concurrency)
                    results[name] = (results[name][0] + done, results[name][1] + wall)
        finally:
            for service in services.values():
                left = service.stop()
                if left:
                    print(
                        f"warning: processes left after stopping the service: {left}",
                        file=sys.stderr,
                    )
    return results


def main() -> None:
    """Run both settings and print their lines, the ratio last."""
    args = build_parser().parse_args()
    batched = load_settings(args.config).serve.batch.max_batch_size
    settings = {"batched": batched, "unbatched": 1}
    bodies = sample_requests(args.requests, args.candidates, args.recipes)
    results = take_turns(args, settings, bodies)
    lines = {name: summary(*results[name]) for name in settings}
    for name, size in settings.items():
        print(
            json.dumps(
                {
                    "setting": name,
                    "max_batch_size": size,
                    "concurrency": args.concurrency,
                    "candidates": args.candidates,
                    **lines[name],
                }
            ),
            flush=True,
        )
    ratio = lines["batched"]["requests_per_s"] / max(lines["unbatched"]["requests_per_s"], 1e-9)
    target = 5.0 if args.use_gpu else 1.5
    print(json.dumps({"ratio_batched_over_unbatched": round(ratio, 2), "target": target}))


if __name__ == "__main__":
    main()

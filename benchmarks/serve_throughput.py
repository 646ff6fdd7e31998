"""Serve throughput: the rewriter service with request batching on, against batch size 1.

    python benchmarks/serve_throughput.py                          # a tiny random-weight model
    python benchmarks/serve_throughput.py --model out/demo/contextual/model --requests 400

Starts `rrt serve` twice on this machine, same model, same config but `serve.batch.max_batch_size`
(the config's, then 1), and sends both the same requests (one bundled sample recipe each, its
constraints cycling, ten candidates per step) from 16 concurrent clients. Prints one JSON line
per setting (requests/s, p50/p95 latency, errors), the ratio batched / unbatched last.
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

from rrt.config import load_config, section  # noqa: E402
from rrt.lexicon import CONSTRAINTS  # noqa: E402
from rrt.loaders import read_recipes  # noqa: E402
from serve.local import SAMPLE, LocalService, free_port, tiny_model, write_config  # noqa: E402


def sample_requests(count: int, candidates: int) -> list[dict]:
    """`count` request bodies: the bundled sample recipes in turn, constraints cycling."""
    recipes = list(read_recipes([str(SAMPLE)]))
    pairs = zip(itertools.cycle(recipes), itertools.cycle(CONSTRAINTS))
    return [{"recipe": {"title": r.title, "ingredients": r.ingredients, "steps": r.steps}, "constraint": c,
             "candidates": candidates, "seed": i} for i, (r, c) in zip(range(count), pairs)]


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) of values."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))] if ordered else float("nan")


def load(url: str, bodies: list[dict], concurrency: int) -> dict:
    """Send every body from `concurrency` clients; requests/s, latency percentiles and errors."""
    import requests

    local = threading.local()

    def send(body: dict) -> tuple[int, float, float]:
        session = getattr(local, "session", None) or requests.Session()
        local.session = session
        started = time.perf_counter()
        try:
            reply = session.post(url + "/v1/rewrite", json=body, timeout=120)
            status, batch = reply.status_code, (reply.json().get("timings", {}).get("batch_size", 0)
                                                if reply.status_code == 200 else 0)
        except requests.RequestException:
            status, batch = 0, 0
        return status, time.perf_counter() - started, batch

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(send, bodies))
    wall = time.perf_counter() - started
    ok = [r for r in results if r[0] == 200]
    latencies = [r[1] for r in ok]
    return {"requests": len(bodies), "errors": len(results) - len(ok), "seconds": round(wall, 2),
            "requests_per_s": round(len(ok) / wall, 2), "p50_s": round(percentile(latencies, 50), 3),
            "p95_s": round(percentile(latencies, 95), 3),
            "mean_batch": round(sum(r[2] for r in ok) / max(1, len(ok)), 2)}


def measure(model: str, config: str, bodies: list[dict], concurrency: int, warmup: int) -> dict:
    """Start the service with this config, warm it up, load it, stop it."""
    service = LocalService(model, config).start()
    try:
        load(service.url, bodies[:warmup], concurrency)
        return load(service.url, bodies, concurrency)
    finally:
        left = service.stop()
        if left:
            print(f"warning: processes left after stopping the service: {left}", file=sys.stderr)


def main() -> None:
    """Run both settings and print their lines, the ratio last."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="an exported model folder (default: build a tiny random-weight one)")
    parser.add_argument("--config", default=os.path.join(ROOT, "ray_config.yaml"))
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--candidates", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=16)
    parser.add_argument("--max-step-tokens", type=int, help="override serve.max_step_tokens")
    args = parser.parse_args()

    serve = dict(section(load_config(args.config), "serve"))
    batch = serve.get("batch") or {}
    # One replica in both runs: the comparison is batching, not autoscaling.
    fixed = {"autoscaling": {"min_replicas": 1, "max_replicas": 1},
             "max_step_tokens": args.max_step_tokens or serve.get("max_step_tokens", 64)}
    bodies = sample_requests(args.requests, args.candidates)
    with tempfile.TemporaryDirectory(prefix="rrt-serve-bench-") as tmp:
        model = args.model or tiny_model(os.path.join(tmp, "model"))
        results = {}
        for name, size in (("batched", int(batch.get("max_batch_size", 8))), ("unbatched", 1)):
            config = write_config(tmp, f"{name}.yaml", port=free_port(), batch={**batch, "max_batch_size": size},
                                  **fixed)
            results[name] = measure(model, config, bodies, args.concurrency, args.warmup)
            print(json.dumps({"setting": name, "max_batch_size": size, "concurrency": args.concurrency,
                              "candidates": args.candidates, **results[name]}), flush=True)
    ratio = results["batched"]["requests_per_s"] / max(results["unbatched"]["requests_per_s"], 1e-9)
    print(json.dumps({"ratio_batched_over_unbatched": round(ratio, 2), "target": 1.5}))


if __name__ == "__main__":
    main()

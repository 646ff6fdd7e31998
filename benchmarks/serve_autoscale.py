"""Autoscaled serving: the rewriter service on a multi-node Ray on this machine (testing/cluster.py),
deployed from serve/config.yaml, under load that ramps from 1 to 16 concurrent clients and back
(1, 2, 4, 8, 16, 8, 4, 2, 1), each level held a while. Records the running rewriter replicas once
a second and each request's latency.

    python benchmarks/serve_autoscale.py
    python benchmarks/serve_autoscale.py --hold 60 --plot out/serve_autoscale.png --json out/serve_autoscale.json

Serve's autoscaling waits 30 s before adding a replica and 10 minutes before removing one by
default; here the rewriter's `autoscaling_config` in the Serve config (as serve/config.yaml sets
it) takes short delays (--upscale-delay, --downscale-delay, a 5 s look-back) so that a run of a few
minutes shows both, and a low `target_ongoing_requests` (--target) so that 16 clients ask for more
replicas than the cluster's four worker CPUs hold. Prints a JSON line per load level (clients,
requests, requests/s, p50/p95 latency, non-200 answers, replicas at its start, end and most),
then a table, writes the plot (replicas and clients over time above, latency per level below), and
last the most replicas under load against those after it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.serve_throughput import percentile, sample_requests
from testing.cluster import LocalCluster
from testing.cluster_service import ClusterService, Load, serve_config
from testing.local_service import tiny_model, write_config

LEVELS = (1, 2, 4, 8, 16, 8, 4, 2, 1)


class ReplicaLog:
    """Running rewriter replicas (and the clients then) once a second, in a thread of its own."""

    def __init__(self, service: ClusterService, clock: float):
        self.service, self.clock = service, clock
        self.clients = 0
        self.samples: list[tuple[float, int, int]] = []  # (seconds, clients, running replicas)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            running = len(self.service.running())
            self.samples.append((time.monotonic() - self.clock, self.clients, running))
            self._stop.wait(1.0)

    def start(self) -> ReplicaLog:
        """Start sampling."""
        self._thread.start()
        return self

    def stop(self) -> list[tuple[float, int, int]]:
        """Stop sampling; every sample."""
        self._stop.set()
        self._thread.join()
        return self.samples

    def between(self, start: float, end: float) -> list[int]:
        """The replica counts sampled from start to end."""
        return [n for t, _, n in self.samples if start <= t <= end] or [0]


def level_row(level: int, clients: int, answers: list, start: float, end: float, replicas) -> dict:
    """The figures of one load level: its requests, their latency and the replicas meanwhile."""
    took = [a.done - a.sent for a in answers if a.status == 200]
    counts = replicas.between(start, end)
    return {
        "level": level,
        "clients": clients,
        "seconds": round(end - start, 1),
        "requests": len(answers),
        "requests_per_s": round(len(took) / max(1e-9, end - start), 2),
        "p50_s": round(percentile(took, 50), 3),
        "p95_s": round(percentile(took, 95), 3),
        "not_200": sum(a.status != 200 for a in answers),
        "replicas_start": counts[0],
        "replicas_end": counts[-1],
        "replicas_max": max(counts),
    }


def plot(path: str, samples: list, rows: list[dict]) -> None:
    """Replicas and clients over time above, p50/p95 latency per level below, into a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.5))
    seconds = [t for t, _, _ in samples]
    top.step(seconds, [n for _, _, n in samples], where="post", label="running replicas")
    top.step(seconds, [c for _, c, _ in samples], where="post", label="clients", alpha=0.6)
    top.set_yscale("log", base=2)
    top.set_xlabel("seconds")
    top.set_ylabel("count")
    top.legend()
    top.set_title("Rewriter replicas under a ramp of concurrent clients")
    names = [f"{r['level']}:{r['clients']}" for r in rows]
    at = range(len(rows))
    bottom.plot(at, [r["p50_s"] for r in rows], marker="o", label="p50")
    bottom.plot(at, [r["p95_s"] for r in rows], marker="o", label="p95")
    bottom.set_xticks(list(at), names)
    bottom.set_xlabel("level:clients")
    bottom.set_ylabel("latency s")
    bottom.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's flags."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--hold", type=float, default=40, help="seconds per level (default 40)")
    parser.add_argument(
        "--settle",
        type=float,
        default=60,
        help="seconds at most the last level holds on until one replica is left (default 60)",
    )
    parser.add_argument("--max-replicas", type=int, default=4, help="default 4")
    parser.add_argument(
        "--target", type=float, default=2, help="target_ongoing_requests per replica (default 2)"
    )
    parser.add_argument("--upscale-delay", type=float, default=5, help="seconds (default 5)")
    parser.add_argument("--downscale-delay", type=float, default=15, help="seconds (default 15)")
    parser.add_argument("--plot", default="out/serve_autoscale.png", help="the PNG to write")
    parser.add_argument("--json", help="also write the levels and the replica samples here")
    return parser


def autoscaled_config(args, work: str) -> str:
    """The Serve config of a tiny random model whose rewriter scales on the short delays asked."""
    model = tiny_model(os.path.join(work, "model"))
    scaling = {"min_replicas": 1, "max_replicas": args.max_replicas}
    scaling["target_ongoing_requests"] = args.target
    app_config = write_config(work, max_step_tokens=12, autoscaling=scaling)
    rewriter = {
        "autoscaling_config": {
            **scaling,
            "upscale_delay_s": args.upscale_delay,
            "downscale_delay_s": args.downscale_delay,
            "look_back_period_s": 5,
            "metrics_interval_s": 1,
        }
    }
    return serve_config(work, model, app_config, rewriter)


def ramp(args, config: str) -> tuple[list[dict], list]:
    """Each load level held in turn on a fresh cluster: its rows, and the replicas sampled."""
    bodies = sample_requests(64, 2)
    rows = []
    # Two nodes of two CPUs: room for four one-CPU rewriter replicas, two a node.
    with LocalCluster(workers=2, cpus=2) as cluster:
        service = ClusterService(cluster, config).deploy(replicas=1)
        clock = time.monotonic()
        replicas = ReplicaLog(service, clock).start()
        try:
            for number, clients in enumerate(LEVELS, 1):
                replicas.clients = clients
                load = Load(service.url, bodies, clients, level=number, clock=clock).start()
                start = time.monotonic() - clock
                time.sleep(args.hold)
                # The last level holds on (up to --settle) until the replicas are back to one.
                deadline = time.monotonic() + (args.settle if number == len(LEVELS) else 0)
                while len(service.running()) > 1 and time.monotonic() < deadline:
                    time.sleep(1)
                done = load.stop()
                end = time.monotonic() - clock
                rows.append(level_row(number, clients, done, start, end, replicas))
                print(json.dumps(rows[-1]), flush=True)
        finally:
            samples = replicas.stop()
            service.shutdown()
    return rows, samples


def main(argv: list[str] | None = None) -> int:
    """Deploy, ramp the load up and down, print the levels and the table, write the plot."""
    args = build_parser().parse_args(argv)
    work = tempfile.mkdtemp(prefix="rrt-serve-autoscale-")
    rows, samples = ramp(args, autoscaled_config(args, work))
    shutil.rmtree(work, ignore_errors=True)  # the model and configs made for this run
    print(
        f"{'level':>5} {'clients':>7} {'requests':>8} {'req/s':>6} {'p50 s':>6} {'p95 s':>6} "
        f"{'not 200':>7} {'replicas start/end/max':>22}"
    )
    for r in rows:
        spread = f"{r['replicas_start']}/{r['replicas_end']}/{r['replicas_max']}"
        print(
            f"{r['level']:>5} {r['clients']:>7} {r['requests']:>8} {r['requests_per_s']:>6.2f} "
            f"{r['p50_s']:>6.2f} {r['p95_s']:>6.2f} {r['not_200']:>7} {spread:>22}"
        )
    plot(args.plot, samples, rows)
    print(f"plot: {args.plot}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"levels": rows, "replicas": samples}, handle, indent=2)
    peak = max(r["replicas_max"] for r in rows)
    after = rows[-1]["replicas_end"]
    grew, shrank = peak > rows[0]["replicas_max"], after < peak
    print(
        f"replicas: most under load {peak}, after the load {after}; grew {grew}, shrank {shrank}",
        flush=True,
    )
    return 0 if grew and shrank else 1


if __name__ == "__main__":
    sys.exit(main())

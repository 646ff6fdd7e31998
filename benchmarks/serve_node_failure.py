"""Serving while a node dies: two rewriter replicas on two worker nodes of a multi-node Ray on this
machine (testing/cluster.py), steady load from clients that retry each 503 after its Retry-After
(the README's advice), and the node of one replica killed at once, a replacement node joining
right after. Each round kills one node; the load runs through all of them.

    python benchmarks/serve_node_failure.py
    python benchmarks/serve_node_failure.py --rounds 3 --clients 8 --json out/serve_node_failure.json

Prints a JSON line per round: requests sent in it, the share answered (200, retries allowed), the
share answered at the first try, the 503s retried, the seconds from the kill until the new node
joined and until a new replica ran (Serve reports it RUNNING: constructed, warmed up, routed to),
the last 503 after the kill, the same shares and p50/p95 latency for the requests sent while the
service was a replica short, and p50/p95 latency before the kill and once the new replica ran. The last line
is the share of all requests answered, against the 0.99 target. The HTTP proxy and the Gateway run
on the head (testing.cluster_service says why); the service's config is serve/config.yaml's, with
the model, the port and a fixed two rewriter replicas.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.serve_throughput import percentile, sample_requests
from testing.cluster import LocalCluster
from testing.cluster_service import ClusterService, Load, serve_config
from testing.local_service import tiny_model, write_config

TWO_REPLICAS = {"min_replicas": 2, "max_replicas": 2, "target_ongoing_requests": 8}


def latency(answers: list) -> dict:
    """p50 and p95 seconds of the answered requests (retries included)."""
    took = [a.done - a.sent for a in answers if a.status == 200]
    return {"p50_s": round(percentile(took, 50), 3), "p95_s": round(percentile(took, 95), 3)}


def shares(answers: list) -> dict:
    """How many requests, the share answered (retries allowed) and the share at the first try."""
    answered = [a for a in answers if a.status == 200]
    return {
        "requests": len(answers),
        "share_answered": round(len(answered) / max(1, len(answers)), 4),
        "share_first_try": round(sum(a.attempts == 1 for a in answered) / max(1, len(answers)), 4),
    }


def round_row(number: int, answers: list, start: float, kill: dict, end: float) -> dict:
    """The figures of one round: the requests sent from `start` to `end` around one kill, and
    those sent while the service was a replica short (from the kill until a new replica ran)."""
    sent = [a for a in answers if start <= a.sent < end]
    short = [a for a in sent if kill["at"] <= a.sent < kill["at"] + kill["replica"]]
    retries = [a.last_503 for a in sent if a.last_503 is not None and a.last_503 >= kill["at"]]
    return {
        "round": number,
        **shares(sent),
        "answered": sum(a.status == 200 for a in sent),
        "retried_503": sum(a.retried for a in sent),
        "failed_statuses": sorted({a.status for a in sent if a.status != 200}),
        "node_joined_s": round(kill["joined"], 2),
        "new_replica_s": round(kill["replica"], 2),
        "last_503_after_kill_s": round(max(retries) - kill["at"], 2) if retries else None,
        "while_short": {**shares(short), **latency(short)},
        "before_kill": latency([a for a in sent if a.done < kill["at"]]),
        "after_new_replica": latency([a for a in sent if a.sent >= kill["at"] + kill["replica"]]),
    }


def kill_a_replica_node(cluster: LocalCluster, service: ClusterService, load: Load) -> dict:
    """Kill the node of one running rewriter replica, add a node; when (on the load's clock) and
    how long until the node joined and a new replica ran."""
    running = service.running()
    victim = cluster.index_of(min(running.values()))
    at = time.monotonic()
    cluster.kill(victim)
    cluster.add()
    joined = time.monotonic() - at
    service.wait(len(running), timeout=600, new_since=running)
    return {"at": at - load.clock, "joined": joined, "replica": time.monotonic() - at}


def main(argv: list[str] | None = None) -> int:
    """Deploy, load, kill a replica's node per round; print a line per round and the share answered."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="nodes killed, one a round (default 2)"
    )
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients (default 4)")
    parser.add_argument(
        "--steady", type=float, default=20, help="seconds of load before each kill (default 20)"
    )
    parser.add_argument(
        "--after",
        type=float,
        default=20,
        help="seconds of load after each new replica runs (default 20)",
    )
    parser.add_argument("--candidates", type=int, default=2, help="candidates per step (default 2)")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="rrt-serve-node-failure-")
    model = tiny_model(os.path.join(work, "model"))
    app_config = write_config(work, max_step_tokens=12, autoscaling=TWO_REPLICAS)
    config = serve_config(work, model, app_config, {"autoscaling_config": TWO_REPLICAS})
    rows = []
    # One CPU a worker node and one a replica: each node holds one replica, and the replacement
    # replica waits for the replacement node, as it would on a cluster with no room to spare.
    with LocalCluster(workers=2, cpus=1) as cluster:
        service = ClusterService(cluster, config).deploy(replicas=2)
        load = Load(service.url, sample_requests(64, args.candidates), args.clients).start()
        try:
            start = 0.0
            for number in range(1, args.rounds + 1):
                time.sleep(args.steady)
                kill = kill_a_replica_node(cluster, service, load)
                time.sleep(args.after)
                end = time.monotonic() - load.clock
                rows.append((number, start, kill, end))
                start = end
        finally:
            answers = load.stop()
            service.shutdown()
    shutil.rmtree(work, ignore_errors=True)  # the model and configs made for this run
    table = [round_row(number, answers, start, kill, end) for number, start, kill, end in rows]
    for row in table:
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(table, handle, indent=2)
    sent = sum(r["requests"] for r in table)
    answered = sum(r["answered"] for r in table)
    share = answered / max(1, sent)
    print(
        f"share of requests answered across {len(table)} replica node kill(s) = {share:.4f} "
        f"({answered}/{sent}; target >= 0.99)",
        flush=True,
    )
    return 0 if share >= 0.99 else 1


if __name__ == "__main__":
    sys.exit(main())

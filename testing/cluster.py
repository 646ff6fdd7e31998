"""A Ray cluster of several nodes on this machine, for the tests and benchmarks that kill a node
mid-job. Each node is a raylet of its own with its own CPUs, memory and a resource naming it;
jobs join through RAY_ADDRESS, exactly as they join a real cluster.

    with LocalCluster(workers=2) as cluster:
        job = subprocess.Popen([...], env=cluster.env())   # the job joins the cluster
        cluster.kill(0)                                   # worker node 0's raylet and workers die
        cluster.add()                                     # a replacement joins
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Self

HEALTH_CHECK = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 300,
    "health_check_timeout_ms": 1000,
    "health_check_failure_threshold": 3,
}


class LocalCluster:
    """A head (no CPUs, so work lands on the workers) and `workers` worker nodes on this machine."""

    def __init__(
        self,
        workers: int = 2,
        cpus: float = 1,
        memory: int = 2 * 1024**3,
        object_store_memory: int = 200 * 1024**2,
        head_cpus: float = 0,
    ):
        self.workers, self.cpus, self.memory, self.store = (
            workers,
            cpus,
            memory,
            object_store_memory,
        )
        self.head_cpus = head_cpus
        self.cluster, self.temp_dir = None, ""
        self.nodes: list = []
        self.added = 0

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> Self:
        """Start the head and the worker nodes; return once every node is alive."""
        from ray.cluster_utils import Cluster

        # A dead node is found in about a second, not Ray's default quarter of a minute: the node
        # failure tests wait on it, and a real cluster keeps its own defaults.
        # A temp dir of its own: in Ray's default one the head's address is written where a job on
        # this machine that names no cluster would find and join it.
        self.temp_dir = tempfile.mkdtemp(
            prefix="rrt-cl-"
        )  # short: Ray's socket paths must stay short
        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": self.head_cpus,
                "object_store_memory": self.store,
                "include_dashboard": False,
                "resources": {"head": 1},
                "_system_config": HEALTH_CHECK,
                "temp_dir": self.temp_dir,
            },
        )
        for _ in range(self.workers):
            self.add(wait=False)
        self.cluster.wait_for_nodes()
        return self

    @property
    def address(self) -> str:
        """The head's address, as RAY_ADDRESS takes it."""
        return self.cluster.address

    def env(self, **extra: str) -> dict:
        """The environment of a job that joins this cluster."""
        return {
            **os.environ,
            "RAY_ADDRESS": self.address,
            "RAY_DATA_DISABLE_PROGRESS_BARS": "1",
            "PYTHONUNBUFFERED": "1",
            **extra,
        }

    def add(self, wait: bool = True):
        """One more worker node (resource `node-N`, N counting every node ever added); the node."""
        node = self.cluster.add_node(
            wait=wait,
            num_cpus=self.cpus,
            memory=self.memory,
            object_store_memory=self.store,
            resources={f"node-{self.added}": 1},
        )
        self.added += 1
        self.nodes.append(node)
        return node

    def kill(self, index: int = 0) -> float:
        """Kill worker node `index` at once (its raylet, object store and workers), as a lost
        machine dies; the seconds it took."""
        started = time.perf_counter()
        node = self.nodes.pop(index)
        self.cluster.remove_node(node, allow_graceful=False)
        return time.perf_counter() - started

    def index_of(self, node_id: str) -> int:
        """The index (for kill) of the live worker node with this Ray node id."""
        return [node.node_id for node in self.nodes].index(node_id)

    def alive(self) -> int:
        """How many worker nodes are alive."""
        return len(self.nodes)

    def stop(self) -> None:
        """Stop every node of this cluster (and nothing else on the machine)."""
        import ray

        if self.cluster is not None:
            # A driver of this process connected to the head would be cut off (Ray refuses).
            if ray.is_initialized() and ray.get_runtime_context().gcs_address == self.address:
                ray.shutdown()
            self.cluster.shutdown()
            self.cluster = None
            self.nodes = []
            shutil.rmtree(self.temp_dir, ignore_errors=True)

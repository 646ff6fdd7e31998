"""The rewriter service on a LocalCluster, deployed as on a real cluster (`serve run CONFIG` against
its address, the config made from serve/config.yaml), and clients that retry as the README says:
a 503 is sent again after its Retry-After.

    with LocalCluster(workers=2) as cluster:
        service = ClusterService(cluster, serve_config(folder, model, app_config)).deploy(replicas=2)
        load = Load(service.url, bodies, clients=4).start(); ...; load.stop()

Two departures from serve/config.yaml, both because every node is on this machine: one HTTP proxy,
on the head (proxies of several nodes would share one address), and the Gateway placed on the head
too (`resources: {head}`), so that killing a worker node takes rewriter replicas only, as on a
cluster whose ingress sits on a node that stays.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from testing.cluster import LocalCluster
from testing.local_service import ROOT, free_port

APP = "rrt"


def serve_config(
    folder: str, model: str, app_config: str, rewriter: dict | None = None, port: int = 0
) -> str:
    """serve/config.yaml for a LocalCluster, written into folder: the proxy and the Gateway on the
    head, `model` and `app_config` (a ray_config.yaml) as the app's args, `rewriter` merged into the
    Rewriter deployment's options. Its path."""
    config = yaml.safe_load((ROOT / "serve" / "config.yaml").read_text(encoding="utf-8"))
    config["proxy_location"] = "HeadOnly"
    config["http_options"]["port"] = port or free_port()
    app = config["applications"][0]
    # No working_dir to upload: every node of this machine imports the installed project.
    app["runtime_env"].pop("working_dir", None)
    app["args"] = {"model": os.path.abspath(model), "config": os.path.abspath(app_config)}
    for deployment in app["deployments"]:
        if deployment["name"] == "Gateway":
            deployment["ray_actor_options"] = {"num_cpus": 0, "resources": {"head": 0.01}}
        elif deployment["name"] == "Rewriter":
            deployment.update(rewriter or {})
    path = Path(folder) / "serve_deploy.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return str(path)


class ClusterService:
    """The app of a Serve config on a LocalCluster; this process joins the cluster to read Serve's status."""

    def __init__(self, cluster: LocalCluster, config: str):
        self.cluster, self.config = cluster, config
        port = yaml.safe_load(Path(config).read_text(encoding="utf-8"))["http_options"]["port"]
        self.url = f"http://127.0.0.1:{port}"

    def deploy(self, replicas: int = 1, timeout: float = 300) -> ClusterService:
        """`serve run CONFIG --non-blocking` against the cluster; return once `replicas` rewriter
        replicas run and /healthz answers."""
        import ray

        serve_cli = os.path.join(os.path.dirname(sys.executable), "serve")
        done = subprocess.run(
            [serve_cli, "run", self.config, "--non-blocking", "--address", self.cluster.address],
            cwd=ROOT,
            env=self.cluster.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"serve run failed:\n{(done.stdout + done.stderr)[-3000:]}")
        # A Ray this process joined earlier (another test's) is not the one to read Serve from.
        if ray.is_initialized() and ray.get_runtime_context().gcs_address != self.cluster.address:
            ray.shutdown()
        if not ray.is_initialized():
            ray.init(address=self.cluster.address, log_to_driver=False, logging_level="WARNING")
        self.wait(replicas, timeout)
        return self

    def replicas(self) -> list[dict]:
        """The rewriter deployment's replicas as Serve's details list them: replica_id, state
        (RUNNING, STARTING...), node_id and more; [] before the app exists."""
        from ray.serve.context import _get_global_client

        details = _get_global_client().get_serve_details()
        app = details.get("applications", {}).get(APP) or {}
        replicas = (app.get("deployments", {}).get("Rewriter") or {}).get("replicas", [])
        return [{**r, "state": str(getattr(r["state"], "value", r["state"]))} for r in replicas]

    def running(self) -> dict[str, str]:
        """Replica id -> node id of each rewriter replica Serve reports running (constructed,
        warmed up, routed to)."""
        return {r["replica_id"]: r["node_id"] for r in self.replicas() if r["state"] == "RUNNING"}

    def wait(self, replicas: int, timeout: float = 300, new_since: dict | None = None) -> float:
        """Wait until `replicas` rewriter replicas run (one of them absent from `new_since`, when
        given) and /healthz answers; the seconds waited."""
        import requests
        from ray import serve

        started = time.monotonic()
        while time.monotonic() - started < timeout:
            app = serve.status().applications.get(APP)
            if app is not None and str(getattr(app.status, "value", app.status)) == "DEPLOY_FAILED":
                raise RuntimeError(f"the app failed to deploy: {app.message}")
            running = self.running()
            fresh = not new_since or set(running) - set(new_since)
            if len(running) >= replicas and fresh:
                try:
                    if requests.get(self.url + "/healthz", timeout=5).status_code == 200:
                        return time.monotonic() - started
                except requests.RequestException:
                    pass
            time.sleep(0.2)
        raise TimeoutError(
            f"{replicas} rewriter replicas not running after {timeout:.0f}s: {self.replicas()}"
        )

    def shutdown(self) -> None:
        """Delete the app and Serve from the cluster and leave it (the cluster itself stays)."""
        import ray
        from ray import serve

        if ray.is_initialized():
            serve.shutdown()
            ray.shutdown()


@dataclass
class Answer:
    """One request as the client saw it: sent at, answered at, its last 503 at (seconds on the
    load's clock; None without one), the final status (0: no HTTP answer), attempts and 503s."""

    sent: float
    done: float
    status: int
    attempts: int
    retried: int
    last_503: float | None = None
    level: int = 0


def ask(session, url: str, body: dict, give_up_s: float = 180) -> tuple[int, int, float | None]:
    """Send one rewrite until it is answered, retrying each 503 after its Retry-After (the README's
    advice); any other status, or a 503 that does not say when to retry, ends it. (status, attempts,
    time.monotonic() of its last 503)."""
    import requests

    deadline, attempts, last_503 = time.monotonic() + give_up_s, 0, None
    while True:
        attempts += 1
        try:
            reply = session.post(url + "/v1/rewrite", json=body, timeout=120)
            status = reply.status_code
        except requests.RequestException:
            return 0, attempts, last_503
        retry_after = reply.headers.get("Retry-After", "")
        if status != 503 or not retry_after.isdigit() or time.monotonic() > deadline:
            return status, attempts, last_503
        last_503 = time.monotonic()
        time.sleep(float(retry_after))


class Load:
    """`clients` threads, each sending the bodies in turn (one at a time) until stopped."""

    def __init__(self, url: str, bodies: list[dict], clients: int, level: int = 0, clock=None):
        self.url, self.bodies, self.clients, self.level = url, bodies, clients, level
        self.clock = clock if clock is not None else time.monotonic()
        self.answers: list[Answer] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def _client(self, index: int) -> None:
        import requests

        session, turn = requests.Session(), index
        while not self._stop.is_set():
            body = self.bodies[turn % len(self.bodies)]
            turn += self.clients
            sent = time.monotonic() - self.clock
            status, attempts, last_503 = ask(session, self.url, body)
            done, at_503 = time.monotonic() - self.clock, last_503 and last_503 - self.clock
            self.answers.append(
                Answer(sent, done, status, attempts, attempts - 1, at_503, self.level)
            )

    def start(self) -> Load:
        """Start the clients."""
        for index in range(self.clients):
            thread = threading.Thread(target=self._client, args=(index,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> list[Answer]:
        """Let each client finish the request it is on (retries included), then stop; every answer."""
        self._stop.set()
        for thread in self._threads:
            thread.join()
        return self.answers

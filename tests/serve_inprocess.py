"""The service's FastAPI app in this process, without Ray: a `Gateway` built as a replica would
build it, in front of a rewriter called directly instead of through a Serve handle."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from rrt.config import ServeSettings, load_settings


class DirectHandle:
    """A Serve handle's `.method.remote(...)` on an object of this process: a cancellable task."""

    def __init__(self, target):
        self.target = target

    def __getattr__(self, name: str):
        method = getattr(self.target, name)
        return SimpleNamespace(
            remote=lambda *args, **kwargs: asyncio.ensure_future(method(*args, **kwargs))
        )


def settings(bind: tuple[str, int] = ("127.0.0.1", 8000), **serve) -> ServeSettings:
    """The checked `serve` settings with these changes, host and port as the proxy's bind."""
    changes = {**serve, "host": bind[0], "port": bind[1]}
    return load_settings(None, None, {"serve": changes}).serve


def gateway(rewriter, serve_settings: ServeSettings, key_from: dict | None = None):
    """A Gateway as its replica starts it: its own constructor, without Serve's ASGI wrapper."""
    from serve.app import Gateway

    plain = Gateway.__bases__[0]  # the class before @serve.ingress wrapped it (no replica to wrap)
    return plain(DirectHandle(rewriter), serve_settings, key_from)


def client(monkeypatch, made, address: str = "127.0.0.1", host: str = "127.0.0.1:8000"):
    """A TestClient on the service's app whose routes reach `made`, calling from `address`."""
    from fastapi.testclient import TestClient
    from ray import serve as ray_serve

    from serve import app

    # The routes find their Gateway through the replica's context, as under Serve.
    monkeypatch.setattr(
        ray_serve, "get_replica_context", lambda: SimpleNamespace(servable_object=made)
    )
    return TestClient(app.api, base_url=f"http://{host}", client=(address, 50000))

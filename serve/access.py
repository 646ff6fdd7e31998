"""Who may use the service: where its HTTP proxy really listens, where the API key comes from,
and the checks made once where the app is built and again where a replica starts.

Nothing here trusts a request's Host header: whether a key is needed follows the proxy's bind
address (Serve's `http_options.host`), and a keyless service also checks each request's client
address (`Gateway`).
"""

from __future__ import annotations

import ipaddress
import os
import stat

import ray
from ray.serve.config import HTTPOptions
from ray.serve.context import _get_global_client
from ray.serve.exceptions import RayServeException

KEY_ENV = "RRT_API_KEY"
KEY_FILE_ENV = "RRT_API_KEY_FILE"


class ServeConfigError(RayServeException, ValueError):
    """A service that must not start as configured."""

    # A RayServeException raised while Serve builds the app reaches `serve status` as its message
    # alone: one line, no traceback.


def is_loopback(host: str | None) -> bool:
    """Whether an address (to listen on, or a client's) is this machine only."""
    if not host:
        return False
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return host == "localhost"
    # ::ffff:127.0.0.1 is how a dual-stack socket shows an IPv4 loopback client.
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def proxy_bind() -> tuple[str, int] | None:
    """Where the running Serve's HTTP proxies listen (its `http_options`); None when this process
    sees no Serve (`serve run <import path>` builds the app before it starts one)."""
    if not ray.is_initialized():
        return None
    client = _get_global_client(raise_if_no_controller_running=False)
    if client is None:
        return None
    options = client.http_config
    return str(options.host), int(options.port)


def bind_address(args: dict) -> tuple[str, int]:
    """The HTTP proxy's real address; an app argument `host` or `port` naming another is refused."""
    bound = proxy_bind()
    if bound is None:  # the Serve that `serve run` is about to start listens on its default
        default = HTTPOptions()
        bound = (str(default.host), int(default.port))
    for name, actual in zip(("host", "port"), bound):
        given = args.get(name)
        if (
            given not in (None, "")
            and str(given).strip("[]").lower() != str(actual).strip("[]").lower()
        ):
            raise ServeConfigError(
                f"the app's args.{name} is {given} but the HTTP proxy listens on {actual} (http_options.{name}): "
                f"who may use the service follows where the proxy listens, so drop args.{name} or make the two agree"
            )
    return bound


def _runtime_env_vars() -> dict:
    if not ray.is_initialized():
        return {}
    return dict((ray.get_runtime_context().runtime_env or {}).get("env_vars") or {})


def read_key_file(path: str) -> str:
    """The key in a file only its owner may read or write, as ssh insists for its keys."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as err:
        raise ServeConfigError(f"cannot read the API key file {path}: {err.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(fd).st_mode  # the file just opened, not whatever the path names later
        if not stat.S_ISREG(mode):
            raise ServeConfigError(f"the API key file {path} is not a regular file")
        if mode & 0o077:
            raise ServeConfigError(
                f"permissions {stat.S_IMODE(mode):04o} for the API key file {path} are too "
                f"open: only its owner may read it (chmod 600 {path}; a Kubernetes secret volume: "
                f"defaultMode 0400)"
            )
        key = handle.read(4096).decode("utf-8", "replace").strip()
    if not key or not all(33 <= ord(c) < 127 for c in key):
        raise ServeConfigError(
            f"the API key file {path} must hold one key of printable ASCII, without spaces"
        )
    return key


def key_source(args: dict) -> dict | None:
    """Where replicas will read the API key ({"file": path} or {"env": RRT_API_KEY}), checked where
    the app is built; None when no key is configured. The key itself never enters the app."""
    if KEY_ENV in _runtime_env_vars():
        raise ServeConfigError(
            f"{KEY_ENV} is in the app's runtime_env.env_vars, which `serve config` and the "
            f"dashboard show: put the key in a file only its owner can read and name it with "
            f"the app argument api_key_file or {KEY_FILE_ENV}"
        )
    path = args.get("api_key_file") or os.environ.get(KEY_FILE_ENV)
    if path:
        read_key_file(path)
        return {"file": os.path.abspath(path)}
    # The deploying process's own environment (the shell of `rrt serve`, whose local Ray's
    # workers inherit it); a replica that lacks it refuses to start rather than serve open.
    return {"env": KEY_ENV} if os.environ.get(KEY_ENV) else None


def load_key(source: dict | None) -> str | None:
    """The key a replica checks requests against, read from its source when the replica starts."""
    if source is None:
        return None
    if "file" in source:
        return read_key_file(source["file"])
    key = os.environ.get(source["env"])
    if not key:
        raise ServeConfigError(
            f"{source['env']} was set where the app was built but not in this replica's "
            f"environment: use a key file ({KEY_FILE_ENV}) present on every node"
        )
    return key


def check_exposure(host: str, key: object, allow_no_key: bool) -> None:
    """Refuse an open service beyond loopback: anyone who can reach it could spend the model."""
    if not key and not is_loopback(host) and not allow_no_key:
        raise ServeConfigError(
            f"refusing to listen on {host} without an API key: name a file holding it, "
            f"readable only by its owner, with {KEY_FILE_ENV} (or the app argument "
            f"api_key_file), or set {KEY_ENV} in the shell of `rrt serve`; or set "
            "serve.allow_no_key: true to serve it open on purpose"
        )

"""Who may use the service, without starting Ray: whether a key is needed follows where the HTTP
proxy really listens (never an app argument or a Host header), and the API key comes from a file
only its owner can read, never from anything Ray stores or shows."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from serve_inprocess import client, gateway, settings

ROOT = Path(__file__).resolve().parent.parent
KEY = "rrt-" + "5be0c3a1" * 4


@pytest.fixture(autouse=True)
def no_key_in_env(monkeypatch):
    for name in ("RRT_API_KEY", "RRT_API_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def model(tmp_path) -> str:
    """A folder build_app takes for an exported model (nothing loads it here)."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return str(folder)


def key_file(folder: Path, mode: int = 0o600) -> str:
    path = folder / "api_key"
    path.write_text(KEY + "\n")
    path.chmod(mode)
    return str(path)


def proxy_listens_on(monkeypatch, host: str, port: int = 8000) -> None:
    """The running Serve's http_options, as the build task on a cluster reads them."""
    monkeypatch.setattr("serve.access.proxy_bind", lambda: (host, port))


def test_the_key_decision_follows_the_proxys_bind_not_the_apps_host_argument(monkeypatch, model):
    from ray.serve.exceptions import RayServeException

    from serve.app import ServeConfigError, build_app

    # Proxy on every interface, the app told nothing (or loopback): no key, no start.
    proxy_listens_on(monkeypatch, "0.0.0.0")
    with pytest.raises(ServeConfigError, match="refusing to listen on 0.0.0.0 without an API key"):
        build_app({"model": model})
    # The two disagree: refused in one line that Serve shows as it is (a RayServeException's
    # message reaches `serve status` without a traceback).
    with pytest.raises(ServeConfigError) as refused:
        build_app({"model": model, "host": "127.0.0.1"})
    assert isinstance(refused.value, RayServeException)
    message = str(refused.value)
    assert "http_options.host" in message and "0.0.0.0" in message and "\n" not in message
    with pytest.raises(ServeConfigError, match="http_options.port"):
        build_app({"model": model, "port": "9000"})
    # A loopback proxy may serve without a key; a matching argument is fine.
    proxy_listens_on(monkeypatch, "127.0.0.1")
    assert build_app({"model": model, "host": "127.0.0.1", "port": "8000"}) is not None
    # serve/config.yaml names the address once, where the proxy binds.
    deploy = yaml.safe_load((ROOT / "serve" / "config.yaml").read_text())
    assert deploy["http_options"]["host"]
    assert not {"host", "port"} & set(deploy["applications"][0]["args"])


def test_a_forged_host_header_does_not_make_a_remote_client_local(monkeypatch):
    # A keyless service (its proxy on loopback) reached from elsewhere all the same: the Host
    # header is the attacker's to write, the client address is not.
    keyless = gateway(None, settings(("127.0.0.1", 8000)))
    remote = client(monkeypatch, keyless, address="10.1.2.3", host="127.0.0.1:8000")
    assert remote.get("/v1/constraints").status_code == 403
    reply = remote.post(
        "/v1/rewrite", json={"recipe": {"title": "T", "steps": ["Mix."]}, "constraint": "vegan"}
    )
    assert reply.status_code == 403 and "own machine" in reply.json()["error"]
    for address in ("127.0.0.1", "::1", "::ffff:127.0.0.1"):
        local = client(monkeypatch, keyless, address=address, host="127.0.0.1:8000")
        assert local.get("/v1/constraints").status_code == 200, address
    # The Host check stays what it was, a refusal only (DNS rebinding).
    rebound = client(monkeypatch, keyless, address="127.0.0.1", host="rebind.example:8000")
    assert rebound.get("/v1/constraints").status_code == 403


def test_the_built_app_holds_no_key_material(monkeypatch, model, tmp_path):
    import cloudpickle

    from serve.app import build_app

    proxy_listens_on(monkeypatch, "0.0.0.0")
    path = key_file(tmp_path)
    by_file = build_app({"model": model, "api_key_file": path})
    monkeypatch.setenv("RRT_API_KEY", KEY)  # the fallback of `rrt serve`: the deploying shell's env
    by_env = build_app({"model": model})
    for app, source in ((by_file, {"file": path}), (by_env, {"env": "RRT_API_KEY"})):
        # Everything Serve is handed (and stores, and shows): where the key is, never the key.
        assert KEY.encode() not in cloudpickle.dumps(app)
        assert app._bound_deployment.init_args[-1] == source
    deploy = (ROOT / "serve" / "config.yaml").read_text()
    env_vars = yaml.safe_load(deploy)["applications"][0]["runtime_env"].get("env_vars", {})
    assert "RRT_API_KEY" not in env_vars


def test_a_wrong_or_missing_key_is_refused_and_the_right_one_passes(monkeypatch, tmp_path):
    from serve.access import key_source

    guarded = gateway(
        None, settings(("0.0.0.0", 8000)), key_source({"api_key_file": key_file(tmp_path)})
    )
    anyone = client(monkeypatch, guarded, address="203.0.113.9", host="rrt.example:8000")
    for headers in (
        {},
        {"Authorization": "Bearer nope"},
        {"Authorization": KEY},
        {"Authorization": f"Bearer {KEY}x"},
    ):
        for method, route in (("GET", "/v1/constraints"), ("POST", "/v1/rewrite")):
            reply = anyone.request(method, route, headers=headers, json={})
            assert reply.status_code == 401 and reply.headers["WWW-Authenticate"] == "Bearer", (
                headers,
                route,
            )
    right = anyone.get("/v1/constraints", headers={"Authorization": f"Bearer {KEY}"})
    assert right.status_code == 200 and "vegan" in right.json()["constraints"]


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620])
def test_a_key_file_others_may_read_or_write_is_refused(monkeypatch, model, tmp_path, mode):
    from serve.access import load_key
    from serve.app import ServeConfigError, build_app

    proxy_listens_on(monkeypatch, "0.0.0.0")
    path = key_file(tmp_path, mode)
    expected = f"permissions {mode:04o} for the API key file {path} are too open"
    with pytest.raises(ServeConfigError, match="too open") as refused:
        build_app({"model": model, "api_key_file": path})
    assert str(refused.value).startswith(expected) and f"chmod 600 {path}" in str(refused.value)
    monkeypatch.setenv("RRT_API_KEY_FILE", path)
    with pytest.raises(ServeConfigError, match="too open"):
        build_app({"model": model})
    # Made readable after the deploy: the replica refuses it at its start.
    with pytest.raises(ServeConfigError, match="too open"):
        load_key({"file": path})


def test_keys_ray_would_show_or_replicas_lack_are_refused(monkeypatch, model, tmp_path):
    from serve.access import load_key
    from serve.app import ServeConfigError, build_app

    proxy_listens_on(monkeypatch, "0.0.0.0")
    # `serve config` and the dashboard show an application's runtime_env.
    monkeypatch.setattr("serve.access._runtime_env_vars", lambda: {"RRT_API_KEY": KEY})
    with pytest.raises(ServeConfigError, match="runtime_env.env_vars"):
        build_app({"model": model, "api_key_file": key_file(tmp_path)})
    with pytest.raises(ServeConfigError, match="not in this replica's environment"):
        load_key({"env": "RRT_API_KEY"})
    empty = tmp_path / "empty"
    empty.write_text("\n")
    os.chmod(empty, 0o600)
    with pytest.raises(ServeConfigError, match="one key"):
        load_key({"file": str(empty)})
    with pytest.raises(ServeConfigError, match="cannot read"):
        load_key({"file": str(tmp_path / "missing")})

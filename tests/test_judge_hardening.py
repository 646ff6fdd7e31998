"""The judging site against a careless or hostile client: bodies without a length, slow headers,
guessable task ids, leaked connections, readable tokens, out-of-order saves and names from input.
Each test fails on the site as it was before these bounds."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
import yaml
from conftest import ROOT, SAMPLE
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.main import main as rrt
from judge.app import build_app
from judge.store import MIGRATIONS, POOL_SIZE, Study, StudyBusy, is_handle, token_hash
from judge.study import create_study, export_study, extend_study, file_label
from rrt.config import JudgeSettings, load_settings
from rrt.evaluation.human import QUESTIONS
from runtime.runs import JobError, check_replaceable
from testing.local_service import free_port
from testing.rewrite_runs import write_runs

JUDGE = load_settings().judge


def small(**over) -> JudgeSettings:
    """The judge settings for a small study."""
    return JUDGE.model_copy(update={"recipes": 6, "judges": 5, "human_rewrites": 2, **over})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The guide, a cut of it and the source, as rewrite runs of the bundled sample."""
    return write_runs(str(SAMPLE), str(tmp_path_factory.mktemp("runs")))


@pytest.fixture()
def study(tmp_path, runs):
    """A fresh small study and the tokens printed when it was made."""
    folder = str(tmp_path / "study")
    out = create_study(folder, [runs["guide"], runs["copy"]], small())
    return Study(folder), out


ANSWERS = {
    "rate": [(q, 4) for q in QUESTIONS],
    "compare": [("choice", "left")],
    "rewrite": [
        ("rewrite", {"title": "T", "ingredients": ["1 cup rice"], "steps": ["Cook the rice."]})
    ],
}


def first_of_kind(study: Study, kind: str) -> tuple[int, dict]:
    """A judge with a task of `kind`, and that task, opened: the tasks before it are answered and finished."""
    with study.connection() as conn:
        judge = conn.execute(
            "SELECT a.judge FROM assignments a JOIN tasks t ON t.id = a.task WHERE t.kind = ? "
            "AND a.finished_at IS NULL ORDER BY a.judge LIMIT 1",
            (kind,),
        ).fetchone()[0]
    while (task := study.next_task(judge))["kind"] != kind:
        for question, value in ANSWERS[task["kind"]]:
            study.answer(judge, task["id"], question, value, JUDGE.max_chars)
        study.finish(judge, task["id"])
    return judge, task


# --- blindness, tokens, connections ----------------------------------------------------------------


def test_judges_see_opaque_handles_whose_order_names_no_system(study):
    study, _ = study
    seen = [
        (task["id"], task["kind"])
        for person in study.judges()
        if (task := study.next_task(person["id"])) is not None
    ]
    assert seen and all(isinstance(h, str) and is_handle(h) for h, _ in seen)
    with study.connection() as conn:
        rows = conn.execute(
            "SELECT id, handle, system FROM tasks WHERE kind = 'rate' ORDER BY id"
        ).fetchall()
    by_handle = [r["system"] for r in sorted(rows, key=lambda r: r["handle"])]
    assert by_handle != [r["system"] for r in rows]  # row order follows the plan, system by system
    assert len({r["handle"] for r in rows}) == len(rows)


def test_tokens_are_kept_as_hashes_in_a_private_file_and_can_be_rotated_or_revoked(study):
    study, out = study
    path = study.path
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    tokens = list(out["tokens"].values()) + [out["admin_token"]]
    study.close()
    raw = b"".join(Path(p).read_bytes() for p in (path, path + "-wal") if os.path.exists(p))
    assert not [t for t in tokens if t.encode() in raw]
    assert out["admin_token"] not in (Path(path).parent / "create.json").read_text()
    name, token = next(iter(out["tokens"].items()))
    assert study.judge_of(token)["name"] == name and study.is_admin(out["admin_token"])
    fresh = study.rotate(name)
    assert study.judge_of(token) is None and study.judge_of(fresh)["name"] == name
    study.revoke(name)
    assert study.judge_of(fresh) is None
    admin = study.rotate_admin()
    assert study.is_admin(admin) and not study.is_admin(out["admin_token"])


def test_a_study_from_before_hashing_is_migrated_and_its_links_still_work(tmp_path):
    folder = tmp_path / "old"
    folder.mkdir()
    conn = sqlite3.connect(folder / "study.sqlite", isolation_level=None)
    conn.executescript(
        MIGRATIONS[0] + "; CREATE TABLE schema_version (version INTEGER NOT NULL);"
        "INSERT INTO schema_version VALUES (1);"
        "INSERT INTO judges (name, token, added_at) VALUES ('judge-01', 'old-token', 0);"
        "INSERT INTO meta VALUES ('admin_token', '\"old-admin\"');"
    )
    conn.close()
    os.chmod(folder / "study.sqlite", 0o644)
    study = Study(str(folder))
    assert study.judge_of("old-token")["name"] == "judge-01" and study.is_admin("old-admin")
    assert stat.S_IMODE(os.stat(study.path).st_mode) == 0o600
    study.close()
    assert b"old-token" not in (folder / "study.sqlite").read_bytes()
    assert token_hash("old-token").encode() in (folder / "study.sqlite").read_bytes()


def test_threads_that_come_and_go_share_a_bounded_pool_of_connections(study):
    study, out = study
    token = next(iter(out["tokens"].values()))
    fds = len(os.listdir("/proc/self/fd"))
    for _ in range(10):
        threads = [threading.Thread(target=study.judge_of, args=(token,)) for _ in range(30)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert study.open_connections() <= POOL_SIZE
    assert (
        len(os.listdir("/proc/self/fd")) - fds <= 3 * POOL_SIZE
    )  # a database, its log and its index each


# --- answers in the intended order ------------------------------------------------------------------


def test_only_an_opened_task_takes_answers_and_the_latest_save_made_wins(study):
    study, _ = study
    judge, task = first_of_kind(study, "rate")
    with study.connection() as conn:
        later = conn.execute(
            "SELECT t.handle FROM assignments a JOIN tasks t ON t.id = a.task WHERE a.judge = ? "
            "AND a.started_at IS NULL LIMIT 1",
            (judge,),
        ).fetchone()[0]
    for call in (
        lambda: study.answer(judge, later, "overall", 3, 20000),
        lambda: study.finish(judge, later),
    ):
        with pytest.raises(Exception, match="not been opened") as refused:
            call()
        assert refused.value.status == 409
    # Autosaves arriving out of order: the one made last is kept, whenever it arrives.
    assert study.answer(judge, task["id"], "overall", 5, 20000, seq=20)[2]
    assert not study.answer(judge, task["id"], "overall", 2, 20000, seq=10)[2]
    assert study.next_task(judge)["answers"]["overall"] == 5
    # Nothing was answered on the unopened task, so a rebalance can move it with nothing attached.
    with study.connection() as conn:
        assert not conn.execute(
            "SELECT COUNT(*) FROM answers n JOIN assignments a ON a.id = n.assignment "
            "WHERE a.started_at IS NULL"
        ).fetchone()[0]


def test_hand_rewrites_are_cleaned_like_input_and_an_empty_one_cannot_be_finished(study, tmp_path):
    study, _ = study
    judge, task = first_of_kind(study, "rewrite")
    empty = {"title": " ", "ingredients": ["<endofings>"], "steps": []}
    study.answer(judge, task["id"], "rewrite", empty, 20000)
    with pytest.raises(Exception, match="needs a title, ingredient lines and steps") as refused:
        study.finish(judge, task["id"])
    assert refused.value.status == 422
    pasted = {
        "title": "Vegan <b>Tacos</b>",
        "ingredients": ["1 cup rice <endofings>", "<endofings>"],
        "steps": ["Cook the rice. <endoftext>", "  "],
    }
    stored, _, _ = study.answer(judge, task["id"], "rewrite", pasted, 20000)
    assert stored == {
        "title": "Vegan Tacos",
        "ingredients": ["1 cup rice"],
        "steps": ["Cook the rice."],
    }
    study.finish(judge, task["id"])
    export_study(study, str(tmp_path / "export"))
    human = (tmp_path / "export" / "human" / "rewrites.jsonl").read_text()
    assert "<endof" not in human and "Cook the rice." in human


# --- names from input, and run folders of other jobs ------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=0, max_size=40))
def test_a_system_name_from_input_never_leaves_the_study_folder(label):
    name = f"extend-{file_label(label)}.json"
    assert os.path.basename(name) == name and not name.startswith("extend-.") and len(name) < 100


def test_extend_writes_its_summary_inside_the_study_whatever_the_system_is_called(
    study, runs, tmp_path
):
    study, _ = study
    evil = tmp_path / "evil"
    evil.mkdir()
    rows = (Path(runs["guide"]) / "rewrites.jsonl").read_text().splitlines()
    (evil / "rewrites.jsonl").write_text(
        "".join(
            json.dumps({**json.loads(row), "system": "../../escaped name"}) + "\n" for row in rows
        )
    )
    extend_study(study.folder, str(evil))
    assert not list(tmp_path.glob("**/escaped*")) or all(
        p.parent == tmp_path / "study" for p in tmp_path.glob("**/escaped*")
    )
    assert (tmp_path / "study" / "extend-escaped_name.json").exists()


def test_a_rewrite_jobs_overwrite_does_not_take_the_judge_export_for_its_run(study, tmp_path):
    study, _ = study
    export_study(study, str(tmp_path / "export"))
    with pytest.raises(JobError, match="holds a judge_export run"):
        check_replaceable(str(tmp_path / "export" / "human"), "rewrite")


# --- the web app ------------------------------------------------------------------------------------


def test_a_locked_study_is_a_503_with_retry_after_never_a_500(study):
    study, out = study
    judge, task = first_of_kind(study, "rate")
    client = TestClient(build_app(study.folder, JUDGE.max_chars, JUDGE.body_timeout_s, busy_s=0.2))
    token = next(t for n, t in out["tokens"].items() if study.judge_of(t)["id"] == judge)
    blocker = sqlite3.connect(study.path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        reply = client.put(
            f"/api/tasks/{task['id']}/answers/overall",
            json={"value": 3},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert reply.status_code == 503 and reply.headers["retry-after"] and reply.json()["error"]
        with pytest.raises(StudyBusy):
            Study(study.folder, busy_s=0.1).answer(judge, task["id"], "overall", 3, JUDGE.max_chars)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert (
        client.put(
            f"/api/tasks/{task['id']}/answers/overall",
            json={"value": 3},
            headers={"Authorization": f"Bearer {token}"},
        ).status_code
        == 200
    )


class Served:
    """`rrt judge serve` in a child process with a config of short deadlines."""

    def __init__(self, folder: str, config: str, port: int, *extra: str):
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cli",
                "judge",
                "serve",
                "--study",
                folder,
                "--config",
                config,
                "--port",
                str(port),
                *extra,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.first_line = self.process.stdout.readline()

    def wait_until_up(self, port: int, **get) -> None:
        """Return once /healthz answers."""
        scheme = "https" if "verify" in get else "http"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.process.poll() is None:
            with contextlib.suppress(requests.ConnectionError):
                if requests.get(f"{scheme}://127.0.0.1:{port}/healthz", timeout=2, **get).ok:
                    return
            time.sleep(0.1)
        rest = self.process.stdout.read() if self.process.poll() is not None else ""
        raise AssertionError(f"the site did not start: {self.first_line}{rest}")

    def stop(self) -> None:
        """End the process."""
        self.process.terminate()
        self.process.wait(timeout=10)


@pytest.fixture()
def quick_config(tmp_path):
    """ray_config.yaml with one-second header and body deadlines."""
    config = yaml.safe_load((ROOT / "ray_config.yaml").read_text())
    config["judge"].update(header_timeout_s=1, body_timeout_s=1)
    path = tmp_path / "quick.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def closed_within(sock: socket.socket, seconds: float, trickle: bytes) -> bool:
    """Send `trickle` a byte at a time until the server closes the connection; True if it did in time."""
    deadline = time.monotonic() + seconds
    sock.settimeout(0.2)
    for byte in trickle * 1000:
        if time.monotonic() > deadline:
            return False
        try:
            sock.sendall(bytes([byte]))
            if sock.recv(1024) == b"":
                return True
        except TimeoutError:
            continue
        except OSError:
            return True
    return False


def test_slow_headers_and_endless_chunked_bodies_are_cut_off(study, quick_config):
    study, out = study
    judge, task = first_of_kind(study, "rate")
    token = next(t for t in out["tokens"].values() if study.judge_of(t)["id"] == judge)
    port = free_port()
    served = Served(study.folder, quick_config, port)
    try:
        assert "#t=" not in served.first_line  # serving prints no token
        served.wait_until_up(port)
        with socket.create_connection(
            ("127.0.0.1", port)
        ) as sock:  # headers one byte at a time, no token
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            assert closed_within(sock, 6, b"X-Slow: yes\r\n")
        # A chunked answer with no Content-Length: refused once past the cap, not read to its end.
        sent = 0
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(
                f"PUT /api/tasks/{task['id']}/answers/overall HTTP/1.1\r\nHost: x\r\n"
                f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
                "Transfer-Encoding: chunked\r\n\r\n".encode()
            )
            sock.settimeout(0.05)
            reply = b""
            chunk = b"10000\r\n" + b" " * 0x10000 + b"\r\n"
            while sent < 64 * 2**20 and not reply:
                try:
                    sock.sendall(chunk)
                    sent += 0x10000
                    reply = sock.recv(4096)
                except TimeoutError:
                    continue
                except OSError:
                    break
        assert sent < 4 * 2**20, sent
        assert not reply or reply.startswith(b"HTTP/1.1 413"), reply[:80]
    finally:
        served.stop()


def test_off_loopback_the_site_needs_tls_and_serves_it(study, tmp_path, capsys):
    study, out = study
    assert (
        rrt(
            [
                "judge",
                "serve",
                "--study",
                study.folder,
                "--host",
                "0.0.0.0",
                "--port",
                str(free_port()),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert (
        "refusing to serve judges' tokens in plain HTTP on 0.0.0.0" in err and err.count("\n") == 1
    )
    cert, key = self_signed(tmp_path)
    port = free_port()
    served = Served(
        study.folder, str(ROOT / "ray_config.yaml"), port, "--tls-cert", cert, "--tls-key", key
    )
    try:
        served.wait_until_up(port, verify=cert)
        token = next(iter(out["tokens"].values()))
        assert (
            requests.get(
                f"https://127.0.0.1:{port}/api/task",
                headers={"Authorization": f"Bearer {token}"},
                verify=cert,
                timeout=10,
            ).status_code
            == 200
        )
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    finally:
        served.stop()


def self_signed(folder) -> tuple[str, str]:
    """A certificate for 127.0.0.1 and its key, as PEM files."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


def test_links_are_printed_once_and_a_rotated_one_replaces_the_old(study, capsys):
    study, out = study
    name, token = next(iter(out["tokens"].items()))
    assert rrt(["judge", "token", "--study", study.folder, "--judge", name]) == 0
    printed = capsys.readouterr().out
    fresh = printed.split("#t=", 1)[1].split()[0]
    assert study.judge_of(token) is None and study.judge_of(fresh)["name"] == name
    assert rrt(["judge", "token", "--study", study.folder, "--judge", name, "--revoke"]) == 0
    assert study.judge_of(fresh) is None
    assert rrt(["judge", "token", "--study", study.folder, "--judge", "nobody"]) == 2

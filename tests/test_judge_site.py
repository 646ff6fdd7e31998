"""The judging site over real HTTP (`rrt judge serve` in a child process, one for the module): bad
input, a judge in headless Chromium (Selenium and Debian's chromedriver), 50 simulated judges at
once, and the report of what they judged. Screenshots and the report go to tests/artifacts/.

The tests run in file order on one study: the browser judge answers a few tasks first, then the 50
simulated judges finish everything, and the report reads it all.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from conftest import ROOT, SAMPLE

from cli.main import main as rrt
from rrt.config import load_settings
from rrt.evaluation.human import QUESTIONS
from testing.local_service import free_port
from testing.rewrite_runs import write_runs

ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMEDRIVER = "/usr/bin/chromedriver"
JUDGES = 50
PER_ITEM = load_settings().judge.judges_per_item


class Site:
    """A study and the `rrt judge serve` process serving it."""

    def __init__(self, folder, process, url, links, admin):
        self.folder, self.process, self.url, self.links, self.admin = (
            folder,
            process,
            url,
            links,
            admin,
        )

    def db(self) -> sqlite3.Connection:
        """A read connection to the study file."""
        conn = sqlite3.connect(os.path.join(self.folder, "study.sqlite"), timeout=30)
        conn.row_factory = sqlite3.Row
        return conn

    def token(self, name: str) -> str:
        """A judge's token, from the link `rrt judge serve` printed."""
        return self.links[name].split("#t=", 1)[1]


def start_site(folder: str, port: int) -> subprocess.Popen:
    """`rrt judge serve` in a child process, once it answers."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "cli", "judge", "serve", "--study", folder, "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    first = process.stdout.readline()
    assert "serving" in first and "#t=" not in first, first  # no token is printed again
    threading.Thread(
        target=lambda: [None for _ in process.stdout], daemon=True
    ).start()  # keep the pipe drained
    deadline = time.monotonic() + 30
    while True:
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2).ok:
                return process
        except requests.ConnectionError:
            pass
        assert time.monotonic() < deadline and process.poll() is None, (
            "the judging site did not start"
        )
        time.sleep(0.1)


def printed_links(text: str) -> tuple[dict, str]:
    """Each judge's link and the admin token from what `rrt judge create` printed."""
    links, admin = {}, None
    for line in text.splitlines():
        name, _, link = line.strip().partition(": ")
        if name == "admin":
            admin = link.split("#t=", 1)[1]
        elif link.startswith("http") and "#t=" in link:
            links[name] = link
    return links, admin


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """12 recipes, three systems, 50 judges (5 per rating and pair), 4 hand rewrites, served on a free port."""
    tmp = tmp_path_factory.mktemp("judge")
    runs = write_runs(str(SAMPLE), str(tmp / "runs"))
    folder = str(tmp / "study")
    port = free_port()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert (
            rrt(
                [
                    "judge",
                    "create",
                    "--study",
                    folder,
                    "--rewrites",
                    ",".join(runs.values()),
                    "--recipes",
                    "12",
                    "--judges",
                    str(JUDGES),
                    "--human-rewrites",
                    "4",
                    "--public-url",
                    f"http://127.0.0.1:{port}",
                ]
            )
            == 0
        )
    links, admin = printed_links(printed.getvalue())
    assert len(links) == JUDGES and admin, printed.getvalue()
    process = start_site(folder, port)
    served = Site(folder, process, f"http://127.0.0.1:{port}", links, admin)
    yield served
    served.process.terminate()
    try:
        served.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        served.process.kill()
        served.process.wait()


def auth(token: str | None) -> dict:
    """The header a judge's page sends."""
    return {"Authorization": f"Bearer {token}"} if token is not None else {}


def stored(site: Site) -> int:
    """Answers in the study file."""
    with site.db() as conn:
        return conn.execute("SELECT COUNT(*) FROM answers").fetchone()[0]


def test_a_taken_port_is_one_error_line(site, capsys):
    port = site.url.rsplit(":", 1)[1]
    assert rrt(["judge", "serve", "--study", site.folder, "--port", port]) == 2
    err = capsys.readouterr().err
    assert f"cannot serve on 127.0.0.1:{port}" in err and err.count("\n") == 1


def test_bad_input_gets_a_clear_4xx_and_nothing_is_stored_twice(site):
    with site.db() as conn:  # a judge whose first task is a rating, and another rating of theirs
        name = conn.execute(
            "SELECT j.name FROM judges j JOIN assignments a ON a.judge = j.id JOIN tasks t ON "
            "t.id = a.task WHERE a.position = (SELECT MIN(position) FROM assignments WHERE judge = j.id) "
            "AND t.kind = 'rate' ORDER BY j.id LIMIT 1"
        ).fetchone()[0]
        rated, unopened = [
            r[0]
            for r in conn.execute(
                "SELECT t.handle FROM assignments a JOIN judges j ON j.id = a.judge JOIN tasks t ON t.id = a.task "
                "WHERE j.name = ? AND t.kind = 'rate' ORDER BY a.position LIMIT 2",
                (name,),
            )
        ]
        theirs = conn.execute(
            "SELECT t.handle FROM assignments a JOIN judges j ON j.id = a.judge JOIN tasks t ON "
            "t.id = a.task WHERE j.name != ? AND a.task NOT IN (SELECT task FROM assignments b "
            "JOIN judges k ON k.id = b.judge WHERE k.name = ?) LIMIT 1",
            (name, name),
        ).fetchone()[0]
    token = site.token(name)
    before = stored(site)
    assert requests.get(f"{site.url}/api/task", timeout=10).status_code == 401
    assert (
        requests.get(f"{site.url}/api/task", headers=auth("forged"), timeout=10).status_code == 403
    )
    assert (
        requests.get(f"{site.url}/api/admin/progress", headers=auth(token), timeout=10).status_code
        == 403
    )
    assert (
        requests.get(f"{site.url}/api/admin/progress", headers=auth(site.admin), timeout=10).json()[
            "done"
        ]
        == 0
    )
    task = requests.get(f"{site.url}/api/task", headers=auth(token), timeout=10).json()["task"]
    assert task["id"] == rated and task["kind"] == "rate"
    put = lambda handle, question, body: requests.put(
        f"{site.url}/api/tasks/{handle}/answers/{question}", headers=auth(token), timeout=10, **body
    )
    # Someone else's task, one that does not exist, and ids that are no handle (2^63 overflowed SQLite).
    for handle in (theirs, "0" * 24, "1000000", str(2**63), str(2**64)):
        reply = put(handle, "overall", {"json": {"value": 3}})
        assert reply.status_code == 404 and "error" in reply.json(), (handle, reply.text)
    reply = put(unopened, "overall", {"json": {"value": 3}})  # not shown yet: nothing to answer
    assert reply.status_code == 409 and "not been opened" in reply.json()["error"]
    for value in (0, 6, 3.5, "4", True, None):
        reply = put(rated, "overall", {"json": {"value": value}})
        assert reply.status_code == 422 and "from 1 to 5" in reply.json()["error"], (
            value,
            reply.text,
        )
    assert put(rated, "colour", {"json": {"value": 3}}).status_code == 422
    assert put(rated, "overall", {"data": "not json"}).status_code == 422
    assert put(rated, "overall", {"data": "[" * 100_000 + "]" * 100_000}).status_code == 413
    assert (
        put(rated, "overall", {"data": "[" * 10_000}).status_code == 422
    )  # deep nesting, under the size cap
    assert put(rated, "overall", {"json": {"value": 3, "seq": 2**63}}).status_code == 422
    assert put(rated, "overall", {"json": {"rating": 3}}).status_code == 422
    assert put(rated, "overall", {"json": {"value": "x" * 30000}}).status_code == 413
    assert stored(site) == before
    # An answer replayed before the task is finished replaces itself; after, it is refused.
    for _ in range(3):
        assert put(rated, "overall", {"json": {"value": 2}}).status_code == 200
    assert stored(site) == before + 1
    finish = requests.post(f"{site.url}/api/tasks/{rated}/finish", headers=auth(token), timeout=10)
    assert (
        finish.status_code == 422
        and "still needs: ingredients, closeness, constraint" in finish.json()["error"]
    )
    for question in ("ingredients", "closeness", "constraint"):
        assert put(rated, question, {"json": {"value": 3}}).status_code == 200
    assert (
        requests.post(
            f"{site.url}/api/tasks/{rated}/finish", headers=auth(token), timeout=10
        ).status_code
        == 200
    )
    assert (
        requests.post(
            f"{site.url}/api/tasks/{rated}/finish", headers=auth(token), timeout=10
        ).status_code
        == 409
    )
    replay = put(rated, "overall", {"json": {"value": 5}})
    assert replay.status_code == 409 and "final" in replay.json()["error"]
    assert stored(site) == before + 4
    with site.db() as conn:
        assert (
            conn.execute(
                "SELECT value FROM answers n JOIN assignments a ON a.id = n.assignment JOIN tasks t "
                "ON t.id = a.task WHERE t.handle = ? AND n.question = 'overall'",
                (rated,),
            ).fetchone()[0]
            == "2"
        )


def browser_judge(site: Site) -> str | None:
    """A judge (not the one the bad-input test used) who has tasks of all three kinds."""
    first = next(iter(site.links))
    with site.db() as conn:
        rows = conn.execute(
            "SELECT j.name FROM judges j JOIN assignments a ON a.judge = j.id JOIN tasks t "
            "ON t.id = a.task WHERE j.name != ? GROUP BY j.id HAVING COUNT(DISTINCT t.kind) = 3 "
            "ORDER BY j.id LIMIT 1",
            (first,),
        ).fetchall()
    return rows[0][0] if rows else None


@pytest.mark.skipif(
    shutil.which("chromium") is None or not os.path.exists(CHROMEDRIVER),
    reason="needs chromium and Debian's chromium-driver (/usr/bin/chromedriver; make setup installs both)",
)
def test_a_judge_in_chromium_answers_each_kind_and_a_reload_keeps_answers(site):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    name = browser_judge(site)
    assert name, "no judge has tasks of every kind"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    options = webdriver.ChromeOptions()
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=412,915",
    ):
        options.add_argument(flag)
    options.binary_location = shutil.which("chromium")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    wait = WebDriverWait(driver, 20)

    def shown_task() -> tuple[str, str]:
        wait.until(lambda d: d.find_element(By.ID, "task").get_attribute("data-id"))
        box = driver.find_element(By.ID, "task")
        return box.get_attribute("data-kind"), box.get_attribute("data-id")

    def saved():
        wait.until(
            lambda d: (
                d.find_element(By.ID, "status").text in ("saved ✓",)
                or "not saved" in d.find_element(By.ID, "status").text
            )
        )
        assert driver.find_element(By.ID, "status").text == "saved ✓"

    def click(element_id: str):
        driver.execute_script("document.getElementById('status').textContent = ''")
        driver.find_element(By.ID, element_id).click()
        saved()

    def next_task(previous: str):
        button = driver.find_element(By.ID, "next")
        wait.until(lambda d: button.is_enabled())
        button.click()
        wait.until(lambda d: d.find_element(By.ID, "task").get_attribute("data-id") != previous)

    try:
        driver.get(site.links[name])
        seen, reloaded, finished = set(), False, []
        while seen != {"rate", "compare", "rewrite"} or not reloaded:
            kind, task_id = shown_task()
            if kind == "rate":
                click("q-ingredients-4")
                click("q-closeness-2")
                if not reloaded:
                    driver.refresh()
                    assert shown_task() == (kind, task_id)
                    assert driver.find_element(By.ID, "q-ingredients-4").is_selected()
                    assert driver.find_element(By.ID, "q-closeness-2").is_selected()
                    reloaded = True
                click("q-constraint-5")
                click("q-overall-3")
                if "rate" not in seen:
                    driver.save_screenshot(str(ARTIFACTS / "judge_rate_phone.png"))
                    driver.set_window_size(1280, 1100)
                    driver.execute_script("window.scrollTo(0, 0)")
                    driver.save_screenshot(str(ARTIFACTS / "judge_rate_desktop.png"))
                    driver.set_window_size(412, 915)
            elif kind == "compare":
                click("choice-left")
                if "compare" not in seen:
                    driver.set_window_size(1280, 1100)
                    driver.save_screenshot(str(ARTIFACTS / "judge_compare_desktop.png"))
                    driver.set_window_size(412, 915)
            else:
                steps = driver.find_element(By.ID, "rw-steps")
                steps.send_keys("\nServe warm.")
                driver.find_element(By.ID, "rw-title").click()  # leaving the box saves at once
                saved()
                driver.save_screenshot(str(ARTIFACTS / "judge_rewrite_phone.png"))
            seen.add(kind)
            finished.append(task_id)
            next_task(task_id)
        assert "error" not in driver.find_element(By.ID, "status").get_attribute("class")
    finally:
        driver.quit()
    with site.db() as conn:
        rows = conn.execute(
            "SELECT t.kind, n.question, n.value FROM answers n JOIN assignments a ON a.id = n.assignment "
            "JOIN tasks t ON t.id = a.task JOIN judges j ON j.id = a.judge WHERE j.name = ? AND "
            "a.finished_at IS NOT NULL",
            (name,),
        ).fetchall()
    answers = Counter((r["kind"], r["question"]) for r in rows)
    assert answers[("rate", "ingredients")] == answers[("rate", "overall")] >= 1
    assert {r["value"] for r in rows if r["question"] == "choice"} == {'"left"'}
    rewrites = [json.loads(r["value"]) for r in rows if r["question"] == "rewrite"]
    assert rewrites and all(r["steps"][-1] == "Serve warm." for r in rewrites)
    for shot in (
        "judge_rate_phone.png",
        "judge_rate_desktop.png",
        "judge_compare_desktop.png",
        "judge_rewrite_phone.png",
    ):
        assert (ARTIFACTS / shot).stat().st_size > 10_000


def simulated_judge(site: Site, name: str, seed: int) -> Counter:
    """One judge answering every task left, as a careful person might: red left in a rewrite lowers
    its constraint rating and loses a head-to-head; each answer is sent twice half the time."""
    rng = random.Random(seed)
    session = requests.Session()
    session.headers.update(auth(site.token(name)))
    outcome = Counter()

    def send(method: str, path: str, body=None):
        for _ in range(2 if rng.random() < 0.5 else 1):
            reply = session.request(method, f"{site.url}{path}", json=body, timeout=60)
            outcome[reply.status_code] += 1
        return reply

    while (task := session.get(f"{site.url}/api/task", timeout=60).json()["task"]) is not None:
        red = [
            sum(len(line) for line in r["marks"]["ingredients"] + r["marks"]["steps"])
            + len(r["marks"]["title"])
            for r in task["rewrites"]
        ]
        if task["kind"] == "rate":
            short = len(task["rewrites"][0]["steps"]) < len(task["source"]["steps"])
            values = {
                "ingredients": rng.choice([3, 4, 4, 5]),
                "closeness": 3 if short else rng.choice([4, 5]),
                "constraint": 2 if red[0] else rng.choice([4, 5, 5]),
                "overall": 2 if red[0] else rng.choice([3, 4, 5]),
            }
            for question in QUESTIONS:
                send(
                    "PUT",
                    f"/api/tasks/{task['id']}/answers/{question}",
                    {"value": values[question]},
                )
        elif task["kind"] == "compare":
            choice = (
                "left"
                if red[0] < red[1]
                else "right"
                if red[1] < red[0]
                else rng.choice(["left", "right", "same"])
            )
            send("PUT", f"/api/tasks/{task['id']}/answers/choice", {"value": choice})
        else:
            source = task["source"]
            send(
                "PUT",
                f"/api/tasks/{task['id']}/answers/rewrite",
                {
                    "value": {
                        "title": source["title"],
                        "ingredients": source["ingredients"],
                        "steps": source["steps"],
                    }
                },
            )
        send("POST", f"/api/tasks/{task['id']}/finish")
    return outcome


def test_fifty_judges_at_once_store_every_judgment_once_and_stay_balanced(site):
    started = time.perf_counter()
    with ThreadPoolExecutor(JUDGES) as pool:
        outcomes = list(
            pool.map(
                lambda pair: simulated_judge(site, *pair),
                [(name, i) for i, name in enumerate(site.links)],
            )
        )
    seconds = time.perf_counter() - started
    total = sum(outcomes, Counter())
    # Replays of a finished task are 409; nothing else fails.
    assert set(total) <= {200, 409}, total
    with site.db() as conn:
        open_tasks = conn.execute(
            "SELECT COUNT(*) FROM assignments WHERE finished_at IS NULL"
        ).fetchone()[0]
        per_task = conn.execute(
            "SELECT t.kind, t.judges, COUNT(a.id) AS n, COUNT(DISTINCT a.judge) AS distinct_judges "
            "FROM tasks t JOIN assignments a ON a.task = t.id GROUP BY t.id"
        ).fetchall()
        answers = conn.execute("SELECT COUNT(*) FROM answers").fetchone()[0]
        distinct = conn.execute(
            "SELECT COUNT(*) FROM (SELECT DISTINCT assignment, question FROM answers)"
        ).fetchone()[0]
        kinds = Counter(r["kind"] for r in per_task)
        load = [r[0] for r in conn.execute("SELECT COUNT(*) FROM assignments GROUP BY judge")]
    assert open_tasks == 0
    assert all(r["n"] == r["distinct_judges"] == r["judges"] for r in per_task)
    assert all(r["judges"] == PER_ITEM for r in per_task if r["kind"] != "rewrite")
    expected = PER_ITEM * (4 * kinds["rate"] + kinds["compare"]) + kinds["rewrite"]
    assert answers == distinct == expected
    assert max(load) - min(load) <= 1 and len(load) == JUDGES
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "judge_load.json").write_text(
        json.dumps(
            {
                "judges": JUDGES,
                "answers": answers,
                "requests": sum(total.values()),
                "statuses": dict(total),
                "seconds": round(seconds, 2),
                "requests_per_s": round(sum(total.values()) / seconds, 1),
            },
            indent=2,
        )
        + "\n"
    )


def test_the_report_of_the_simulated_study(site, capsys):
    output = ARTIFACTS / "judge_report"
    shutil.rmtree(output, ignore_errors=True)
    assert rrt(["judge", "report", "--study", site.folder, "--output", str(output)]) == 0
    printed = capsys.readouterr().out
    report = json.loads((output / "report.json").read_text())
    assert (output / "head_to_head.png").stat().st_size > 5_000 and "<table>" in (
        output / "report.html"
    ).read_text()
    assert (output / "report.md").read_text() in printed
    with site.db() as conn:
        values = [
            int(r[0])
            for r in conn.execute(
                "SELECT n.value FROM answers n JOIN assignments a ON a.id = n.assignment JOIN tasks t ON t.id = a.task "
                "WHERE t.kind = 'rate' AND t.system = 'copy' AND n.question = 'constraint'"
            )
        ]
    assert report["table"]["copy"]["constraint"]["n"] == len(values) == 12 * PER_ITEM
    assert report["table"]["copy"]["constraint"]["mean"] == pytest.approx(sum(values) / len(values))
    # The copy keeps every violation: its constraint rating is the lowest, and the guide beats it.
    assert (
        report["table"]["copy"]["constraint"]["mean"]
        < report["table"]["guide"]["constraint"]["mean"]
    )
    assert report["head_to_head"]["copy"]["wins"] > report["head_to_head"]["copy"]["losses"]
    assert sum(j["done"] for j in report["judges"].values()) == sum(
        j["assigned"] for j in report["judges"].values()
    )
    assert (
        rrt(
            ["judge", "export", "--study", site.folder, "--output", str(ARTIFACTS / "judge_export")]
        )
        == 0
    )
    human = (ARTIFACTS / "judge_export" / "human" / "rewrites.jsonl").read_text().splitlines()
    assert len(human) == 4 and all(json.loads(line)["system"] == "human" for line in human)


def test_a_killed_server_loses_no_judgment(site):
    admin = auth(site.admin)
    before = requests.get(f"{site.url}/api/admin/export", headers=admin, timeout=30).json()
    assert before["judgments"]
    site.process.send_signal(signal.SIGKILL)
    site.process.wait(timeout=10)
    site.process = start_site(site.folder, int(site.url.rsplit(":", 1)[1]))
    name = next(iter(site.links))  # the same personal links work after a restart
    assert (
        requests.get(f"{site.url}/api/task", headers=auth(site.token(name)), timeout=30).status_code
        == 200
    )
    after = requests.get(f"{site.url}/api/admin/export", headers=admin, timeout=30).json()
    assert after == before


@pytest.mark.skipif(
    shutil.which("chromium") is None or not os.path.exists(CHROMEDRIVER),
    reason="needs chromium and Debian's chromium-driver (/usr/bin/chromedriver; make setup installs both)",
)
def test_a_judge_in_chromium_marks_steps_and_cookable(tmp_path):
    """The rating task's step marks and cookable question on a site of its own (the shared study's
    answer counts stay the paper's four ratings)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from judge.study import create_study

    runs = write_runs(str(SAMPLE), str(tmp_path / "runs"), ("guide", "copy"))
    settings = load_settings().judge.model_copy(
        update={"recipes": 2, "judges": 2, "judges_per_item": 2, "majority": 2, "human_rewrites": 0}
    )
    folder = str(tmp_path / "study")
    token = create_study(folder, [runs["guide"], runs["copy"]], settings)["tokens"]["judge-01"]
    port = free_port()
    process = start_site(folder, port)
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.binary_location = shutil.which("chromium")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    wait = WebDriverWait(driver, 20)
    conn = sqlite3.connect(os.path.join(folder, "study.sqlite"), timeout=30)

    def saved_value(question: str):
        row = conn.execute(
            "SELECT n.value FROM answers n JOIN assignments a ON a.id = n.assignment JOIN tasks t "
            "ON t.id = a.task WHERE t.handle = ? AND n.question = ?",
            (driver.find_element(By.ID, "task").get_attribute("data-id"), question),
        ).fetchone()
        return json.loads(row[0]) if row else None

    try:
        driver.get(f"http://127.0.0.1:{port}/#t={token}")
        while True:
            wait.until(lambda d: d.find_element(By.ID, "task").get_attribute("data-kind"))
            box = driver.find_element(By.ID, "task")
            if box.get_attribute("data-kind") == "rate":
                break
            driver.find_element(By.ID, "choice-left").click()
            previous = box.get_attribute("data-id")
            wait.until(lambda d: d.find_element(By.ID, "next").is_enabled())
            driver.find_element(By.ID, "next").click()
            wait.until(
                lambda d, seen=previous: (
                    d.find_element(By.ID, "task").get_attribute("data-id") != seen
                )
            )
        steps = len(driver.find_elements(By.CSS_SELECTOR, ".step"))
        assert steps >= 2
        driver.find_element(By.ID, "cookable-no").click()
        driver.find_element(By.ID, "mark-0-no_sense").click()  # two quick marks: neither is lost
        driver.find_element(By.ID, "mark-1-ok").click()
        expected = ["no_sense", "ok"] + [None] * (steps - 2)
        wait.until(
            lambda d: saved_value("step_marks") == expected and saved_value("cookable") == "no"
        )
        driver.refresh()
        wait.until(lambda d: d.find_elements(By.ID, "mark-0-no_sense"))
        assert driver.find_element(By.ID, "mark-0-no_sense").is_selected()
        assert driver.find_element(By.ID, "mark-1-ok").is_selected()
        assert driver.find_element(By.ID, "cookable-no").is_selected()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "judge_step_marks.png"))
    finally:
        driver.quit()
        conn.close()
        process.terminate()
        process.wait(timeout=10)

"""The service's web page in headless Chromium (Selenium and Debian's chromedriver), in front of a
stand-in for the API that gives one answer built by the service's own `response`: no Ray, no model.
The page paints only what a rewrite changed, and shows no result before a run."""

from __future__ import annotations

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rrt.config import load_settings
from rrt.recipes.lexicon import CONSTRAINTS
from serve.schema import parse_request, response

PAGE = Path(__file__).resolve().parent.parent / "serve" / "page.html"
CHROMEDRIVER = "/usr/bin/chromedriver"
SOURCE = {
    "title": "Pancakes",
    "ingredients": ["2 cups flour", "3 tablespoons butter, melted", "1 tablespoon olive oil"],
    "steps": ["Whisk the flour with a pinch of salt.", "Fold in the melted butter."],
}
REWRITE = {
    "title": "Pancakes",
    "ingredients": ["2 cups flour", "3 tablespoons oil", "1 tablespoon olive oil"],
    "steps": ["Whisk the flour with a pinch of salt.", "Fold in the oil."],
}


def answer() -> dict:
    """The service's answer for a rewrite that kept the first step and changed the second."""
    request = parse_request(
        json.dumps({"recipe": SOURCE, "constraint": "vegan", "candidates": 1}).encode(),
        load_settings().serve.limits,
    )
    record = {
        "rewrite": REWRITE,
        "substitutions": [
            {
                "field": field,
                "index": index,
                "original": "butter, melted" if field == "ingredients" else "melted butter",
                "replacement": "oil",
                "constraint": "vegan",
            }
            for field, index in (("ingredients", 1), ("steps", 1))
        ],
        "notes": [],
        "steps": [
            {
                "source_step": n,
                "candidates": [{"text": text, "scores": {"total": 0.0}}],
                "chosen": 0,
                "decision": decision,
            }
            for n, (text, decision) in enumerate(zip(REWRITE["steps"], ("kept", "guide")))
        ],
    }
    timings = {"rewrite_s": 0.1, "batch_size": 1.0, "rounds": 2, "queue_s": 0.0, "total_s": 0.1}
    return response(request, record, {}, timings)


class StandIn(BaseHTTPRequestHandler):
    """The page, the constraints and one canned rewrite."""

    answer = b""

    def _send(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        """The page, or the constraints."""
        if self.path.startswith("/v1/constraints"):
            self._send(json.dumps({"constraints": list(CONSTRAINTS)}).encode(), "application/json")
        else:
            self._send(PAGE.read_bytes(), "text/html; charset=utf-8")

    def do_POST(self):
        """The canned rewrite, whatever was asked."""
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send(self.answer, "application/json")

    def log_message(self, *args) -> None:
        """Quiet: the test's output holds only what fails."""


@pytest.fixture
def page_url():
    """The stand-in API on a free loopback port."""
    handler = type("Canned", (StandIn,), {"answer": json.dumps(answer()).encode()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.mark.skipif(
    shutil.which("chromium") is None or not Path(CHROMEDRIVER).exists(),
    reason="needs chromium and Debian's chromium-driver (/usr/bin/chromedriver; make setup installs both)",
)
def test_the_page_paints_only_what_changed_and_no_result_before_a_run(page_url):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.binary_location = shutil.which("chromium")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.get(page_url)
        WebDriverWait(driver, 20).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "#constraints input")
        )
        # Before a run the empty Source and Rewrite headings take no room on the page.
        assert not driver.find_element(By.ID, "result").is_displayed()
        driver.find_element(By.ID, "go").click()
        WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#steps li"))
        assert driver.find_element(By.ID, "result").is_displayed()
        rewrite = driver.find_element(By.ID, "rewrite")
        title = rewrite.find_element(By.TAG_NAME, "h3")
        lines = rewrite.find_elements(By.CSS_SELECTOR, "ul > li")
        steps = rewrite.find_elements(By.CSS_SELECTOR, "#steps > li.step")

        def painted(element) -> list[str]:
            """The texts painted as changed inside an element."""
            return [e.text for e in element.find_elements(By.CSS_SELECTOR, ".good")]

        # Lines as their source had them are not painted, even where a replacement's words
        # ("oil") appear in them; a changed line has only its change painted.
        assert [painted(e) for e in [title, *lines]] == [[], [], ["oil"], []]
        assert [painted(e) for e in steps] == [[], ["oil"]]
        assert [e.text for e in rewrite.find_elements(By.CLASS_NAME, "decision")] == [
            "kept",
            "guide",
        ]
    finally:
        driver.quit()

"""The judging site: a small FastAPI app over one study file (uvicorn, no Ray).

    rrt judge serve --study out/demo/study       (judge/server.py: bounded uvicorn, TLS off loopback)
    uvicorn --factory judge.app:app_from_env     (RRT_STUDY=out/demo/study)

A judge's link carries their token after `#`, so it never reaches a server log; the page sends it
as `Authorization: Bearer`. A task is named by an opaque handle. Every answer is saved as it is
given (numbered by the page, so a late autosave never overwrites a newer one); a task that was
shown closes with `finish`.

    GET  /                                  the judge's page      GET /admin   progress and exports
    GET  /api/task                          the next unfinished task, its saved answers
    PUT  /api/tasks/{task}/answers/{question}   {"value": 4 | "left" | "yes" | [step marks] |
                                                 {title, ingredients, steps}, "seq": n}
    POST /api/tasks/{task}/finish           close a task whose questions are all answered
    GET  /api/admin/progress | /api/admin/export | /api/admin/report
    GET  /api/openapi.json                  the schema of all of it
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.concurrency import run_in_threadpool

from judge.store import BUSY_S, AnswerError, Study, StudyBusy, is_handle
from judge.study import build_report
from rrt.config import load_settings
from rrt.evaluation.human import (
    CHOICES,
    COMPARE_QUESTION,
    COOKABLE,
    COOKABLE_QUESTION,
    QUESTIONS,
    RATING_RANGE,
    RUBRIC_VERSION,
    STEP_MARKS,
)
from rrt.recipes.tagger import parse_constraints, text_violations
from runtime.http_body import BodyError, read_body

HERE = Path(__file__).resolve().parent
_ERROR = {
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {"error": {"type": "string"}},
                "required": ["error"],
            }
        }
    }
}
# Every way a route may refuse, so the published schema (and a fuzzer reading it) knows them.
ERRORS = {
    status: {"description": text, **_ERROR}
    for status, text in (
        (401, "no bearer token"),
        (403, "a token that may not do this"),
        (404, "no such task for this judge"),
        (408, "the body arrived too slowly"),
        (409, "the task is finished or not opened yet"),
        (413, "the body is too large"),
        (422, "a malformed request or answer"),
        (503, "the study is busy"),
    )
}
# The answer's body is read as a bounded stream, not by FastAPI, so its shape is declared here.
ANSWER_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["value"],
                    "properties": {
                        "value": {
                            "oneOf": [
                                {"type": "integer"},
                                {"type": "string"},
                                {
                                    "type": "array",
                                    "items": {"oneOf": [{"type": "string"}, {"type": "null"}]},
                                },
                                {
                                    "type": "object",
                                    "properties": {
                                        "title": {"type": "string"},
                                        "ingredients": {
                                            "type": "array",
                                            "items": {"type": "string"},
                                        },
                                        "steps": {"type": "array", "items": {"type": "string"}},
                                    },
                                },
                            ]
                        },
                        "seq": {"type": "integer", "minimum": 0},
                    },
                }
            }
        },
    }
}


class Refused(Exception):
    """A request answered with `status` and one error line."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def marks(recipe: dict, constraint: str) -> dict:
    """Violating spans of each line (title, ingredients, steps) for the constraint: shown in red."""
    constraints = parse_constraints(constraint)

    def spans(text: str) -> list[list[int]]:
        """The [start, end] of each violating mention in one line."""
        return [[m.start, m.end] for m in text_violations(text, constraints)]

    return {
        "title": spans(recipe.get("title", "")),
        "ingredients": [spans(line) for line in recipe.get("ingredients") or []],
        "steps": [spans(line) for line in recipe.get("steps") or []],
    }


def shown(recipe: dict, constraint: str) -> dict:
    """A recipe as the page shows it: its lines and their red spans (never the system's name)."""
    plain = {
        k: recipe.get(k) or ([] if k != "title" else "") for k in ("title", "ingredients", "steps")
    }
    return {**plain, "marks": marks(plain, constraint)}


def answer_body(body: bytes) -> tuple[object, int | None]:
    """The value and the page's save counter of an answer's body, or a 422."""
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):  # deep nesting is the client's fault, not a 500
        raise Refused(422, 'an answer is JSON: {"value": ..., "seq": n}') from None
    if not isinstance(parsed, dict) or "value" not in parsed:
        raise Refused(422, 'an answer is JSON: {"value": ..., "seq": n}')
    seq = parsed.get("seq")
    if seq is not None and (
        isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 2**63
    ):
        raise Refused(422, "seq is a whole number from 0 below 2^63 (the page's save counter)")
    return parsed["value"], seq


def known(task: str) -> str:
    """A task handle as given, or a 404 for anything not shaped like one."""
    if not is_handle(task):
        raise Refused(404, f"no task {task[:40]!r}")
    return task


def build_app(folder: str, max_chars: int, body_timeout: float, busy_s: float = BUSY_S) -> FastAPI:
    """The app over the study in `folder`; a hand rewrite is at most `max_chars` characters, an
    answer's body must arrive within `body_timeout` seconds, and a write waits `busy_s` on others."""
    study = Study(folder, busy_s=busy_s)
    app = FastAPI(title="rrt judge", docs_url=None, redoc_url=None, openapi_url="/api/openapi.json")
    page = (HERE / "page.html").read_text(encoding="utf-8")
    admin_page = (HERE / "admin.html").read_text(encoding="utf-8")
    app.state.study = study

    @app.exception_handler(Refused)
    async def refused(request: Request, err: Refused):
        """A refused request: its status and one error line (401 asks for a bearer token)."""
        headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else None
        return JSONResponse({"error": str(err)}, status_code=err.status, headers=headers)

    @app.exception_handler(AnswerError)
    async def refused_answer(request: Request, err: AnswerError):
        """An answer the study refuses (out of range, not assigned, already finished): one error line."""
        return JSONResponse({"error": str(err)}, status_code=err.status)

    @app.exception_handler(StudyBusy)
    async def busy(request: Request, err: StudyBusy):
        """The study file stayed locked past its wait: try again shortly (503), never a 500."""
        return JSONResponse(
            {"error": "the study is busy; try again in a moment"},
            status_code=503,
            headers={"Retry-After": "2"},
        )

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, err: RequestValidationError):
        """A request body or path FastAPI cannot read: 422 with the first problem."""
        first = err.errors()[0] if err.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return JSONResponse(
            {"error": f"bad request: {where} {first.get('msg', '')}".strip()}, status_code=422
        )

    def bearer(request: Request) -> str:
        """The request's bearer token; none is a 401."""
        header = request.headers.get("authorization", "")
        if not header.lower().startswith("bearer ") or not header[7:].strip():
            raise Refused(401, "missing token: open the link you were given")
        return header[7:].strip()

    def judge(token: str = Depends(bearer)) -> dict:
        """The judge the token belongs to; an unknown token is a 403."""
        found = study.judge_of(token)
        if found is None:
            raise Refused(403, "unknown token: open the link you were given")
        return found

    def admin(token: str = Depends(bearer)) -> None:
        """Only the admin token passes; any other is a 403."""
        if not study.is_admin(token):
            raise Refused(403, "this needs the admin token")

    @app.get("/", response_class=HTMLResponse)
    def judge_page() -> str:
        """The judging page (it reads the token from its link)."""
        return page

    @app.get("/admin", response_class=HTMLResponse)
    def admin_view() -> str:
        """The admin page: progress, report and exports."""
        return admin_page

    @app.get("/healthz")
    def health() -> dict:
        """Liveness for a load balancer or a test."""
        return {"ok": True}

    @app.get("/api/task", responses=ERRORS)
    def next_task(who: dict = Depends(judge)) -> dict:
        """The judge's next unfinished task, with the answers saved so far, and their progress."""
        (progress,) = study.progress(who["id"])
        task = study.next_task(who["id"])
        common = {"judge": who["name"], "done": progress["done"], "assigned": progress["assigned"]}
        if task is None:
            return {**common, "task": None}
        body = {
            "id": task["id"],
            "kind": task["kind"],
            "constraint": task["constraint"],
            "source": shown(task["source"], task["constraint"]),
            "rewrites": [shown(r, task["constraint"]) for r in task["rewrites"]],
            "answers": task["answers"],
        }
        return {**common, "task": body}

    @app.put("/api/tasks/{task}/answers/{question}", responses=ERRORS, openapi_extra=ANSWER_BODY)
    async def answer(
        task: str, question: str, request: Request, who: dict = Depends(judge)
    ) -> dict:
        """Save one answer of one task (a rating, the head-to-head choice or the hand rewrite)."""
        declared = request.headers.get("content-length")
        limit = max_chars + 1024
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            raise Refused(413, f"an answer is at most {max_chars} characters")
        try:
            body = await read_body(request, limit, body_timeout)
        except BodyError as err:
            raise Refused(
                err.status,
                f"an answer is at most {max_chars} characters" if err.status == 413 else str(err),
            ) from None
        value, seq = answer_body(body)
        # The store's work is blocking SQLite: off the event loop, like the sync routes.
        stored, constraint, applied = await run_in_threadpool(
            study.answer, who["id"], known(task), question, value, max_chars, seq
        )
        saved = {"saved": applied, "task": task, "question": question}
        if question == "rewrite":
            saved["marks"] = marks(stored, constraint)  # what the hand rewrite still breaks, live
        return saved

    @app.post("/api/tasks/{task}/finish", responses=ERRORS)
    def finish(task: str, who: dict = Depends(judge)) -> dict:
        """Mark an opened task done once every question of it is answered."""
        study.finish(who["id"], known(task))
        (progress,) = study.progress(who["id"])
        return {"finished": task, "done": progress["done"], "assigned": progress["assigned"]}

    @app.get("/api/questions")
    def questions() -> dict:
        """The questions, their wording and the answers each takes (step marks and cookable: asked
        with the ratings, optional to finish a task)."""
        return {
            "ratings": [
                {"key": k, "label": label, "text": text} for k, (label, text) in QUESTIONS.items()
            ],
            "range": list(RATING_RANGE),
            "compare": COMPARE_QUESTION,
            "choices": list(CHOICES),
            "rubric_version": RUBRIC_VERSION,
            "step_marks": [
                {"key": k, "label": k.replace("_", " "), "text": text}
                for k, text in STEP_MARKS.items()
            ],
            "cookable": COOKABLE_QUESTION,
            "cookable_choices": list(COOKABLE),
        }

    @app.get("/api/admin/progress", dependencies=[Depends(admin)], responses=ERRORS)
    def progress() -> dict:
        """Tasks assigned and done, per judge and in all (admin)."""
        judges = study.progress()
        return {
            "judges": judges,
            "assigned": sum(j["assigned"] for j in judges),
            "done": sum(j["done"] for j in judges),
            "systems": study.systems(),
        }

    @app.get("/api/admin/export", dependencies=[Depends(admin)], responses=ERRORS)
    def export() -> dict:
        """Every judgment and the hand rewrites as records (admin)."""
        return {"judgments": study.judgments(), "human": study.human_records()}

    @app.get("/api/admin/report", dependencies=[Depends(admin)], responses=ERRORS)
    def report() -> dict:
        """The study's report as JSON, computed now (admin)."""
        return build_report(study)

    return app


def app_from_env() -> FastAPI:
    """The app for `uvicorn --factory`: the study folder in RRT_STUDY, limits from ray_config.yaml."""
    judge = load_settings(os.environ.get("RRT_CONFIG")).judge
    return build_app(os.environ["RRT_STUDY"], judge.max_chars, judge.body_timeout_s)

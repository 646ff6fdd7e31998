"""The judging site: a small FastAPI app over one study file (uvicorn, no Ray).

    rrt judge serve --study out/study            (prints every judge's link and the admin link)
    uvicorn --factory judge.app:app_from_env     (RRT_STUDY=out/study)

A judge's link carries their token after `#`, so it never reaches a server log; the page sends it
as `Authorization: Bearer`. Every answer is saved as it is given; a task closes with `finish`.

    GET  /                                  the judge's page      GET /admin   progress and exports
    GET  /api/task                          the next unfinished task, its saved answers
    PUT  /api/tasks/{task}/answers/{question}   {"value": 4 | "left" | {title, ingredients, steps}}
    POST /api/tasks/{task}/finish           close a task whose questions are all answered
    GET  /api/admin/progress | /api/admin/export | /api/admin/report
"""
from __future__ import annotations

import hmac
import os
from pathlib import Path

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.concurrency import run_in_threadpool

from judge.store import AnswerError, Study
from rrt.evaluation.human import CHOICES, COMPARE_QUESTION, QUESTIONS, RATING_RANGE
from rrt.recipes.tagger import parse_constraints, text_violations

HERE = Path(__file__).resolve().parent


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

    return {"title": spans(recipe.get("title", "")),
            "ingredients": [spans(line) for line in recipe.get("ingredients") or []],
            "steps": [spans(line) for line in recipe.get("steps") or []]}


def shown(recipe: dict, constraint: str) -> dict:
    """A recipe as the page shows it: its lines and their red spans (never the system's name)."""
    plain = {k: recipe.get(k) or ([] if k != "title" else "") for k in ("title", "ingredients", "steps")}
    return {**plain, "marks": marks(plain, constraint)}


def build_app(folder: str, max_chars: int) -> FastAPI:
    """The app over the study in `folder`; a hand rewrite is at most `max_chars` characters."""
    study = Study(folder)
    admin_token = study.meta()["admin_token"]
    app = FastAPI(title="rrt judge", docs_url=None, redoc_url=None, openapi_url=None)
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

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, err: RequestValidationError):
        """A request body or path FastAPI cannot read: 422 with the first problem."""
        first = err.errors()[0] if err.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return JSONResponse({"error": f"bad request: {where} {first.get('msg', '')}".strip()}, status_code=422)

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
        if not hmac.compare_digest(token.encode(), admin_token.encode()):
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

    @app.get("/api/task")
    def next_task(who: dict = Depends(judge)) -> dict:
        """The judge's next unfinished task, with the answers saved so far, and their progress."""
        (progress,) = study.progress(who["id"])
        task = study.next_task(who["id"])
        common = {"judge": who["name"], "done": progress["done"], "assigned": progress["assigned"]}
        if task is None:
            return {**common, "task": None}
        body = {"id": task["id"], "kind": task["kind"], "constraint": task["constraint"],
                "source": shown(task["source"], task["constraint"]),
                "rewrites": [shown(r, task["constraint"]) for r in task["rewrites"]], "answers": task["answers"]}
        return {**common, "task": body}

    @app.put("/api/tasks/{task_id}/answers/{question}")
    async def answer(task_id: int, question: str, request: Request, who: dict = Depends(judge)) -> dict:
        """Save one answer of one task (a rating, the head-to-head choice or the hand rewrite)."""
        declared = request.headers.get("content-length", "0")
        if not declared.isdigit() or int(declared) > max_chars + 1024 or len(await request.body()) > max_chars + 1024:
            raise Refused(413, f"an answer is at most {max_chars} characters")
        try:
            value = (await request.json())["value"]
        except (ValueError, KeyError, TypeError):
            raise Refused(422, 'an answer is JSON: {"value": ...}') from None
        # The store's work is blocking SQLite: off the event loop, like the sync routes.
        stored, constraint = await run_in_threadpool(study.answer, who["id"], task_id, question, value, max_chars)
        saved = {"saved": True, "task": task_id, "question": question}
        if question == "rewrite":
            saved["marks"] = marks(stored, constraint)  # what the hand rewrite still breaks, live
        return saved

    @app.post("/api/tasks/{task_id}/finish")
    def finish(task_id: int, who: dict = Depends(judge)) -> dict:
        """Mark a task done once every question of it is answered."""
        study.finish(who["id"], task_id)
        (progress,) = study.progress(who["id"])
        return {"finished": task_id, "done": progress["done"], "assigned": progress["assigned"]}

    @app.get("/api/questions")
    def questions() -> dict:
        """The questions, their wording and the answers each takes."""
        return {"ratings": [{"key": k, "label": label, "text": text} for k, (label, text) in QUESTIONS.items()],
                "range": list(RATING_RANGE), "compare": COMPARE_QUESTION, "choices": list(CHOICES)}

    @app.get("/api/admin/progress", dependencies=[Depends(admin)])
    def progress() -> dict:
        """Tasks assigned and done, per judge and in all (admin)."""
        judges = study.progress()
        return {"judges": judges, "assigned": sum(j["assigned"] for j in judges),
                "done": sum(j["done"] for j in judges), "systems": study.systems()}

    @app.get("/api/admin/export", dependencies=[Depends(admin)])
    def export() -> dict:
        """Every judgment and the hand rewrites as records (admin)."""
        return {"judgments": study.judgments(), "human": study.human_records()}

    @app.get("/api/admin/report", dependencies=[Depends(admin)])
    def report() -> dict:
        """The study's report as JSON, computed now (admin)."""
        from judge.study import build_report

        return build_report(study)

    return app


def app_from_env() -> FastAPI:
    """The app for `uvicorn --factory`: the study folder in RRT_STUDY, limits from ray_config.yaml."""
    from rrt.config import load_settings

    return build_app(os.environ["RRT_STUDY"], load_settings(os.environ.get("RRT_CONFIG")).judge.max_chars)


def run(folder: str, host: str, port: int, max_chars: int, public_url: str | None) -> None:
    """Serve the study until Ctrl-C, after printing the judges' links and the admin link."""
    import socket

    import uvicorn

    app = build_app(folder, max_chars)
    with socket.socket() as probe:  # a taken port is one error line, not uvicorn's exit
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as err:
            raise OSError(f"cannot serve on {host}:{port}: {err.strerror}") from None
    base = (public_url or f"http://{host}:{port}").rstrip("/")
    study: Study = app.state.study
    print(f"study {folder}: {len(study.judges())} judges, systems {', '.join(study.systems())}", flush=True)
    for person in study.judges():
        print(f"  {person['name']}: {base}/#t={person['token']}", flush=True)
    print(f"  admin: {base}/admin#t={study.meta()['admin_token']}", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")

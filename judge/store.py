"""The study in one SQLite file: recipes, judges, tasks, assignments and every answer.

WAL mode, one short transaction per answer (`BEGIN IMMEDIATE`, so concurrent judges queue instead
of failing), and an answer keyed by (assignment, question): a replay can never store it twice.
`migrate` brings any older file up to `SCHEMA_VERSION`, one script per version.
"""
from __future__ import annotations

import json
import os
import random
import secrets
import sqlite3
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from rrt.evaluation.human import CHOICES, KINDS, QUESTIONS, RATING_RANGE, assign, judge_order, plan_tasks

DB_FILE = "study.sqlite"
# Each entry moves the schema from version i to i + 1; a file is never rewritten in place otherwise.
MIGRATIONS = [
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE systems (name TEXT PRIMARY KEY, origin TEXT NOT NULL, added_at REAL NOT NULL);
    CREATE TABLE items (recipe TEXT NOT NULL, constraint_name TEXT NOT NULL, source TEXT NOT NULL,
                        rated INTEGER NOT NULL, rewritten INTEGER NOT NULL, PRIMARY KEY (recipe, constraint_name));
    CREATE TABLE rewrites (recipe TEXT NOT NULL, constraint_name TEXT NOT NULL, system TEXT NOT NULL REFERENCES systems,
                           record TEXT NOT NULL, PRIMARY KEY (recipe, constraint_name, system));
    CREATE TABLE judges (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, token TEXT NOT NULL UNIQUE,
                         added_at REAL NOT NULL);
    CREATE TABLE tasks (id INTEGER PRIMARY KEY, kind TEXT NOT NULL CHECK (kind IN ('rate', 'compare', 'rewrite')),
                        recipe TEXT NOT NULL, constraint_name TEXT NOT NULL, system TEXT, other TEXT,
                        judges INTEGER NOT NULL, UNIQUE (kind, recipe, constraint_name, system, other));
    CREATE TABLE assignments (id INTEGER PRIMARY KEY, task INTEGER NOT NULL REFERENCES tasks,
                              judge INTEGER NOT NULL REFERENCES judges, position INTEGER NOT NULL,
                              started_at REAL, finished_at REAL, UNIQUE (task, judge));
    CREATE INDEX assignments_by_judge ON assignments (judge, finished_at, position);
    CREATE TABLE answers (assignment INTEGER NOT NULL REFERENCES assignments, question TEXT NOT NULL,
                          value TEXT NOT NULL, answered_at REAL NOT NULL, PRIMARY KEY (assignment, question));
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)


class StudyError(ValueError):
    """A study that cannot be created, opened or changed as asked (one line)."""


class AnswerError(ValueError):
    """An answer the study refuses; `status` is the HTTP status that says why."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the file's schema to SCHEMA_VERSION; the version it had before."""
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    row = conn.execute("SELECT version FROM schema_version").fetchone()
    before = row[0] if row else 0
    if before > SCHEMA_VERSION:
        raise StudyError(f"the study file has schema {before}; this rrt reads up to {SCHEMA_VERSION}: upgrade rrt")
    for version in range(before, SCHEMA_VERSION):
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in MIGRATIONS[version].split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("DELETE FROM schema_version")
            conn.execute("INSERT INTO schema_version VALUES (?)", (version + 1,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return before


def connect(path: str) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL, waiting on busy writers."""
    conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    # In WAL mode NORMAL still survives a crash of the app (a commit is in the log before it returns);
    # only a power cut can take the last commits, and it spares an fsync per answer.
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


def rating_value(value) -> int:
    """A 1-5 rating, or an AnswerError."""
    low, high = RATING_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise AnswerError(422, f"a rating is a whole number from {low} to {high} (got {value!r})")
    return value


def rewrite_value(value, max_chars: int) -> dict:
    """A hand rewrite {title, ingredients, steps} (lists of lines), or an AnswerError."""
    if not isinstance(value, dict) or set(value) != {"title", "ingredients", "steps"}:
        raise AnswerError(422, "a rewrite is {\"title\": text, \"ingredients\": [lines], \"steps\": [lines]}")
    title, ingredients, steps = value["title"], value["ingredients"], value["steps"]
    if not isinstance(title, str) or not all(isinstance(x, list) and all(isinstance(s, str) for s in x)
                                             for x in (ingredients, steps)):
        raise AnswerError(422, "a rewrite's title is text and its ingredients and steps are lists of text")
    if len(json.dumps(value)) > max_chars:
        raise AnswerError(413, f"a rewrite is at most {max_chars} characters")
    return {"title": title.strip(), "ingredients": [s.strip() for s in ingredients if s.strip()],
            "steps": [s.strip() for s in steps if s.strip()]}


def checked_answer(kind: str, question: str, value, max_chars: int):
    """The value to store for one answer to a task of `kind`, or an AnswerError."""
    if kind == "rate":
        if question not in QUESTIONS:
            raise AnswerError(422, f"a rating task asks {', '.join(QUESTIONS)} (got {question!r})")
        return rating_value(value)
    if kind == "compare":
        if question != "choice" or value not in CHOICES:
            raise AnswerError(422, f"a head-to-head task takes choice: {', '.join(CHOICES)} (got {question}={value!r})")
        return value
    if question != "rewrite":
        raise AnswerError(422, f"a rewrite task takes rewrite (got {question!r})")
    return rewrite_value(value, max_chars)


REQUIRED = {"rate": list(QUESTIONS), "compare": ["choice"], "rewrite": ["rewrite"]}


class Study:
    """One study file: what the CLI creates and extends and what the web app reads and writes."""

    def __init__(self, folder: str, create: bool = False):
        self.folder = folder
        self.path = os.path.join(folder, DB_FILE)
        self._local, self._lock, self._opened = threading.local(), threading.Lock(), []
        if not create and not os.path.isfile(self.path):
            raise StudyError(f"no study in {folder} (no {DB_FILE}): create one with rrt judge create")
        if create:
            os.makedirs(folder, exist_ok=True)
        try:
            with self.connection() as conn:
                migrate(conn)
        except sqlite3.DatabaseError as err:
            self.close()
            raise StudyError(f"{self.path} is not a study database: {err}") from None
        except StudyError:
            self.close()
            raise

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection (threads of the web app never share one); kept open, because the
        last connection to close checkpoints the whole log."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = connect(self.path)
            with self._lock:
                self._opened.append(conn)
        yield conn

    def close(self) -> None:
        """Close every connection this study opened."""
        with self._lock:
            for conn in self._opened:
                conn.close()
            self._opened.clear()
        self._local = threading.local()

    @contextmanager
    def writing(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once so concurrent writers queue on the busy timeout."""
        with self.connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    # --- settings kept with the study -------------------------------------------------------------
    def meta(self) -> dict:
        """The study's own settings: seed, best system, judges per item, admin token..."""
        with self.connection() as conn:
            return {r["key"]: json.loads(r["value"]) for r in conn.execute("SELECT key, value FROM meta")}

    @staticmethod
    def _set_meta(conn: sqlite3.Connection, **values) -> None:
        for key, value in values.items():
            conn.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                         (key, json.dumps(value)))

    def is_empty(self) -> bool:
        """True before the first system is added."""
        with self.connection() as conn:
            return conn.execute("SELECT COUNT(*) FROM systems").fetchone()[0] == 0

    # --- creating and extending -------------------------------------------------------------------
    def populate(self, records_by_system: dict[str, list[dict]], origins: dict[str, str],
                 rated: list[tuple[str, str]], rewritten: list[tuple[str, str]], judges: list[str], *,
                 best: str | None, judges_per_item: int, rewriters_per_item: int, majority: int, seed: int,
                 settings: dict) -> dict:
        """Fill a new study: items, rewrites, judges, tasks and their blind, balanced assignments."""
        sources = {}
        for records in records_by_system.values():
            for record in records:
                sources.setdefault((str(record["id"]), str(record.get("constraint") or "")), record["source"])
        with self.writing() as conn:
            self._set_meta(conn, seed=seed, best=best, judges_per_item=judges_per_item, majority=majority,
                           rewriters_per_item=rewriters_per_item, admin_token=secrets.token_urlsafe(18),
                           created_at=time.time(), settings=settings, extensions=0)
            rated_set, rewritten_set = set(rated), set(rewritten)
            for key in dict.fromkeys(rated + rewritten):
                conn.execute("INSERT INTO items VALUES (?, ?, ?, ?, ?)",
                             (*key, json.dumps(sources[key]), key in rated_set, key in rewritten_set))
            self._add_judges(conn, judges)
            self._add_systems(conn, records_by_system, origins, rated)
            tasks = plan_tasks(rated, list(records_by_system), best, judges_per_item, rewritten,
                               rewriters_per_item, seed)
            return self._add_tasks(conn, tasks, seed)

    @staticmethod
    def _add_systems(conn, records_by_system: dict[str, list[dict]], origins: dict[str, str], rated) -> None:
        wanted = set(rated)
        for system, records in records_by_system.items():
            conn.execute("INSERT INTO systems VALUES (?, ?, ?)", (system, origins.get(system, ""), time.time()))
            for record in records:
                key = (str(record["id"]), str(record.get("constraint") or ""))
                if key in wanted:
                    conn.execute("INSERT OR IGNORE INTO rewrites VALUES (?, ?, ?, ?)",
                                 (*key, system, json.dumps(record)))

    @staticmethod
    def _add_judges(conn, names: list[str]) -> list[str]:
        taken = {r[0] for r in conn.execute("SELECT name FROM judges")}
        clash = [n for n in names if n in taken]
        if clash:
            raise StudyError(f"the study already has judge(s) {', '.join(clash)}")
        for name in names:
            conn.execute("INSERT INTO judges (name, token, added_at) VALUES (?, ?, ?)",
                         (name, secrets.token_urlsafe(18), time.time()))
        return names

    def _add_tasks(self, conn, tasks: list[dict], seed: int) -> dict:
        """Insert tasks, assign them to the least-loaded judges and put each judge's new tasks in a
        random order after the ones they already have."""
        judges = {r["name"]: r["id"] for r in conn.execute("SELECT id, name FROM judges")}
        load = {r["name"]: r["n"] for r in conn.execute(
            "SELECT j.name, COUNT(a.id) AS n FROM judges j LEFT JOIN assignments a ON a.judge = j.id GROUP BY j.id")}
        seen: dict[str, set] = {}
        for r in conn.execute("SELECT j.name, t.recipe, t.constraint_name FROM assignments a "
                              "JOIN judges j ON j.id = a.judge JOIN tasks t ON t.id = a.task"):
            seen.setdefault(r["name"], set()).add((r["recipe"], r["constraint_name"]))
        try:
            pairs = assign(tasks, sorted(judges), seed, load, seen)
        except ValueError as err:
            raise StudyError(str(err)) from None
        ids = []
        for task in tasks:
            cursor = conn.execute("INSERT INTO tasks (kind, recipe, constraint_name, system, other, judges) "
                                  "VALUES (?, ?, ?, ?, ?, ?)", (task["kind"], task["recipe"], task["constraint"],
                                                                task["system"], task["other"], task["judges"]))
            ids.append(cursor.lastrowid)
        by_judge: dict[str, list[int]] = {}
        for index, judge in pairs:
            by_judge.setdefault(judge, []).append(ids[index])
        for judge, task_ids in sorted(by_judge.items()):
            start = conn.execute("SELECT COALESCE(MAX(position) + 1, 0) FROM assignments WHERE judge = ?",
                                 (judges[judge],)).fetchone()[0]
            rng = random.Random(f"{seed}:{judge}:{start}")
            for task_id, position in zip(task_ids, judge_order(len(task_ids), rng)):
                conn.execute("INSERT INTO assignments (task, judge, position) VALUES (?, ?, ?)",
                             (task_id, judges[judge], start + position))
        kinds = {k: sum(t["kind"] == k for t in tasks) for k in KINDS}
        return {"tasks": kinds, "assignments": len(pairs)}

    def extend(self, system: str, records: list[dict], origin: str) -> dict:
        """Add a system to the study: its rewrites of the rated items rated, and compared with the best
        system; nothing judged so far changes."""
        meta = self.meta()
        with self.writing() as conn:
            if conn.execute("SELECT 1 FROM systems WHERE name = ?", (system,)).fetchone():
                raise StudyError(f"the study already has system {system}")
            rated = [(r["recipe"], r["constraint_name"]) for r in
                     conn.execute("SELECT recipe, constraint_name FROM items WHERE rated ORDER BY rowid")]
            have = {(str(r["id"]), str(r.get("constraint") or "")) for r in records}
            covered = [k for k in rated if k in have]
            if not covered:
                raise StudyError(f"{system} rewrote none of the study's {len(rated)} recipes")
            self._add_systems(conn, {system: records}, {system: origin}, covered)
            best = meta.get("best")
            tasks = plan_tasks(covered, [system], None, meta["judges_per_item"], [], 0, meta["seed"])
            if best:
                tasks += [t for t in plan_tasks(covered, [best, system], best, meta["judges_per_item"], [], 0,
                                                meta["seed"]) if t["kind"] == "compare"]
            extensions = meta.get("extensions", 0) + 1
            self._set_meta(conn, extensions=extensions)
            summary = self._add_tasks(conn, tasks, meta["seed"] + extensions)
        return {**summary, "system": system, "items": len(covered), "missing": len(rated) - len(covered)}

    def add_judges(self, names: list[str], rebalance: bool) -> dict:
        """New judges; with `rebalance`, unstarted assignments move to them until their open loads
        reach the others'."""
        moved = 0
        with self.writing() as conn:
            self._add_judges(conn, names)
            if rebalance:
                moved = self._rebalance(conn, names)
        return {"judges": names, "moved": moved}

    @staticmethod
    def _rebalance(conn, names: list[str]) -> int:
        """Move unstarted assignments from the judge with the most open tasks to the new judge with the
        fewest (never a task the receiver already holds) until those differ by at most one."""
        new = {r[0] for r in conn.execute(f"SELECT id FROM judges WHERE name IN ({','.join('?' * len(names))})",
                                          names)}
        moved = 0
        while True:
            open_load = {r["id"]: r["n"] for r in conn.execute(
                "SELECT j.id, COUNT(a.id) AS n FROM judges j LEFT JOIN assignments a ON a.judge = j.id "
                "AND a.finished_at IS NULL GROUP BY j.id")}
            givers = [j for j in open_load if j not in new]
            if not givers or not new:
                return moved
            high = max(givers, key=lambda j: (open_load[j], -j))
            low = min(new, key=lambda j: (open_load[j], j))
            if open_load[high] - open_load[low] <= 1:
                return moved
            row = conn.execute(
                "SELECT a.id FROM assignments a WHERE a.judge = ? AND a.started_at IS NULL AND a.task NOT IN "
                "(SELECT task FROM assignments WHERE judge = ?) ORDER BY a.position DESC LIMIT 1",
                (high, low)).fetchone()
            if row is None:
                return moved
            position = conn.execute("SELECT COALESCE(MAX(position) + 1, 0) FROM assignments WHERE judge = ?",
                                    (low,)).fetchone()[0]
            conn.execute("UPDATE assignments SET judge = ?, position = ? WHERE id = ?", (low, position, row["id"]))
            moved += 1

    # --- what the web app asks --------------------------------------------------------------------
    def judge_of(self, token: str) -> dict | None:
        """The judge holding this token, or None."""
        with self.connection() as conn:
            row = conn.execute("SELECT id, name FROM judges WHERE token = ?", (token,)).fetchone()
        return dict(row) if row else None

    def judges(self) -> list[dict]:
        """Every judge's name and token, in the order they joined."""
        with self.connection() as conn:
            return [dict(r) for r in conn.execute("SELECT id, name, token FROM judges ORDER BY id")]

    def next_task(self, judge_id: int) -> dict | None:
        """The judge's first unfinished task (marked started now, once) with its saved answers and the
        recipes to show, or None when all are done."""
        with self.writing() as conn:
            row = conn.execute(
                "SELECT a.id AS assignment, a.started_at, t.* FROM assignments a JOIN tasks t ON t.id = a.task "
                "WHERE a.judge = ? AND a.finished_at IS NULL ORDER BY a.position LIMIT 1", (judge_id,)).fetchone()
            if row is None:
                return None
            if row["started_at"] is None:
                conn.execute("UPDATE assignments SET started_at = ? WHERE id = ?", (time.time(), row["assignment"]))
            answers = {r["question"]: json.loads(r["value"]) for r in
                       conn.execute("SELECT question, value FROM answers WHERE assignment = ?", (row["assignment"],))}
            key = (row["recipe"], row["constraint_name"])
            source = json.loads(conn.execute("SELECT source FROM items WHERE recipe = ? AND constraint_name = ?",
                                             key).fetchone()[0])
            shown = []
            for system in (row["system"], row["other"]):
                if system is not None:
                    record = conn.execute("SELECT record FROM rewrites WHERE recipe = ? AND constraint_name = ? "
                                          "AND system = ?", (*key, system)).fetchone()[0]
                    shown.append(json.loads(record)["rewrite"])
        return {"id": row["id"], "kind": row["kind"], "constraint": row["constraint_name"], "source": source,
                "rewrites": shown, "answers": answers}

    def progress(self, judge_id: int | None = None) -> list[dict]:
        """Per judge: tasks assigned and finished."""
        where = "WHERE j.id = ?" if judge_id is not None else ""
        with self.connection() as conn:
            return [dict(r) for r in conn.execute(
                f"SELECT j.name, COUNT(a.id) AS assigned, COUNT(a.finished_at) AS done FROM judges j "
                f"LEFT JOIN assignments a ON a.judge = j.id {where} GROUP BY j.id ORDER BY j.id",
                () if judge_id is None else (judge_id,))]

    def _assignment(self, conn, judge_id: int, task_id: int) -> sqlite3.Row:
        row = conn.execute("SELECT a.id, a.finished_at, t.kind, t.constraint_name FROM assignments a JOIN tasks t ON t.id = a.task "
                           "WHERE a.task = ? AND a.judge = ?", (task_id, judge_id)).fetchone()
        if row is None:
            raise AnswerError(403, f"task {task_id} is not assigned to you")
        if row["finished_at"] is not None:
            raise AnswerError(409, f"task {task_id} is finished; its answers are final")
        return row

    def answer(self, judge_id: int, task_id: int, question: str, value, max_chars: int) -> tuple[object, str]:
        """Save one answer of an unfinished task (a second answer to the same question replaces it);
        the value as stored and the task's constraint."""
        with self.writing() as conn:
            row = self._assignment(conn, judge_id, task_id)
            stored = checked_answer(row["kind"], question, value, max_chars)
            conn.execute("INSERT INTO answers VALUES (?, ?, ?, ?) ON CONFLICT(assignment, question) DO UPDATE "
                         "SET value = excluded.value, answered_at = excluded.answered_at",
                         (row["id"], question, json.dumps(stored), time.time()))
        return stored, row["constraint_name"]

    def finish(self, judge_id: int, task_id: int) -> None:
        """Close a task whose every question is answered; its answers are final from now on."""
        with self.writing() as conn:
            row = self._assignment(conn, judge_id, task_id)
            have = {r[0] for r in conn.execute("SELECT question FROM answers WHERE assignment = ?", (row["id"],))}
            missing = [q for q in REQUIRED[row["kind"]] if q not in have]
            if missing:
                raise AnswerError(422, f"task {task_id} still needs: {', '.join(missing)}")
            conn.execute("UPDATE assignments SET finished_at = ?, started_at = COALESCE(started_at, ?) WHERE id = ?",
                         (time.time(), time.time(), row["id"]))

    # --- what the report and the exports read -----------------------------------------------------
    def judgments(self) -> list[dict]:
        """Every answer of every finished task, with its task and judge (systems as stored, unblinded)."""
        with self.connection() as conn:
            return [dict(r) | {"value": json.loads(r["value"])} for r in conn.execute(
                "SELECT t.id AS task, t.kind, t.recipe, t.constraint_name AS \"constraint\", t.system, t.other, "
                "j.name AS judge, n.question, n.value, a.started_at, a.finished_at FROM answers n "
                "JOIN assignments a ON a.id = n.assignment JOIN tasks t ON t.id = a.task "
                "JOIN judges j ON j.id = a.judge WHERE a.finished_at IS NOT NULL ORDER BY t.id, j.id, n.question")]

    def assignments(self) -> list[dict]:
        """Every assignment: judge, task kind, done or not, seconds from first shown to finished."""
        with self.connection() as conn:
            return [dict(r) for r in conn.execute(
                "SELECT j.name AS judge, t.kind, t.id AS task, a.finished_at IS NOT NULL AS done, "
                "a.finished_at - a.started_at AS seconds FROM assignments a JOIN judges j ON j.id = a.judge "
                "JOIN tasks t ON t.id = a.task ORDER BY a.id")]

    def systems(self) -> list[str]:
        """The study's systems in the order they were added."""
        with self.connection() as conn:
            return [r[0] for r in conn.execute("SELECT name FROM systems ORDER BY added_at, rowid")]

    def human_records(self) -> list[dict]:
        """Finished hand rewrites as rewrites.jsonl records of system `human`."""
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT t.recipe, t.constraint_name, i.source, n.value, j.name FROM answers n "
                "JOIN assignments a ON a.id = n.assignment JOIN tasks t ON t.id = a.task "
                "JOIN items i ON i.recipe = t.recipe AND i.constraint_name = t.constraint_name "
                "JOIN judges j ON j.id = a.judge WHERE t.kind = 'rewrite' AND a.finished_at IS NOT NULL "
                "ORDER BY t.id, j.id").fetchall()
        return [{"id": r["recipe"], "constraint": r["constraint_name"], "system": "human", "constrained": False,
                 "source": json.loads(r["source"]), "rewrite": json.loads(r["value"]), "steps": [],
                 "substitutions": [], "notes": [f"rewritten by hand by {r['name']}"]} for r in rows]

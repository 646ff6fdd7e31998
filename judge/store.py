"""The study in one SQLite file: recipes, judges, tasks, assignments and every answer.

WAL mode, one short transaction per answer (`BEGIN IMMEDIATE`, so concurrent judges queue instead
of failing), and an answer keyed by (assignment, question): a replay can never store it twice.
`migrate` brings any older file up to `SCHEMA_VERSION`, one script per version.

Judges see a task only by its random handle, never its row id (ids follow the plan, system by
system). Tokens are kept only as hashes, in a folder and file only their owner can read; a token
is shown once, when it is made (`create`, `add_judges`, `rotate`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import queue
import random
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rrt.evaluation.human import (
    CHOICES,
    COOKABLE,
    KINDS,
    QUESTIONS,
    RATING_RANGE,
    RUBRIC_VERSION,
    STEP_MARKS,
    assign,
    judge_order,
    plan_tasks,
)
from rrt.recipes.clean import clean_lines, clean_text

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
    # 2: opaque task handles, token hashes (plain tokens go), revocation, and the page's save order.
    """
    ALTER TABLE tasks ADD COLUMN handle TEXT;
    UPDATE tasks SET handle = lower(hex(randomblob(12)));
    CREATE UNIQUE INDEX tasks_by_handle ON tasks (handle);
    UPDATE judges SET token = token_hash(token);
    ALTER TABLE judges RENAME COLUMN token TO token_hash;
    ALTER TABLE judges ADD COLUMN revoked_at REAL;
    INSERT INTO meta SELECT 'admin_token_hash', json_quote(token_hash(json_extract(value, '$'))) FROM meta
        WHERE key = 'admin_token';
    DELETE FROM meta WHERE key = 'admin_token';
    ALTER TABLE answers ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
    """,
    # 3: step marks and cookable (rubric 1) are answers of a rating task like the ratings; each answer
    # records where it came from (the site, or an imported answers file) and the rubric it was given
    # under, and each imported file is listed once it is stored.
    """
    ALTER TABLE answers ADD COLUMN origin TEXT NOT NULL DEFAULT 'site';
    ALTER TABLE answers ADD COLUMN rubric TEXT;
    CREATE TABLE imports (id INTEGER PRIMARY KEY, sha256 TEXT NOT NULL, name TEXT NOT NULL,
                          judge TEXT NOT NULL, rows INTEGER NOT NULL, stored INTEGER NOT NULL,
                          imported_at REAL NOT NULL);
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)
# Connections one study holds at most: the web app's worker threads share them, so a long study
# keeps a fixed number of file descriptors however many threads come and go.
POOL_SIZE = 8
POOL_WAIT_S = 30
BUSY_S = 30  # how long a write waits on another writer before the web app answers 503
HANDLE_BYTES = 12


class StudyError(ValueError):
    """A study that cannot be created, opened or changed as asked (one line)."""


class StudyBusy(RuntimeError):
    """The study file stayed locked, or every connection busy, past the wait: a 503 for the web app."""


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
        raise StudyError(
            f"the study file has schema {before}; this rrt reads up to {SCHEMA_VERSION}: upgrade rrt"
        )
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


def token_hash(token: str) -> str:
    """What the study keeps of a token: its SHA-256, hex."""
    # Unsalted on purpose: a token is 144 random bits, out of any guessing's reach, and the lookup
    # by hash must be deterministic.
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A fresh judge or admin token (URL-safe, 144 random bits)."""
    return secrets.token_urlsafe(18)


def new_handle() -> str:
    """A task's opaque handle, the only name a judge sees for it."""
    return secrets.token_hex(HANDLE_BYTES)


def is_handle(text: str) -> bool:
    """True for text shaped like a task handle (anything else names no task)."""
    return len(text) == 2 * HANDLE_BYTES and all(c in "0123456789abcdef" for c in text)


def private_file(path: str) -> None:
    """Create `path` (if missing) readable and writable by its owner only, and tighten it if it is not."""
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    os.chmod(path, 0o600)


def connect(path: str, busy_s: float = BUSY_S) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL, waiting on busy writers."""
    conn = sqlite3.connect(path, timeout=busy_s, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.create_function("token_hash", 1, token_hash, deterministic=True)
    conn.execute("PRAGMA journal_mode=WAL")
    # In WAL mode NORMAL still survives a crash of the app (a commit is in the log before it returns);
    # only a power cut can take the last commits, and it spares an fsync per answer.
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute(f"PRAGMA busy_timeout={int(busy_s * 1000)}")
    # What is deleted or replaced (a plain token migrated to its hash) is overwritten, not left in free pages.
    conn.execute("PRAGMA secure_delete=ON")
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
        raise AnswerError(
            422, 'a rewrite is {"title": text, "ingredients": [lines], "steps": [lines]}'
        )
    title, ingredients, steps = value["title"], value["ingredients"], value["steps"]
    if not isinstance(title, str) or not all(
        isinstance(x, list) and all(isinstance(s, str) for s in x) for x in (ingredients, steps)
    ):
        raise AnswerError(
            422, "a rewrite's title is text and its ingredients and steps are lists of text"
        )
    if len(json.dumps(value)) > max_chars:
        raise AnswerError(413, f"a rewrite is at most {max_chars} characters")
    # Cleaned as the loaders clean input: a pasted format token ("<endofings>") or markup would pass
    # into the exported `human` system and skew what it is scored on.
    return {
        "title": clean_text(title),
        "ingredients": clean_lines(ingredients),
        "steps": clean_lines(steps),
    }


def is_empty_rewrite(value: dict) -> bool:
    """True for a hand rewrite without a title, an ingredient line or a step: it cannot be finished."""
    return not (value.get("title") and value.get("ingredients") and value.get("steps"))


def step_marks_value(value, steps: int | None) -> list:
    """One mark per rewritten step (None: not marked yet), or an AnswerError."""
    if not isinstance(value, list) or not all(
        m is None or (isinstance(m, str) and m in STEP_MARKS) for m in value
    ):
        raise AnswerError(
            422, f"step_marks is a list with one of {', '.join(STEP_MARKS)} per rewritten step"
        )
    if steps is not None and len(value) != steps:
        raise AnswerError(
            422, f"step_marks needs one mark per rewritten step: {steps} (got {len(value)})"
        )
    return value


def checked_answer(kind: str, question: str, value, max_chars: int, steps: int | None = None):
    """The value to store for one answer to a task of `kind` (`steps`: how many steps the rated
    rewrite has), or an AnswerError."""
    if kind == "rate":
        if question == "cookable":
            if value not in COOKABLE:
                raise AnswerError(422, f"cookable is yes or no (got {value!r})")
            return value
        if question == "step_marks":
            return step_marks_value(value, steps)
        if question not in QUESTIONS:
            raise AnswerError(
                422,
                f"a rating task asks {', '.join(QUESTIONS)}, cookable and step_marks (got {question!r})",
            )
        return rating_value(value)
    if kind == "compare":
        if question != "choice" or value not in CHOICES:
            raise AnswerError(
                422,
                f"a head-to-head task takes choice: {', '.join(CHOICES)} (got {question}={value!r})",
            )
        return value
    if question != "rewrite":
        raise AnswerError(422, f"a rewrite task takes rewrite (got {question!r})")
    return rewrite_value(value, max_chars)


# What the site needs before a task can finish: step marks and cookable are asked with the ratings
# but optional there (studies from before rubric 1 finish without them); an import needs them all.
REQUIRED = {"rate": list(QUESTIONS), "compare": ["choice"], "rewrite": ["rewrite"]}
IMPORT_REQUIRED = {**REQUIRED, "rate": [*QUESTIONS, "cookable", "step_marks"]}


class _Rollback(Exception):
    """Raised inside a transaction to undo it (a dry run)."""


class ImportRefused(StudyError):
    """An answers file with bad rows: `errors` holds (row, reason) for each; nothing was stored."""

    def __init__(self, errors: list[tuple[int, str]]):
        super().__init__(f"{len(errors)} bad row(s); nothing imported")
        self.errors = errors


class Study:
    """One study file: what the CLI creates and extends and what the web app reads and writes."""

    def __init__(self, folder: str, create: bool = False, busy_s: float = BUSY_S):
        self.folder, self.busy_s = folder, busy_s
        self.path = os.path.join(folder, DB_FILE)
        self._local, self._lock, self._opened = threading.local(), threading.Lock(), []
        self._idle: queue.LifoQueue = queue.LifoQueue()
        if not create and not os.path.isfile(self.path):
            raise StudyError(
                f"no study in {folder} (no {DB_FILE}): create one with rrt judge create"
            )
        if create:
            # Private: the file holds the judges' answers and token hashes.
            os.makedirs(folder, mode=0o700, exist_ok=True)
        try:
            private_file(self.path)
            with self.connection() as conn:
                migrate(conn)
        except sqlite3.DatabaseError as err:
            self.close()
            raise StudyError(f"{self.path} is not a study database: {err}") from None
        except PermissionError as err:
            self.close()
            raise StudyError(f"cannot open {self.path}: {err.strerror}") from None
        except StudyError:
            self.close()
            raise

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """A connection from the study's bounded pool, this thread's alone until the block ends (a
        nested block reuses it). Connections stay open: the last one to close checkpoints the log."""
        held = getattr(self._local, "conn", None)
        if held is not None:
            yield held
            return
        conn = self._take()
        self._local.conn = conn
        try:
            yield conn
        finally:
            self._local.conn = None
            self._idle.put(conn)

    def _take(self) -> sqlite3.Connection:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            if len(self._opened) < POOL_SIZE:
                conn = connect(self.path, self.busy_s)
                self._opened.append(conn)
                return conn
        try:
            return self._idle.get(timeout=POOL_WAIT_S)
        except queue.Empty:
            raise StudyBusy(
                f"every connection to {self.path} stayed busy for {POOL_WAIT_S}s"
            ) from None

    def open_connections(self) -> int:
        """How many connections the study holds open now."""
        with self._lock:
            return len(self._opened)

    def close(self) -> None:
        """Close every connection this study opened."""
        with self._lock:
            for conn in self._opened:
                conn.close()
            self._opened.clear()
        self._idle = queue.LifoQueue()
        self._local = threading.local()

    @contextmanager
    def writing(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once so concurrent writers queue on the busy timeout."""
        with self.connection() as conn:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as err:
                if "locked" in str(err) or "busy" in str(err):
                    raise StudyBusy(f"{self.path} stayed locked past the busy timeout") from None
                raise
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
            return {
                r["key"]: json.loads(r["value"])
                for r in conn.execute("SELECT key, value FROM meta")
            }

    @staticmethod
    def _set_meta(conn: sqlite3.Connection, **values) -> None:
        for key, value in values.items():
            conn.execute(
                "INSERT INTO meta VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, json.dumps(value)),
            )

    def is_empty(self) -> bool:
        """True before the first system is added."""
        with self.connection() as conn:
            return conn.execute("SELECT COUNT(*) FROM systems").fetchone()[0] == 0

    # --- creating and extending -------------------------------------------------------------------
    def populate(
        self,
        records_by_system: dict[str, list[dict]],
        origins: dict[str, str],
        rated: list[tuple[str, str]],
        rewritten: list[tuple[str, str]],
        judges: list[str],
        *,
        best: str | None,
        judges_per_item: int,
        rewriters_per_item: int,
        majority: int,
        seed: int,
        settings: dict,
    ) -> dict:
        """Fill a new study: items, rewrites, judges, tasks and their blind, balanced assignments; the
        summary carries the judges' and the admin's tokens, which the study never shows again."""
        sources = {}
        for records in records_by_system.values():
            for record in records:
                sources.setdefault(
                    (str(record["id"]), str(record.get("constraint") or "")), record["source"]
                )
        with self.writing() as conn:
            admin_token = new_token()
            self._set_meta(
                conn,
                seed=seed,
                best=best,
                judges_per_item=judges_per_item,
                majority=majority,
                rewriters_per_item=rewriters_per_item,
                admin_token_hash=token_hash(admin_token),
                created_at=time.time(),
                settings=settings,
                extensions=0,
            )
            rated_set, rewritten_set = set(rated), set(rewritten)
            for key in dict.fromkeys(rated + rewritten):
                conn.execute(
                    "INSERT INTO items VALUES (?, ?, ?, ?, ?)",
                    (*key, json.dumps(sources[key]), key in rated_set, key in rewritten_set),
                )
            tokens = self._add_judges(conn, judges)
            self._add_systems(conn, records_by_system, origins, rated)
            tasks = plan_tasks(
                rated,
                list(records_by_system),
                best,
                judges_per_item,
                rewritten,
                rewriters_per_item,
                seed,
            )
            summary = self._add_tasks(conn, tasks, seed)
        return {**summary, "tokens": tokens, "admin_token": admin_token}

    @staticmethod
    def _add_systems(
        conn, records_by_system: dict[str, list[dict]], origins: dict[str, str], rated
    ) -> None:
        wanted = set(rated)
        for system, records in records_by_system.items():
            conn.execute(
                "INSERT INTO systems VALUES (?, ?, ?)",
                (system, origins.get(system, ""), time.time()),
            )
            for record in records:
                key = (str(record["id"]), str(record.get("constraint") or ""))
                if key in wanted:
                    conn.execute(
                        "INSERT OR IGNORE INTO rewrites VALUES (?, ?, ?, ?)",
                        (*key, system, json.dumps(record)),
                    )

    @staticmethod
    def _add_judges(conn, names: list[str]) -> dict[str, str]:
        """Insert judges; their tokens by name."""
        taken = {r[0] for r in conn.execute("SELECT name FROM judges")}
        clash = [n for n in names if n in taken]
        if clash:
            raise StudyError(f"the study already has judge(s) {', '.join(clash)}")
        tokens = {name: new_token() for name in names}
        for name, token in tokens.items():
            conn.execute(
                "INSERT INTO judges (name, token_hash, added_at) VALUES (?, ?, ?)",
                (name, token_hash(token), time.time()),
            )
        return tokens

    def _add_tasks(self, conn, tasks: list[dict], seed: int) -> dict:
        """Insert tasks, assign them to the least-loaded judges and put each judge's new tasks in a
        random order after the ones they already have."""
        judges = {r["name"]: r["id"] for r in conn.execute("SELECT id, name FROM judges")}
        load = {
            r["name"]: r["n"]
            for r in conn.execute(
                "SELECT j.name, COUNT(a.id) AS n FROM judges j LEFT JOIN assignments a ON a.judge = j.id GROUP BY j.id"
            )
        }
        seen: dict[str, set] = {}
        for r in conn.execute(
            "SELECT j.name, t.recipe, t.constraint_name FROM assignments a "
            "JOIN judges j ON j.id = a.judge JOIN tasks t ON t.id = a.task"
        ):
            seen.setdefault(r["name"], set()).add((r["recipe"], r["constraint_name"]))
        try:
            pairs = assign(tasks, sorted(judges), seed, load, seen)
        except ValueError as err:
            raise StudyError(str(err)) from None
        ids = []
        for task in tasks:
            cursor = conn.execute(
                "INSERT INTO tasks (kind, recipe, constraint_name, system, other, judges, handle) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    task["kind"],
                    task["recipe"],
                    task["constraint"],
                    task["system"],
                    task["other"],
                    task["judges"],
                    new_handle(),
                ),
            )
            ids.append(cursor.lastrowid)
        by_judge: dict[str, list[int]] = {}
        for index, judge in pairs:
            by_judge.setdefault(judge, []).append(ids[index])
        for judge, task_ids in sorted(by_judge.items()):
            start = conn.execute(
                "SELECT COALESCE(MAX(position) + 1, 0) FROM assignments WHERE judge = ?",
                (judges[judge],),
            ).fetchone()[0]
            rng = random.Random(f"{seed}:{judge}:{start}")
            for task_id, position in zip(task_ids, judge_order(len(task_ids), rng)):
                conn.execute(
                    "INSERT INTO assignments (task, judge, position) VALUES (?, ?, ?)",
                    (task_id, judges[judge], start + position),
                )
        kinds = {k: sum(t["kind"] == k for t in tasks) for k in KINDS}
        return {"tasks": kinds, "assignments": len(pairs)}

    def extend(self, system: str, records: list[dict], origin: str) -> dict:
        """Add a system to the study: its rewrites of the rated items rated, and compared with the best
        system; nothing judged so far changes."""
        meta = self.meta()
        with self.writing() as conn:
            if conn.execute("SELECT 1 FROM systems WHERE name = ?", (system,)).fetchone():
                raise StudyError(f"the study already has system {system}")
            rated = [
                (r["recipe"], r["constraint_name"])
                for r in conn.execute(
                    "SELECT recipe, constraint_name FROM items WHERE rated ORDER BY rowid"
                )
            ]
            have = {(str(r["id"]), str(r.get("constraint") or "")) for r in records}
            covered = [k for k in rated if k in have]
            if not covered:
                raise StudyError(f"{system} rewrote none of the study's {len(rated)} recipes")
            self._add_systems(conn, {system: records}, {system: origin}, covered)
            best = meta.get("best")
            tasks = plan_tasks(
                covered, [system], None, meta["judges_per_item"], [], 0, meta["seed"]
            )
            if best:
                tasks += [
                    t
                    for t in plan_tasks(
                        covered, [best, system], best, meta["judges_per_item"], [], 0, meta["seed"]
                    )
                    if t["kind"] == "compare"
                ]
            extensions = meta.get("extensions", 0) + 1
            self._set_meta(conn, extensions=extensions)
            summary = self._add_tasks(conn, tasks, meta["seed"] + extensions)
        return {
            **summary,
            "system": system,
            "items": len(covered),
            "missing": len(rated) - len(covered),
        }

    def add_judges(self, names: list[str], rebalance: bool) -> dict:
        """New judges; with `rebalance`, unstarted assignments move to them until their open loads
        reach the others'."""
        moved = 0
        with self.writing() as conn:
            tokens = self._add_judges(conn, names)
            if rebalance:
                moved = self._rebalance(conn, names)
        return {"judges": names, "moved": moved, "tokens": tokens}

    def rotate(self, name: str) -> str:
        """A new token for judge `name` (the old one stops working, a revoked judge is back); the token."""
        token = new_token()
        with self.writing() as conn:
            if not conn.execute(
                "UPDATE judges SET token_hash = ?, revoked_at = NULL WHERE name = ?",
                (token_hash(token), name),
            ).rowcount:
                raise StudyError(f"the study has no judge {name}")
        return token

    def revoke(self, name: str) -> None:
        """Judge `name`'s token stops working; their answers stay, and `rotate` lets them back."""
        with self.writing() as conn:
            # A random hash no token maps to keeps the column unique and non-null.
            if not conn.execute(
                "UPDATE judges SET token_hash = ?, revoked_at = ? WHERE name = ?",
                (f"revoked:{new_handle()}", time.time(), name),
            ).rowcount:
                raise StudyError(f"the study has no judge {name}")

    def rotate_admin(self) -> str:
        """A new admin token (the old one stops working); the token."""
        token = new_token()
        with self.writing() as conn:
            self._set_meta(conn, admin_token_hash=token_hash(token))
        return token

    def is_admin(self, token: str) -> bool:
        """True for the admin token."""
        return hmac.compare_digest(token_hash(token), self.meta().get("admin_token_hash", ""))

    @staticmethod
    def _rebalance(conn, names: list[str]) -> int:
        """Move unstarted assignments from the judge with the most open tasks to the new judge with the
        fewest (never a task the receiver already holds) until those differ by at most one."""
        new = {
            r[0]
            for r in conn.execute(
                f"SELECT id FROM judges WHERE name IN ({','.join('?' * len(names))})", names
            )
        }
        moved = 0
        while True:
            open_load = {
                r["id"]: r["n"]
                for r in conn.execute(
                    "SELECT j.id, COUNT(a.id) AS n FROM judges j LEFT JOIN assignments a ON a.judge = j.id "
                    "AND a.finished_at IS NULL GROUP BY j.id"
                )
            }
            givers = [j for j in open_load if j not in new]
            if not givers or not new:
                return moved
            high = max(givers, key=lambda j: (open_load[j], -j))
            low = min(new, key=lambda j: (open_load[j], j))
            if open_load[high] - open_load[low] <= 1:
                return moved
            row = conn.execute(
                "SELECT a.id FROM assignments a WHERE a.judge = ? AND a.started_at IS NULL AND a.task NOT IN "
                "(SELECT task FROM assignments WHERE judge = ?) AND NOT EXISTS "
                "(SELECT 1 FROM answers WHERE assignment = a.id) ORDER BY a.position DESC LIMIT 1",
                (high, low),
            ).fetchone()
            if row is None:
                return moved
            position = conn.execute(
                "SELECT COALESCE(MAX(position) + 1, 0) FROM assignments WHERE judge = ?", (low,)
            ).fetchone()[0]
            conn.execute(
                "UPDATE assignments SET judge = ?, position = ? WHERE id = ?",
                (low, position, row["id"]),
            )
            moved += 1

    # --- what the web app asks --------------------------------------------------------------------
    def judge_of(self, token: str) -> dict | None:
        """The judge holding this token (not revoked), or None."""
        with self.connection() as conn:
            row = conn.execute(
                "SELECT id, name FROM judges WHERE token_hash = ? AND revoked_at IS NULL",
                (token_hash(token),),
            ).fetchone()
        return dict(row) if row else None

    def judges(self) -> list[dict]:
        """Every judge's id, name and whether revoked, in the order they joined (tokens are not kept)."""
        with self.connection() as conn:
            return [
                dict(r)
                for r in conn.execute(
                    "SELECT id, name, revoked_at IS NOT NULL AS revoked FROM judges ORDER BY id"
                )
            ]

    def next_task(self, judge_id: int) -> dict | None:
        """The judge's first unfinished task (marked started now, once) with its saved answers and the
        recipes to show, named by its handle, or None when all are done."""
        with self.writing() as conn:
            row = conn.execute(
                "SELECT a.id AS assignment, a.started_at, t.* FROM assignments a JOIN tasks t ON t.id = a.task "
                "WHERE a.judge = ? AND a.finished_at IS NULL ORDER BY a.position LIMIT 1",
                (judge_id,),
            ).fetchone()
            if row is None:
                return None
            if row["started_at"] is None:
                conn.execute(
                    "UPDATE assignments SET started_at = ? WHERE id = ?",
                    (time.time(), row["assignment"]),
                )
            answers = {
                r["question"]: json.loads(r["value"])
                for r in conn.execute(
                    "SELECT question, value FROM answers WHERE assignment = ?", (row["assignment"],)
                )
            }
            source, shown = self._recipes(conn, row)
        return {
            "id": row["handle"],
            "kind": row["kind"],
            "constraint": row["constraint_name"],
            "source": source,
            "rewrites": shown,
            "answers": answers,
        }

    @staticmethod
    def _recipes(conn, task) -> tuple[dict, list[dict]]:
        """A task's source recipe and the rewrites it shows, left then right (no system name)."""
        key = (task["recipe"], task["constraint_name"])
        source = json.loads(
            conn.execute(
                "SELECT source FROM items WHERE recipe = ? AND constraint_name = ?", key
            ).fetchone()[0]
        )
        shown = []
        for system in (task["system"], task["other"]):
            if system is not None:
                record = conn.execute(
                    "SELECT record FROM rewrites WHERE recipe = ? AND constraint_name = ? "
                    "AND system = ?",
                    (*key, system),
                ).fetchone()[0]
                shown.append(json.loads(record)["rewrite"])
        return source, shown

    def _steps(self, conn, task) -> int | None:
        """How many steps the rewrite a rating task shows has (None for other kinds)."""
        if task["kind"] != "rate":
            return None
        return len(self._recipes(conn, task)[1][0].get("steps") or [])

    def open_tasks(self, judge: str) -> list[dict]:
        """A judge's unfinished tasks in their own order, as a packet shows them: handle, kind,
        constraint, source and rewrites (left then right), never a system name."""
        with self.connection() as conn:
            if not conn.execute("SELECT 1 FROM judges WHERE name = ?", (judge,)).fetchone():
                raise StudyError(f"the study has no judge {judge}")
            rows = conn.execute(
                "SELECT t.* FROM assignments a JOIN tasks t ON t.id = a.task JOIN judges j "
                "ON j.id = a.judge WHERE j.name = ? AND a.finished_at IS NULL ORDER BY a.position",
                (judge,),
            ).fetchall()
            out = []
            for row in rows:
                source, shown = self._recipes(conn, row)
                out.append(
                    {
                        "handle": row["handle"],
                        "kind": row["kind"],
                        "constraint": row["constraint_name"],
                        "source": source,
                        "rewrites": shown,
                    }
                )
        return out

    def progress(self, judge_id: int | None = None) -> list[dict]:
        """Per judge: tasks assigned and finished."""
        where = "WHERE j.id = ?" if judge_id is not None else ""
        with self.connection() as conn:
            return [
                dict(r)
                for r in conn.execute(
                    f"SELECT j.name, COUNT(a.id) AS assigned, COUNT(a.finished_at) AS done FROM judges j "
                    f"LEFT JOIN assignments a ON a.judge = j.id {where} GROUP BY j.id ORDER BY j.id",
                    () if judge_id is None else (judge_id,),
                )
            ]

    def _assignment(self, conn, judge_id: int, handle: str) -> sqlite3.Row:
        row = conn.execute(
            "SELECT a.id, a.started_at, a.finished_at, t.kind, t.constraint_name, t.recipe, t.system, "
            "t.other FROM assignments a "
            "JOIN tasks t ON t.id = a.task WHERE t.handle = ? AND a.judge = ?",
            (handle, judge_id),
        ).fetchone()
        if row is None:
            raise AnswerError(404, f"task {handle} is not one of your tasks")
        if row["finished_at"] is not None:
            raise AnswerError(409, f"task {handle} is finished; its answers are final")
        if row["started_at"] is None:
            # Only a task that was shown can be answered: an unseen task has no judging time, and
            # an unstarted one may still move to another judge.
            raise AnswerError(
                409, f"task {handle} has not been opened yet; answer the task the page shows"
            )
        return row

    def answer(
        self,
        judge_id: int,
        handle: str,
        question: str,
        value,
        max_chars: int,
        seq: int | None = None,
    ) -> tuple[object, str, bool]:
        """Save one answer of an open task; a second answer to the same question replaces it unless
        its `seq` (the page's save counter) is older than the stored one's. The value as stored now,
        the task's constraint, and whether this answer was applied."""
        with self.writing() as conn:
            row = self._assignment(conn, judge_id, handle)
            steps = self._steps(conn, row) if question == "step_marks" else None
            stored = checked_answer(row["kind"], question, value, max_chars, steps)
            earlier = conn.execute(
                "SELECT value, seq FROM answers WHERE assignment = ? AND question = ?",
                (row["id"], question),
            ).fetchone()
            # Autosaves can arrive out of order; the page numbers them, and the latest sent wins.
            if earlier is not None and seq is not None and seq < earlier["seq"]:
                return json.loads(earlier["value"]), row["constraint_name"], False
            kept_seq = seq if seq is not None else (earlier["seq"] if earlier is not None else 0)
            conn.execute(
                "INSERT INTO answers (assignment, question, value, answered_at, seq, origin, rubric) "
                "VALUES (?, ?, ?, ?, ?, 'site', ?) ON CONFLICT(assignment, question) DO UPDATE "
                "SET value = excluded.value, answered_at = excluded.answered_at, seq = excluded.seq, "
                "origin = excluded.origin, rubric = excluded.rubric",
                (row["id"], question, json.dumps(stored), time.time(), kept_seq, RUBRIC_VERSION),
            )
        return stored, row["constraint_name"], True

    def finish(self, judge_id: int, handle: str) -> None:
        """Close an open task whose every question is answered; its answers are final from now on."""
        with self.writing() as conn:
            row = self._assignment(conn, judge_id, handle)
            have = {
                r[0]: json.loads(r[1])
                for r in conn.execute(
                    "SELECT question, value FROM answers WHERE assignment = ?", (row["id"],)
                )
            }
            missing = [q for q in REQUIRED[row["kind"]] if q not in have]
            if missing:
                raise AnswerError(422, f"task {handle} still needs: {', '.join(missing)}")
            if row["kind"] == "rewrite" and is_empty_rewrite(have["rewrite"]):
                raise AnswerError(
                    422, f"task {handle}'s rewrite needs a title, ingredient lines and steps"
                )
            conn.execute(
                "UPDATE assignments SET finished_at = ? WHERE id = ?", (time.time(), row["id"])
            )

    def import_answers(
        self, rows: list[dict], origin: str, sha256: str, max_chars: int, dry_run: bool = False
    ) -> dict:
        """Store an answers file's rows as if given on the site, all or nothing: rows are {row,
        judge, handle, answers: {question: value}, seconds (or None)}. Every task must be one of its
        judge's rating or head-to-head tasks, with all of IMPORT_REQUIRED. A task already finished
        with the same answers is skipped (a file imported twice stores nothing twice); with other
        answers it is a bad row (answers are final). ImportRefused lists every bad row; `dry_run`
        checks and stores nothing."""
        errors: list[tuple[int, str]] = []
        stored = already = 0
        now = time.time()
        result = {}
        try:
            with self.writing() as conn:
                judges = {r["name"]: r["id"] for r in conn.execute("SELECT id, name FROM judges")}
                for item in rows:
                    try:
                        if item["judge"] not in judges:
                            raise AnswerError(404, f"the study has no judge {item['judge']}")
                        fresh = self._import_row(
                            conn, judges[item["judge"]], item["judge"], item, max_chars
                        )
                    except AnswerError as err:
                        errors.append((item["row"], str(err)))
                        continue
                    if fresh is None:
                        already += 1
                        continue
                    self._store_imported(conn, *fresh, item.get("seconds"), origin, now)
                    stored += 1
                if errors:
                    raise ImportRefused(errors)  # rolls the whole file back
                result = {"rows": len(rows), "stored": stored, "already": already}
                if dry_run:
                    raise _Rollback
                conn.execute(
                    "INSERT INTO imports (sha256, name, judge, rows, stored, imported_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        sha256,
                        origin,
                        ",".join(sorted({r["judge"] for r in rows})),
                        len(rows),
                        stored,
                        now,
                    ),
                )
        except _Rollback:
            pass
        return result

    @staticmethod
    def _store_imported(conn, task, values: dict, seconds, origin: str, now: float) -> None:
        """One imported task's answers, stored and the task finished, as the site would."""
        for question, value in values.items():
            conn.execute(
                "INSERT INTO answers (assignment, question, value, answered_at, seq, origin, "
                "rubric) VALUES (?, ?, ?, ?, 0, ?, ?) ON CONFLICT(assignment, question) DO "
                "UPDATE SET value = excluded.value, answered_at = excluded.answered_at, "
                "origin = excluded.origin, rubric = excluded.rubric",
                (task["id"], question, json.dumps(value), now, origin, RUBRIC_VERSION),
            )
        started = task["started_at"]
        if started is None and seconds is not None:
            started = now - seconds  # the time the answers file says the task took
        conn.execute(
            "UPDATE assignments SET started_at = ?, finished_at = ? WHERE id = ?",
            (started, now, task["id"]),
        )

    def _import_row(self, conn, judge_id: int, judge: str, item: dict, max_chars: int):
        """(assignment row, checked answers) to store for one imported row, None when the task is
        already finished with exactly these answers, or an AnswerError saying what is wrong."""
        handle = item["handle"]
        task = conn.execute(
            "SELECT a.id, a.started_at, a.finished_at, t.kind, t.recipe, t.constraint_name, t.system, "
            "t.other FROM assignments a JOIN tasks t ON t.id = a.task WHERE t.handle = ? AND a.judge = ?",
            (handle, judge_id),
        ).fetchone()
        if task is None:
            known = conn.execute("SELECT 1 FROM tasks WHERE handle = ?", (handle,)).fetchone()
            raise AnswerError(
                404,
                f"task {handle} is not one of {judge}'s tasks"
                if known
                else f"no task {handle!r} in this study",
            )
        if task["kind"] == "rewrite":
            raise AnswerError(422, f"task {handle} is a hand rewrite: those are done on the site")
        answers = item["answers"]
        named = lambda qs: ", ".join("better" if q == "choice" else q for q in qs)
        missing = [q for q in IMPORT_REQUIRED[task["kind"]] if answers.get(q) is None]
        if missing:
            raise AnswerError(422, f"task {handle} needs: {named(missing)}")
        extra = [q for q in answers if q not in IMPORT_REQUIRED[task["kind"]]]
        if extra:
            what = "a rating task" if task["kind"] == "rate" else "a head-to-head task"
            raise AnswerError(422, f"task {handle} is {what}: leave {named(extra)} empty")
        steps = self._steps(conn, task)
        values = {}
        for question, value in answers.items():
            if value is None:
                continue  # a question of the other kind, left blank
            try:
                values[question] = checked_answer(task["kind"], question, value, max_chars, steps)
            except AnswerError as err:
                name = "better" if question == "choice" else question
                said = str(err) if str(err).startswith(name) else f"{name}: {err}"
                raise AnswerError(err.status, f"task {handle}: {said}") from None
        if task["kind"] == "rate" and None in values["step_marks"]:
            unmarked = [str(i + 1) for i, m in enumerate(values["step_marks"]) if m is None]
            raise AnswerError(422, f"task {handle}: step(s) {', '.join(unmarked)} not marked")
        if task["finished_at"] is not None:
            have = {
                r[0]: json.loads(r[1])
                for r in conn.execute(
                    "SELECT question, value FROM answers WHERE assignment = ?", (task["id"],)
                )
            }
            if have == values:
                return None
            raise AnswerError(
                409, f"task {handle} was already finished with other answers; answers are final"
            )
        return task, values

    # --- what the report and the exports read -----------------------------------------------------
    def judgments(self) -> list[dict]:
        """Every answer of every finished task, with its task and judge (systems as stored, unblinded)."""
        with self.connection() as conn:
            return [
                dict(r) | {"value": json.loads(r["value"])}
                for r in conn.execute(
                    'SELECT t.id AS task, t.kind, t.recipe, t.constraint_name AS "constraint", t.system, t.other, '
                    "j.name AS judge, n.question, n.value, n.origin, n.rubric, a.started_at, a.finished_at "
                    "FROM answers n "
                    "JOIN assignments a ON a.id = n.assignment JOIN tasks t ON t.id = a.task "
                    "JOIN judges j ON j.id = a.judge WHERE a.finished_at IS NOT NULL ORDER BY t.id, j.id, n.question"
                )
            ]

    def assignments(self) -> list[dict]:
        """Every assignment: judge, task kind, done or not, seconds from first shown to finished."""
        with self.connection() as conn:
            return [
                dict(r)
                for r in conn.execute(
                    "SELECT j.name AS judge, t.kind, t.id AS task, a.finished_at IS NOT NULL AS done, "
                    "a.finished_at - a.started_at AS seconds FROM assignments a JOIN judges j ON j.id = a.judge "
                    "JOIN tasks t ON t.id = a.task ORDER BY a.id"
                )
            ]

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
                "ORDER BY t.id, j.id"
            ).fetchall()
        records = [
            {
                "id": r["recipe"],
                "constraint": r["constraint_name"],
                "system": "human",
                "constrained": False,
                "source": json.loads(r["source"]),
                "rewrite": json.loads(r["value"]),
                "steps": [],
                "substitutions": [],
                "notes": [f"rewritten by hand by {r['name']}"],
            }
            for r in rows
        ]
        # A study file from before rewrites were checked at finish may hold an empty one: not a system's output.
        return [r for r in records if not is_empty_rewrite(r["rewrite"])]

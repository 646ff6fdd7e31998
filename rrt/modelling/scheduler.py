"""Continuous batching for the rewriter: a recipe joins the running batch at the next step and
leaves it the step it finishes, so the batch stays full while recipes of different lengths come
and go (the service's engine; `Rewriter.rewrite` instead holds a batch until its longest recipe ends).

    scheduler = StepScheduler(rewriter, slots=8)
    scheduler.submit(key, task)                 # any thread
    while scheduler.busy:
        for outcome in scheduler.round():       # one thread: admit, advance every recipe one step
            ...                                 # outcome.record (a rewrites.jsonl line) or outcome.error

A recipe's samples depend on its own seeds only (rrt.modelling.sampling), so it gets the same
rewrite whichever recipes share its rounds. A round that fails is rolled back and each of its
recipes retried alone, so a recipe that breaks the engine fails only itself.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field


@dataclass
class Outcome:
    """A recipe that left the batch: its record, or the error that stopped it, and its rounds."""

    key: Hashable
    record: dict | None = None
    error: BaseException | None = None
    admitted: float = 0.0  # wall clock when it joined the batch
    rounds: int = 0
    batch_sizes: list[int] = field(default_factory=list)  # recipes in each of its rounds

    @property
    def mean_batch(self) -> float:
        """The mean number of recipes its rounds advanced together."""
        return round(sum(self.batch_sizes) / len(self.batch_sizes), 2) if self.batch_sizes else 0.0


@dataclass
class _Live:
    key: Hashable
    state: object
    outcome: Outcome


def _snapshot(state):
    """A copy of a recipe's state that a failed round can be undone to."""
    saved = copy.copy(state)
    saved.entries, saved.done, saved.notes = (
        list(state.entries),
        list(state.done),
        list(state.notes),
    )
    saved.rewritten = dict(state.rewritten)
    return saved


def _restore(state, saved) -> None:
    state.__dict__.update(saved.__dict__)


class StepScheduler:
    """Recipes advanced together one step per round, at most `slots` at a time, joining and
    leaving between rounds; `submit` and `cancel` may be called from any thread, `round` from one."""

    def __init__(self, rewriter, slots: int):
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        self.rewriter, self.slots = rewriter, slots
        self._pending: deque = deque()
        self._live: list[_Live] = []
        self._lock = threading.Lock()

    @property
    def busy(self) -> bool:
        """Whether any recipe waits or is part-way."""
        with self._lock:
            return bool(self._pending or self._live)

    @property
    def waiting(self) -> int:
        """Recipes submitted but not yet in the batch."""
        with self._lock:
            return len(self._pending)

    def submit(self, key: Hashable, task) -> None:
        """Queue a recipe (a RewriteTask); it joins the batch at the next round with a free slot."""
        with self._lock:
            self._pending.append((key, task))

    def cancel(self, keep: Callable[[Hashable], bool]) -> list[Hashable]:
        """Drop every waiting or part-way recipe whose key `keep` refuses; their keys, in order.
        Call it between rounds (from the thread that runs them)."""
        with self._lock:
            dropped = [key for key, _ in self._pending if not keep(key)]
            self._pending = deque((key, task) for key, task in self._pending if keep(key))
            gone = [live for live in self._live if not keep(live.key)]
            self._live = [live for live in self._live if keep(live.key)]
        return dropped + [live.key for live in gone]

    def _admit(self) -> list[Outcome]:
        failed = []
        while True:
            with self._lock:
                if len(self._live) >= self.slots or not self._pending:
                    return failed
                key, task = self._pending.popleft()
            outcome = Outcome(key, admitted=time.time())
            try:
                state = self.rewriter.start(task)
            except Exception as err:  # noqa: BLE001 - this recipe fails alone
                outcome.error = err
                failed.append(outcome)
                continue
            with self._lock:
                self._live.append(_Live(key, state, outcome))

    def _advance(self, batch: list[_Live]) -> list[Outcome]:
        """One step of every recipe of the batch; those that failed. After an error the round is
        undone and each recipe retried alone."""
        saved = [_snapshot(live.state) for live in batch]
        try:
            self.rewriter.advance([live.state for live in batch])
            return []
        except Exception as err:  # noqa: BLE001 - undone below; alone, the recipe fails
            for live, state in zip(batch, saved):
                _restore(live.state, state)
            if len(batch) == 1:
                batch[0].outcome.error = err
                return [batch[0].outcome]
        return [outcome for live in batch for outcome in self._advance([live])]

    def _leave(self, batch: list[_Live], failed: list[_Live]) -> list[Outcome]:
        """The failed recipes and those finished (their records made) leave the batch; their outcomes."""
        out = [live.outcome for live in failed]
        broken = {id(live) for live in failed}
        finished = [live for live in batch if id(live) not in broken and live.state.finished]
        for live in finished:
            try:
                live.outcome.record = self.rewriter.result(live.state)
            except Exception as err:  # noqa: BLE001 - this recipe fails alone
                live.outcome.error = err
            out.append(live.outcome)
        gone = broken | {id(live) for live in finished}
        with self._lock:
            self._live = [live for live in self._live if id(live) not in gone]
        return out

    def round(self) -> list[Outcome]:
        """Admit waiting recipes into free slots, advance every recipe of the batch one step, and
        return those that finished or failed (they leave the batch)."""
        out = self._admit()
        with self._lock:
            batch = list(self._live)
        if batch:
            for live in batch:
                live.outcome.rounds += 1
                live.outcome.batch_sizes.append(len(batch))
            failed = {id(outcome) for outcome in self._advance(batch)}
            out += self._leave(batch, [live for live in batch if id(live.outcome) in failed])
        return out

    def drain(self) -> list[Outcome]:
        """Rounds until nothing waits or is part-way; every outcome, in the order they left."""
        out = []
        while self.busy:
            out += self.round()
        return out


def rewrite_all(rewriter, tasks: list, slots: int) -> list[dict]:
    """Every task rewritten with `slots` recipes in flight, longest first (so no long recipe runs
    its last steps alone); the records in the tasks' order. The first recipe that failed raises."""
    scheduler = StepScheduler(rewriter, slots)
    for index in sorted(range(len(tasks)), key=lambda i: -len(tasks[i].source["steps"])):
        scheduler.submit(index, tasks[index])
    records: list = [None] * len(tasks)
    for outcome in scheduler.drain():
        if outcome.error is not None:
            raise outcome.error
        records[outcome.key] = outcome.record
    return records

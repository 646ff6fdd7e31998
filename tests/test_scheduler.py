"""Continuous batching (rrt.modelling.scheduler) on a tiny random GPT-2: recipes join and leave the
running batch between steps and get the rewrite they get alone."""

from __future__ import annotations

import pytest
from conftest import SAMPLE, make_rewriter, needs_dictionary, sampling, tiny_random_lm

from rrt.modelling.rewriter import RewriteTask
from rrt.modelling.scheduler import StepScheduler, rewrite_all
from rrt.recipes.loaders import read_recipes

pytestmark = needs_dictionary


@pytest.fixture(scope="module")
def tiny():
    """A tokenizer trained on the bundled sample, a 2-layer random GPT-2 and six sample recipes."""
    lm, tok = tiny_random_lm()
    recipes = list(read_recipes([str(SAMPLE)]))
    # Recipes of different lengths, so they finish in different rounds.
    chosen = sorted(recipes[:12], key=lambda r: len(r.steps))[::2][:6]
    tasks = [
        RewriteTask(
            r.id,
            ["vegan"],
            {"title": r.title, "ingredients": list(r.ingredients), "steps": list(r.steps[:5])},
            seed=7,
        )
        for r in chosen
    ]
    return lm, tok, tasks


def _rewriter(tiny, system="contextual"):
    lm, tok, _ = tiny
    return make_rewriter(
        system, lm, tok, 256, sampling(candidates=3, max_new_tokens=6), recipe_tokens=24
    )


def test_recipes_join_a_running_batch_and_get_the_rewrite_they_get_alone(tiny):
    tasks = tiny[2]
    alone = {t.id: _rewriter(tiny).rewrite([t])[0] for t in tasks}
    scheduler = StepScheduler(_rewriter(tiny), slots=3)
    for task in tasks[:2]:
        scheduler.submit(task.id, task)
    outcomes = scheduler.round()
    for task in tasks[2:]:  # arrive while the first two are part-way
        scheduler.submit(task.id, task)
    outcomes += scheduler.drain()
    assert sorted(o.key for o in outcomes) == sorted(alone) and not any(o.error for o in outcomes)
    for outcome in outcomes:
        assert outcome.record == alone[outcome.key]
        assert outcome.rounds == max(1, len(alone[outcome.key]["rewrite"]["steps"]))
        assert max(outcome.batch_sizes) <= 3
    # The late ones shared rounds with the early ones: the batch was topped up, not drained first.
    late = [o for o in outcomes if o.key in {t.id for t in tasks[2:]}]
    assert any(o.batch_sizes[0] > 1 for o in late)
    assert sum(o.mean_batch for o in outcomes) / len(outcomes) > 1.5
    # The job's way: longest first through the slots, records back in the tasks' order.
    assert rewrite_all(_rewriter(tiny), tasks, 2) == [alone[t.id] for t in tasks]


class BreaksAt:
    """A rewriter whose round fails once `broken` reaches its second step, after advancing every
    recipe of the round (so only an undo gets the others back)."""

    def __init__(self, rewriter, broken: str):
        self.rewriter, self.broken = rewriter, broken

    def start(self, task):
        return self.rewriter.start(task)

    def advance(self, states):
        self.rewriter.advance(states)
        if any(s.task.id == self.broken and s.step == 2 for s in states):
            raise RuntimeError("engine failure")

    def result(self, state):
        return self.rewriter.result(state)


def test_a_recipe_that_breaks_the_engine_fails_alone_and_the_round_is_undone(tiny):
    tasks = tiny[2][:3]
    alone = {t.id: _rewriter(tiny).rewrite([t])[0] for t in tasks}
    broken = tasks[1].id
    scheduler = StepScheduler(BreaksAt(_rewriter(tiny), broken), slots=3)
    for task in tasks:
        scheduler.submit(task.id, task)
    outcomes = {o.key: o for o in scheduler.drain()}
    assert isinstance(outcomes[broken].error, RuntimeError) and outcomes[broken].record is None
    for key in set(alone) - {broken}:
        assert outcomes[key].error is None and outcomes[key].record == alone[key]


def test_cancelled_recipes_leave_between_rounds(tiny):
    tasks = tiny[2]
    scheduler = StepScheduler(_rewriter(tiny), slots=2)
    for task in tasks:
        scheduler.submit(task.id, task)
    scheduler.round()
    gone = {tasks[0].id, tasks[-1].id}  # one part-way, one still waiting
    assert sorted(scheduler.cancel(lambda key: key not in gone)) == sorted(gone)
    left = scheduler.drain()
    assert {o.key for o in left} == {t.id for t in tasks} - gone and scheduler.waiting == 0
    with pytest.raises(ValueError):
        StepScheduler(_rewriter(tiny), slots=0)


def test_end_to_end_recipes_finish_in_one_round(tiny):
    tasks = tiny[2][:2]
    scheduler = StepScheduler(_rewriter(tiny, "end_to_end"), slots=4)
    for task in tasks:
        scheduler.submit(task.id, task)
    outcomes = scheduler.round()
    assert len(outcomes) == 2 and all(
        o.rounds == 1 and o.record["steps"][0]["source_step"] is None for o in outcomes
    )
    assert not scheduler.busy

"""Step-level batching (`rewrite.schedule: step`, rrt.modelling.step_decode): each recipe's step on
its own clock gives every candidate the tokens, and every recipe the rewrite, that round-level
batching gives, on tiny random GPT-2 and Llama models on CPU."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SAMPLE, make_rewriter, needs_dictionary, sampling, tiny_random_lm
from test_gpu_paths import PAD, VOCAB, _fake_capture, _gpt2, _llama

from rrt.modelling import static_decode
from rrt.modelling.rewriter import RewriteTask
from rrt.modelling.sampling import SamplingSettings, sample_candidates
from rrt.modelling.scheduler import StepScheduler, rewrite_all
from rrt.modelling.step_decode import SlotSampler
from rrt.recipes.loaders import read_recipes


def _prompts(count: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [list(rng.integers(3, VOCAB, size=int(rng.integers(4, 40)))) for _ in range(count)]


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_prompt_started_in_a_freed_slot_draws_the_tokens_it_draws_alone(family, monkeypatch):
    lm = _gpt2(seed=7) if family == "gpt2" else _llama(seed=7)
    prompts, seeds = _prompts(7, 1), [21 + i for i in range(7)]
    stops = {int(t) for t in np.random.default_rng(2).integers(3, VOCAB, size=40)}
    settings = SamplingSettings(
        top_k=40, top_p=0.9, temperature=1.0, candidates=4, max_new_tokens=24
    )
    alone = {
        i: sample_candidates(lm, [p], [seeds[i]], stops, PAD, settings, decode="host")[0]
        for i, p in enumerate(prompts)
    }
    assert {e for s in alone.values() for e in s.ended} == {"stop", "length"}
    monkeypatch.setattr(
        static_decode, "_capture", _fake_capture
    )  # the graph path, replays run on CPU
    # decode_ahead (CUDA's default): the steps to the next look queued before the ended steps go back.
    for graph, ahead in ((False, False), (True, False), (True, True)):
        sampler = SlotSampler(lm, 3, 64, stops, PAD, settings, "cpu", graph, decode_ahead=ahead)
        waiting, got, part_way = list(range(len(prompts))), {}, 0
        while waiting or sampler.owners:
            # Prompts join whenever a slot is free, beside others already part-way.
            joining, waiting = waiting[: sampler.free], waiting[sampler.free :]
            part_way += len(joining) if sampler.owners else 0
            sampler.start([(i, prompts[i], seeds[i], None, 0) for i in joining])
            got.update(sampler.run())
        assert part_way >= 2 and not sampler.owners and sorted(got) == list(range(len(prompts)))
        # Decoding records no autograd history: the kept buffers would otherwise hold every step's graph.
        assert not any(t.requires_grad for t in (*sampler.decoder.keys, sampler.decoder.logits))
        for i, sampled in got.items():
            assert sampled.tokens == alone[i].tokens, (graph, ahead, i)
            assert sampled.ended == alone[i].ended, (graph, ahead, i)
    with pytest.raises(ValueError, match="does not fit"):
        SlotSampler(lm, 1, 8, stops, PAD, settings, "cpu", False).start(
            [(0, list(range(3, 80)), 1, None, 0)]
        )


@pytest.mark.parametrize("ahead", [False, True])
def test_the_host_looks_at_every_slot_together_on_the_decoders_clock(ahead):
    """Looks fall on multiples of SYNC_EVERY decode steps, or where a slot reaches its last token; the
    slots that ended by then start their next prompts in one prefill."""
    lm, steps = _gpt2(seed=3), 20
    prompts, seeds = _prompts(12, 4), list(range(12))
    stops = {int(t) for t in np.random.default_rng(5).integers(3, VOCAB, size=30)}
    settings = SamplingSettings(
        top_k=40, top_p=1.0, temperature=1.0, candidates=3, max_new_tokens=steps
    )
    sampler = SlotSampler(lm, 4, 64, stops, PAD, settings, "cpu", False, decode_ahead=ahead)
    looks, starts, waiting = [], [], list(range(len(prompts)))
    while waiting or sampler.owners:
        joining, waiting = waiting[: sampler.free], waiting[sampler.free :]
        if joining:
            starts.append(len(joining))
        sampler.start([(i, prompts[i], seeds[i], None, 0) for i in joining])
        if sampler.decoder is not None and not hasattr(sampler.decoder, "looked"):
            ended_slots = sampler.decoder.ended_slots
            sampler.decoder.looked = lambda ended_slots=ended_slots: (
                looks.append((sampler.clock, dict(sampler.ages))) or ended_slots()
            )
            sampler.decoder.ended_slots = sampler.decoder.looked
        sampler.run()
    assert len(looks) > 4 and max(starts) > 1
    for clock, ages in looks:
        assert clock % static_decode.SYNC_EVERY == 0 or steps - 1 in ages.values(), (clock, ages)


@pytest.fixture(scope="module")
def tiny():
    """A tokenizer trained on the bundled sample, a 2-layer random GPT-2 and eight sample recipes."""
    lm, tok = tiny_random_lm()
    recipes = list(read_recipes([str(SAMPLE)]))[:8]
    tasks = [
        RewriteTask(
            r.id,
            ["vegan"],
            {"title": r.title, "ingredients": list(r.ingredients), "steps": list(r.steps[:6])},
            seed=7,
        )
        for r in recipes
    ]
    return lm, tok, tasks


def _rewriter(tiny, schedule: str, system: str = "contextual", **changes):
    lm, tok, _ = tiny
    # contextual_gpt2's next-ingredient model: the same random model.
    rewriter = make_rewriter(
        system,
        lm,
        tok,
        256,
        sampling(candidates=4, max_new_tokens=16),
        **{
            "decode_step": "static",
            "prompt_cache": "shared",
            "schedule": schedule,
            "ing_lm": lm,
            "ing_tokenizer": tok,
            **changes,
        },
    )
    # A random model never draws the real stops: common tokens end candidates at varied lengths.
    stops = rewriter._stop_ids
    rewriter._stop_ids = lambda variant, tokenizer: (
        stops(variant, tokenizer) | set(range(5, 1200, 17))
    )
    return rewriter


@needs_dictionary
@pytest.mark.parametrize(
    "system, reuse_prefix",
    [("contextual", False), ("contextual", True), ("contextual_rule", False), ("no_source", False)],
)
def test_step_level_batching_gives_the_rewrites_of_round_level_in_fewer_decode_steps(
    tiny, system, reuse_prefix
):
    def run(schedule):
        rewriter = _rewriter(tiny, schedule, system, reuse_prefix=reuse_prefix)
        assert rewriter.schedule == schedule
        before = static_decode.STATS["eager_steps"]
        records = rewrite_all(rewriter, tiny[2], 3)
        return records, static_decode.STATS["eager_steps"] - before, rewriter.stats["step_rounds"]

    (rounds, round_steps, none), (steps, step_steps, stepped) = run("round"), run("step")
    assert steps == rounds and none == 0 and stepped > 0
    assert {
        c["ended"] for r in rounds for s in r["steps"] for c in s["candidates"] if "ended" in c
    } == {"stop", "length"}
    # A round waits for its longest step; here a recipe whose candidates ended starts its next step.
    assert step_steps < round_steps


@needs_dictionary
def test_a_failed_step_engine_turns_the_scheduler_to_rounds_and_loses_no_recipe(tiny):
    tasks = tiny[2][:5]
    want = rewrite_all(_rewriter(tiny, "round"), tasks, 2)
    rewriter = _rewriter(tiny, "step")
    real, calls = rewriter.sample_steps, []

    def flaky(sampler, jobs):
        calls.append(len(jobs))
        if len(calls) == 4:
            raise RuntimeError("device lost")
        return real(sampler, jobs)

    rewriter.sample_steps = flaky
    with pytest.warns(UserWarning, match="step-level batching failed"):
        got = rewrite_all(rewriter, tasks, 2)
    assert got == want and len(calls) == 4


@needs_dictionary
def test_a_cancelled_recipe_frees_its_slot(tiny):
    tasks = tiny[2][:4]
    want = {t.id: r for t, r in zip(tasks, rewrite_all(_rewriter(tiny, "round"), tasks, 2))}
    rewriter = _rewriter(tiny, "step")
    scheduler = StepScheduler(rewriter, slots=2)
    for task in tasks:
        scheduler.submit(task.id, task)
    scheduler.round()
    assert scheduler.cancel(lambda key: key != tasks[0].id) == [tasks[0].id]
    left = {o.key: o.record for o in scheduler.drain()}
    assert left == {key: want[key] for key in list(want)[1:]}
    assert not rewriter.slot_sampler(2).owners


def test_step_level_batching_runs_where_the_static_step_does_and_no_guard_is_asked(tiny):
    assert _rewriter(tiny, "step").schedule == "step"
    assert _rewriter(tiny, "step", decode_step="dynamic").schedule == "round"
    assert _rewriter(tiny, "step", constrained=True).schedule == "round"
    lm, tok, _ = tiny
    end_to_end = make_rewriter(
        "end_to_end", lm, tok, 256, sampling(), decode_step="static", schedule="step"
    )
    assert end_to_end.schedule == "round"
    # Its next-ingredient model predicts a whole round's steps in one batch.
    assert _rewriter(tiny, "step", "contextual_gpt2").schedule == "round"


def test_the_rewriters_prompt_cache_is_the_settings_resolved_for_its_model(tiny):
    from rrt.config import load_settings

    assert load_settings().rewrite.prompt_cache == load_settings().serve.prompt_cache == "auto"
    lm, tok, _ = tiny
    for named, held in (
        ("auto", "shared"),
        ("copied", "copied"),
        ("shared", "shared"),
    ):  # tiny: a GPT-2
        assert (
            make_rewriter(
                "contextual", lm, tok, 256, sampling(), decode_step="static", prompt_cache=named
            ).prompt_cache
            == held
        )


@needs_dictionary
def test_the_services_engine_answers_every_request_with_the_round_level_rewrite(tiny):
    """serve.schedule: step through the service's engine thread (the replica without Ray)."""
    import asyncio
    import time

    from serve.app import Rewriter as Replica
    from serve.schema import RewriteRequest

    tasks = tiny[2][:5]
    want = rewrite_all(
        _rewriter(tiny, "round"),
        [RewriteTask("request", t.constraints, t.source, seed=n) for n, t in enumerate(tasks)],
        2,
    )
    rewriter = _rewriter(tiny, "step")
    replica = Replica.__new__(Replica)
    replica._setup(lambda candidates, constrained: rewriter, 2, 0.05)
    replica._answer = lambda outcome: outcome.record

    async def requests():
        now = time.time()
        return await asyncio.gather(
            *(
                replica.rewrite(
                    RewriteRequest(
                        t.source, t.constraints, seed=n, received=now, deadline=now + 300
                    )
                )
                for n, t in enumerate(tasks)
            )
        )

    assert asyncio.run(requests()) == want
    assert rewriter.stats["step_rounds"] > 0 and not rewriter.slot_sampler(2).owners

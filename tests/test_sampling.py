"""The rewriter's decoding engine and prompts, on a tiny random GPT-2 (no Ray, no training)."""

from __future__ import annotations

import pytest
import torch
from conftest import make_rewriter, needs_dictionary, sampling, tiny_random_lm

from rrt.corpus import formats
from rrt.modelling.prompts import (
    fit_prompt,
    parse_ingredients,
    parse_recipe,
    protected_span,
    step_prompt,
)
from rrt.modelling.sampling import PLANS, CandidateSampler, sample_candidates
from rrt.recipes.paper_format import END_INST, EOS, INST

SOURCE = {
    "title": "Pancakes",
    "ingredients": ["2 eggs", "1 cup milk"],
    "steps": ["Whisk the eggs and milk.", "Fry in butter.", "Serve warm."],
}


@pytest.fixture(scope="module")
def tiny():
    """A tokenizer trained on the bundled sample and a 2-layer GPT-2 with random weights."""
    return tiny_random_lm()


def _prompts(tok):
    texts = [step_prompt("contextual", SOURCE, n, SOURCE["steps"][:n], "vegan") for n in range(3)]
    return [tok.encode(t, add_special_tokens=False) for t in texts]


def test_prompts_are_the_training_text_cut_where_the_rewrite_starts():
    for n in range(3):
        done = ["Whisk the flax and oat milk.", "Fry in oil."][:n]
        prompt = step_prompt("contextual", SOURCE, n, done, "vegan")
        full = formats.contextual(
            SOURCE["title"],
            SOURCE["ingredients"],
            SOURCE["steps"][: n + 1],
            done + ["New step."],
            "vegan",
        )
        assert (
            full.startswith(prompt) and full[len(prompt) :].strip() == f"New step. {END_INST} {EOS}"
        )
    ing = step_prompt("contextual_ing", SOURCE, 1, ["Whisk."], "vegan", prompt_ingredients=["oil"])
    assert ing.endswith("oil <endofprompt>") and "Whisk. <inst>" in ing
    assert step_prompt("no_context", SOURCE, 2, [], "vegan").endswith(
        "Serve warm. <endofinst> <tgt:vegan>"
    )
    no_source = step_prompt(
        "no_source", SOURCE, 1, ["Whisk."], "vegan", {**SOURCE, "title": "Vegan Pancakes"}
    )
    assert no_source.startswith("<|startoftext|> Vegan Pancakes") and no_source.endswith(
        "Whisk. <inst>"
    )
    assert step_prompt("ing_predictor", SOURCE, 0, [], "").endswith("<endofinst>")


def test_generated_parts_parse():
    assert parse_ingredients("oat milk <ing> flax <|endoftext|>") == ["oat milk", "flax"]
    assert parse_ingredients("<noings> <|endoftext|>") == []
    recipe = parse_recipe(
        "Vegan Pancakes <endoftitle> oat milk <ing> flour <endofings> Mix. <inst> Fry. "
        "<endofinst> <|endoftext|>"
    )
    assert recipe == {
        "title": "Vegan Pancakes",
        "ingredients": ["oat milk", "flour"],
        "steps": ["Mix.", "Fry."],
    }
    assert parse_recipe("just words")["steps"] == ["just words"]


def test_a_step_ends_at_the_first_special_token_the_model_writes(tiny, monkeypatch, tmp_path):
    from rrt.modelling import prompts
    from rrt.modelling.models import load_tokenizer, special_tokens
    from rrt.recipes.paper_format import ING, NO_INGS
    from testing.local_service import PRETRAINED_BOS, tiny_pretrained

    lm, tok = tiny
    rewriter = make_rewriter("contextual", lm, tok, 256, sampling(candidates=2, max_new_tokens=8))
    ours = {tok.convert_tokens_to_ids(t) for t in special_tokens()}
    assert len(ours) == len(special_tokens())
    for variant in ("contextual", "contextual_ing", "no_context", "no_source"):
        assert rewriter._stop_ids(variant, tok) == ours
    # The next-ingredient model writes <ing> and <noings>, End-to-End every mark of a recipe.
    assert not {tok.convert_tokens_to_ids(t) for t in (ING, NO_INGS)} & rewriter._stop_ids(
        "ing_predictor", tok
    )
    assert rewriter._stop_ids("end_to_end", tok) == {tok.convert_tokens_to_ids(EOS)}
    # A pretrained tokenizer's own special tokens (a Llama's <s>, a chat model's marks) end a step too.
    llama_tok = load_tokenizer(
        tiny_pretrained(str(tmp_path / "llama"))
    )  # ours added to its own, as to any base
    assert llama_tok.convert_tokens_to_ids(PRETRAINED_BOS) in rewriter._stop_ids(
        "contextual", llama_tok
    )
    assert llama_tok.convert_tokens_to_ids(PRETRAINED_BOS) not in rewriter._stop_ids(
        "end_to_end", llama_tok
    )
    # A name the tokenizer lacks maps to its unknown token (the end of text here): no stop.
    monkeypatch.setitem(prompts.STOPS, "end_to_end", (INST, "<not-a-token>"))
    assert rewriter._stop_ids("end_to_end", tok) == {tok.convert_tokens_to_ids(INST)}


def test_fitting_drops_left_context_but_never_the_title_or_the_current_step(tiny):
    _, tok = tiny
    special = {
        t: tok.convert_tokens_to_ids(t)
        for t in ("<endoftitle>", "<endofings>", INST, END_INST, "<endofprompt>", EOS)
    }
    long_source = {
        **SOURCE,
        "steps": ["Stir the batter slowly. " * 8] * 6 + ["Serve the pancakes warm."],
    }
    ids = tok.encode(
        step_prompt("contextual", long_source, 6, [], "vegan"), add_special_tokens=False
    )
    head, tail, _ = protected_span("contextual", ids, special)
    assert tok.decode(ids[:head]).endswith("Pancakes<endoftitle>")
    assert tok.decode(ids[tail:]).startswith("Serve the pancakes warm.")
    fitted = fit_prompt(ids, head, tail, 40)
    assert (
        len(fitted) == 40
        and fitted[:head] == ids[:head]
        and fitted[-(len(ids) - tail) :] == ids[tail:]
    )
    assert fit_prompt(ids, head, tail, len(ids)) == ids
    assert fit_prompt(ids, head, tail, head + 3) is None  # the current step alone does not fit


def test_fitting_then_drops_the_oldest_rewritten_steps_whole(tiny):
    _, tok = tiny
    special = {
        t: tok.convert_tokens_to_ids(t)
        for t in ("<endoftitle>", "<endofings>", INST, END_INST, "<endofprompt>", EOS)
    }
    done = [f"Rewritten step number {k} with several more words in it." for k in range(6)]
    ids = tok.encode(step_prompt("contextual", SOURCE, 2, done, "vegan"), add_special_tokens=False)
    head, tail, steps_from = protected_span("contextual", ids, special)
    assert tok.decode(ids[steps_from - 1 : steps_from]) == "<tgt:vegan>"
    budget = len(ids) - (tail - head) - 5
    fitted = fit_prompt(ids, head, tail, budget, steps_from, {special[INST]})
    text = tok.decode(fitted)
    assert len(fitted) <= budget and text.startswith(
        "<|startoftext|><src:non-vegan>Pancakes<endoftitle>"
    )
    assert "Serve warm.<endofinst><tgt:vegan>" in text and text.endswith(
        "number 5 with several more words in it.<inst>"
    )
    assert "number 0 " not in text and text.count("Rewritten") < 6
    assert fit_prompt(ids, head, tail, budget) is None  # without the step markers it cannot fit
    bare = fit_prompt(ids, head, tail, steps_from - (tail - head), steps_from, {special[INST]})
    assert tok.decode(bare).endswith(
        "Serve warm.<endofinst><tgt:vegan>"
    )  # every earlier rewrite dropped


def test_shared_prefill_greedy_candidates_match_generate_on_each_prompt(tiny):
    lm, tok = tiny
    prompts = _prompts(tok)
    stops = {tok.convert_tokens_to_ids(t) for t in (INST, END_INST, EOS)}
    settings = sampling(top_k=1, candidates=3, max_new_tokens=12)
    results = sample_candidates(lm, prompts, [1, 2, 3], stops, tok.pad_token_id, settings)
    for prompt, result in zip(prompts, results):
        with torch.no_grad():
            out = lm.generate(
                torch.tensor([prompt]),
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                do_sample=False,
                max_new_tokens=12,
                eos_token_id=sorted(stops),
                pad_token_id=tok.pad_token_id,
            )
        expected = [t for t in out[0, len(prompt) :].tolist()]
        cut = next((i for i, t in enumerate(expected) if t in stops), len(expected))
        assert all(tokens == expected[:cut] for tokens in result.tokens)
        assert result.ended == ["stop" if cut < len(expected) else "length"] * 3


def test_candidates_depend_on_their_seed_not_on_their_batch(tiny):
    lm, tok = tiny
    prompts = _prompts(tok)
    stops = {tok.convert_tokens_to_ids(t) for t in (INST, END_INST, EOS)}
    settings = sampling(candidates=4, max_new_tokens=10)
    together = sample_candidates(lm, prompts, [7, 8, 9], stops, tok.pad_token_id, settings)
    alone = sample_candidates(lm, prompts[1:2], [8], stops, tok.pad_token_id, settings)
    assert together[1].tokens == alone[0].tokens
    assert len({tuple(t) for t in together[1].tokens}) > 1  # the candidates differ from each other
    again = sample_candidates(lm, prompts, [7, 8, 99], stops, tok.pad_token_id, settings)
    assert again[0].tokens == together[0].tokens and again[2].tokens != together[2].tokens
    for result in together:
        assert all(len(t) <= 10 and not set(t) & stops for t in result.tokens)


class _Biased(torch.nn.Module):
    """The tiny model with extra weight on some tokens, so it writes them often."""

    def __init__(self, lm, boost: list[int]):
        super().__init__()
        self.lm, self.boost = lm, torch.tensor(boost)

    def forward(self, cache=None, **kwargs):
        out = self.lm(cache=cache, **kwargs)
        out.logits[..., self.boost] += 6.0
        return out


def test_the_guard_keeps_every_candidate_free_of_violations(tiny):
    from rrt.modelling.constrained import ViolationGuard, guard_text
    from rrt.recipes.tagger import text_violations

    lm, tok = tiny
    boost = sorted(
        {i for w in (" eggs", " egg", " milk", " butter", " cheese") for i in tok.encode(w)}
    )
    biased = _Biased(lm, boost).eval()
    prompts = _prompts(tok)
    stops = {tok.convert_tokens_to_ids(t) for t in (INST, END_INST, EOS)}
    settings = sampling(candidates=6, max_new_tokens=24)

    def violations(results, final_check: bool) -> int:
        texts = [
            guard_text(tok.decode(t), ["vegan"]) if final_check else tok.decode(t)
            for r in results
            for t in r.tokens
        ]
        return sum(bool(text_violations(t, ["vegan"])) for t in texts)

    plain = sample_candidates(biased, prompts, [1, 2, 3], stops, tok.pad_token_id, settings)
    assert violations(plain, False) > 5
    guard = ViolationGuard(tok, ["vegan"], stops)
    held = sample_candidates(
        biased, prompts, [1, 2, 3], stops, tok.pad_token_id, settings, guards=[guard] * 3
    )
    assert violations(held, True) == 0
    # The guard works token by token: even before the final check, no completed term is left.
    raw = [tok.decode(t) + "." for r in held for t in r.tokens]
    assert sum(bool(text_violations(t, ["vegan"])) for t in raw) <= sum(
        r.ended.count("length") for r in held
    )


def test_the_cuda_plan_draws_the_cpu_plans_tokens_for_guarded_prompts(tiny):
    from rrt.modelling.constrained import ViolationGuard

    lm, tok = tiny
    stops = {tok.convert_tokens_to_ids(t) for t in (INST, END_INST, EOS)}
    # Extra weight on forbidden foods (many refusals) and on one stop token (candidates end).
    boost = torch.tensor(
        sorted({i for w in (" eggs", " egg", " milk", " butter") for i in tok.encode(w)})
    )
    stop = tok.convert_tokens_to_ids(END_INST)

    def biased(module, inputs, logits):
        logits[..., boost] += 6.0
        logits[..., stop] += 3.0

    hook = lm.get_output_embeddings().register_forward_hook(biased)
    guard = ViolationGuard(tok, ["vegan"], stops)
    settings = sampling(candidates=5, max_new_tokens=20)
    samplers = [CandidateSampler(lm, "cpu", plan) for plan in ("loop", "graph")]
    try:
        first, second, third = _prompts(tok)
        runs = [
            sampler.sample(
                [second, third, first],
                [2, 3, 1],
                stops,
                tok.pad_token_id,
                settings,
                guards=[guard, None, guard],
            )
            for sampler in samplers
        ]
    finally:
        hook.remove()
    assert [r.tokens for r in runs[0]] == [r.tokens for r in runs[1]]
    assert [r.ended for r in runs[0]] == [r.ended for r in runs[1]]
    assert [r.taken_back for r in runs[0]] == [r.taken_back for r in runs[1]]
    assert {e for r in runs[0] for e in r.ended} >= {"stop", "length"}
    assert sum(r.taken_back for r in runs[0]) > 10
    assert samplers[1].counts["guard_redraws"] > 10


def test_a_refused_word_is_taken_back_instead_of_glued_to_letters(tiny, monkeypatch):
    import re

    from rrt.modelling import guarded_row
    from rrt.modelling.constrained import ViolationGuard
    from rrt.recipes.tagger import text_violations

    lm, tok = tiny
    stops = {tok.convert_tokens_to_ids(t) for t in (INST, END_INST, EOS)}
    eggs, word_end = tok.encode(" eggs"), tok.encode(" and")
    assert len(eggs) == len(word_end) == 1

    def biased(module, inputs, logits):
        # The model wants " eggs", then to end the word: refused, it must glue letters on or take it back.
        logits[..., eggs[0]] += 6.0
        logits[..., word_end[0]] += 5.0

    guard = ViolationGuard(tok, ["vegan"], stops)
    settings = sampling(candidates=6, max_new_tokens=24)
    glued = re.compile(r"eggs[a-z]", re.IGNORECASE)
    hook = lm.get_output_embeddings().register_forward_hook(biased)
    try:

        def run(take_backs: int, plan: str):
            monkeypatch.setattr(guarded_row, "TAKE_BACKS", take_backs)
            results = CandidateSampler(lm, "cpu", plan).sample(
                _prompts(tok), [1, 2, 3], stops, tok.pad_token_id, settings, guards=[guard] * 3
            )
            texts = [tok.decode(t) for r in results for t in r.tokens]
            return (
                texts,
                sum(bool(glued.search(t)) for t in texts),
                sum(r.taken_back for r in results),
            )

        limit = guarded_row.TAKE_BACKS
        _, glued_before, _ = run(0, "loop")
        runs = [run(limit, plan) for plan in ("loop", "graph")]
    finally:
        hook.remove()
    assert glued_before > 5
    texts, glued_after, taken_back = runs[0]
    assert runs[1] == runs[0] and glued_after == 0 and taken_back > 10
    assert all(t.strip() for t in texts)  # the steps still get written
    # Only a candidate cut by its token budget may end on the word; the engine's final check cuts it.
    assert all(m.end == len(t) for t in texts for m in text_violations(t, ["vegan"]))


@needs_dictionary
@pytest.mark.parametrize(
    "system",
    [
        "contextual",
        "contextual_rule",
        "contextual_gpt2",
        "grounded",
        "grounded_rule",
        "no_context",
        "no_source",
        "end_to_end",
    ],
)
def test_every_model_system_rewrites_a_batch_into_whole_records(tiny, system):
    from rrt.modelling.rewriter import RewriteTask
    from rrt.modelling.selection import SELECTIONS

    lm, tok = tiny
    extra = {"ing_lm": lm, "ing_tokenizer": tok} if system == "contextual_gpt2" else {}
    # The grounded systems choose by the grounded rules, the others by the paper's.
    selection = "grounded" if system.startswith("grounded") else "paper"
    extra["selection"] = selection
    # Every step sampled, as the paper rewrites (the product's edit: tests/test_editing.py).
    extra["steps"] = "every"
    rewriter = make_rewriter(
        system, lm, tok, 256, sampling(candidates=3, max_new_tokens=8), recipe_tokens=24, **extra
    )
    tasks = [
        RewriteTask("a", ["vegan"], SOURCE, 5),
        RewriteTask("b", ["dairy-free", "nut-free"], {**SOURCE, "steps": SOURCE["steps"][:1]}, 5),
    ]
    records = rewriter.rewrite(tasks)
    assert [r["id"] for r in records] == ["a", "b"] and records[1][
        "constraint"
    ] == "dairy-free,nut-free"
    for task, row in zip(tasks, records):
        assert row["system"] == system and row["source"]["steps"] == task.source["steps"]
        if system != "end_to_end":  # the guide's ingredient lines; End-to-End writes its own
            assert "1 cup milk" not in row["rewrite"]["ingredients"] and row["substitutions"]
        if system == "end_to_end":
            assert len(row["steps"]) == 1 and row["steps"][0]["source_step"] is None
            assert len(row["steps"][0]["candidates"]) == 3
        else:
            assert len(row["rewrite"]["steps"]) == len(task.source["steps"]) == len(row["steps"])
            for entry in row["steps"]:
                assert len(entry["candidates"]) == 3
                assert set(entry["candidates"][0]["scores"]) == set(SELECTIONS[selection]) | {
                    "total"
                }
    assert rewriter.stats["steps_sampled"] == (2 if system == "end_to_end" else 4)
    again = make_rewriter(
        system, lm, tok, 256, sampling(candidates=3, max_new_tokens=8), recipe_tokens=24, **extra
    ).rewrite(tasks[:1])
    assert (
        again[0]["rewrite"] == records[0]["rewrite"]
    )  # seeded: the same recipe gives the same rewrite


def test_a_round_of_prompts_tokenized_together_gives_each_prompt_its_own_ids(tiny, tmp_path):
    from rrt.modelling.models import load_tokenizer
    from testing.local_service import tiny_pretrained

    lm, tok = tiny
    long_source = {**SOURCE, "steps": ["Stir the batter slowly. " * 30] + SOURCE["steps"]}
    texts = [
        step_prompt("contextual", source, n, source["steps"][:n], "vegan")
        for source in (SOURCE, long_source)
        for n in range(3)
    ]
    llama_tok = load_tokenizer(tiny_pretrained(str(tmp_path / "llama")))
    for tokenizer in (tok, llama_tok):
        roomy = make_rewriter("contextual", lm, tokenizer, 100_000, sampling())
        assert roomy.prompts_ids(texts, "contextual") == [
            tokenizer.encode(t, add_special_tokens=False) for t in texts
        ]
        tight = make_rewriter("contextual", lm, tokenizer, 160, sampling(max_new_tokens=16))
        fitted = tight.prompts_ids(texts, "contextual")
        assert fitted == [tight.prompt_ids(t, "contextual") for t in texts]
        assert None in fitted and any(ids and len(ids) <= 144 for ids in fitted)
    assert make_rewriter("contextual", lm, tok, 256, sampling()).prompts_ids([], "contextual") == []


@needs_dictionary
def test_a_banned_token_is_never_drawn_by_either_plan(tiny):
    from dataclasses import replace

    from rrt.modelling.constrained import ViolationGuard
    from rrt.modelling.rewriter import RewriteTask

    lm, tok = tiny
    pad = tok.pad_token_id
    stops = {tok.convert_tokens_to_ids(t) for t in (INST, END_INST, EOS)}
    guard = ViolationGuard(tok, ["vegan"], stops)

    def padding_first(module, inputs, logits):
        """Padding outweighs every other token, as in a briefly fine-tuned model that writes it for a space."""
        logits[..., pad] += 20.0

    hook = lm.get_output_embeddings().register_forward_hook(padding_first)
    settings = sampling(candidates=3, max_new_tokens=6)
    try:
        for plan in PLANS:
            sampler = CandidateSampler(lm, "cpu", plan)

            def run(banned, guards=None, sampler=sampler):
                runs = sampler.sample(
                    _prompts(tok), [1, 2, 3], stops, pad, replace(settings, banned=banned), guards
                )
                return [t for r in runs for t in r.tokens]

            assert all(t == [pad] * 6 for t in run(())), plan
            for guards in (None, [guard, None, guard]):
                drawn = run((pad,), guards)
                assert len(drawn) == 9 and pad not in {i for t in drawn for i in t}, (plan, guards)
                assert sum(map(len, drawn)) > 9
        # The rewriter bans padding, which would otherwise end every step at once (it is a special token).
        rewriter = make_rewriter(
            "contextual", lm, tok, 256, sampling(candidates=2, max_new_tokens=8)
        )
        assert rewriter._banned_ids(tok) == (pad,) and pad in rewriter._stop_ids("contextual", tok)
        records = rewriter.rewrite([RewriteTask("a", ["vegan"], SOURCE, 5)])
    finally:
        hook.remove()
    texts = [c["text"] for entry in records[0]["steps"] for c in entry["candidates"]]
    assert texts and all(texts) and not any("<pad>" in t for t in texts)


@needs_dictionary
def test_the_rewriter_gives_the_same_rewrite_by_the_cuda_plan_and_the_cpu_plan(tiny):
    from rrt.modelling.rewriter import RewriteTask

    lm, tok = tiny
    tasks = [
        RewriteTask("a", ["vegan"], SOURCE, 5),
        RewriteTask("b", ["vegan"], {**SOURCE, "title": "Crepes"}, 5),
    ]
    settings = sampling(top_k=40, candidates=4, max_new_tokens=12)
    rewriters = [make_rewriter("contextual", lm, tok, 256, settings, plan=p) for p in PLANS]
    runs = [rewriter.rewrite(tasks) for rewriter in rewriters]
    assert [r["steps"] for r in runs[0]] == [r["steps"] for r in runs[1]]
    # Only the static cache's plan makes caches, and its counts say so (no graph off CUDA).
    graph, loop = (rewriters[PLANS.index(p)] for p in ("graph", "loop"))
    assert loop.stats["static_caches"] == 0 and graph.stats["static_caches"] >= 1
    assert graph.stats["graph_captures"] == graph.stats["no_room"] == 0
    # On a CPU the rewriter decodes by the loop; constrained, every prompt has a guard.
    guarded = make_rewriter("contextual", lm, tok, 256, settings, constrained=True)
    assert guarded.plan == "loop" and guarded.rewrite(tasks[:1])[0]["rewrite"]["steps"]

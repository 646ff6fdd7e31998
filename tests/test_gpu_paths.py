"""The GPU paths compute the same function as the plain model, proved on CPU with tiny models:
packed rows against padded batches (GPT-2 and Llama), fused against plain attention, the
compiled model against the eager one, and the CUDA decoding plan against the CPU's."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
import torch

from rrt.modelling import static_decode
from rrt.modelling.batching import pad_batch
from rrt.modelling.kernels import resolve_compile
from rrt.modelling.models import build_model, pad_vocabulary
from rrt.modelling.packing import pack_rows, packed_batch, packed_batches
from rrt.modelling.sampling import CandidateSampler, SamplingSettings, decode_plan

VOCAB, PAD = 300, 0
GPT2_SHAPE = {"n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 128}


def _gpt2(attention: str = "sdpa", seed: int = 5):
    lm = build_model("tiny", VOCAB, GPT2_SHAPE, seed=seed, pad_token_id=PAD, attention=attention)
    return lm.eval()  # dropout off: both sides must see the same function


def _llama(attention: str = "sdpa", seed: int = 5, family: str = "llama", **changes):
    """A tiny Llama (or, by `family`, a model of the same layers: qwen2 adds biases to q, k and v)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    config = AutoConfig.for_model(
        family,
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=PAD,
        bos_token_id=1,
        eos_token_id=2,
        **changes,
    )
    return AutoModelForCausalLM.from_config(config, attn_implementation=attention).eval()


def _examples(count: int = 9, seed: int = 0) -> list[tuple[np.ndarray, int]]:
    """Examples of varied lengths (5-40 tokens), each with a target start inside it."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        length = int(rng.integers(5, 41))
        out.append((rng.integers(3, VOCAB, size=length), int(rng.integers(1, length))))
    return out


def _run(lm, inputs: dict):
    """Logits, loss and every parameter's gradient of one forward and backward."""
    lm.zero_grad(set_to_none=True)
    out = lm(**inputs)
    out.loss.backward()
    grads = {
        name: p.grad.detach().clone() for name, p in lm.named_parameters() if p.grad is not None
    }
    return out.logits.detach(), out.loss.detach(), grads


def _example_logits(batch_logits, rows, examples):
    """Each example's logits, found where packing placed it (by identity)."""
    where = {}
    for r, row in enumerate(rows):
        at = 0
        for ids, _ in row:
            where[id(ids)] = (r, at)
            at += len(ids)
    return [
        batch_logits[where[id(ids)][0], where[id(ids)][1] : where[id(ids)][1] + len(ids)]
        for ids, _ in examples
    ]


def _assert_same(want, got, atol=1e-5):
    (w_logits, w_loss, w_grads), (g_logits, g_loss, g_grads) = want, got
    for a, b in zip(w_logits, g_logits):
        torch.testing.assert_close(a, b, atol=atol, rtol=1e-4)
    torch.testing.assert_close(w_loss, g_loss, atol=atol, rtol=1e-5)
    assert w_grads.keys() == g_grads.keys()
    for name in w_grads:
        torch.testing.assert_close(w_grads[name], g_grads[name], atol=atol, rtol=1e-4, msg=name)


def _padded_run(lm, examples, loss_on):
    batch = pad_batch(examples, PAD, loss_on)
    logits, loss, grads = _run(lm, batch.inputs("cpu"))
    return [logits[i, : len(ids)] for i, (ids, _) in enumerate(examples)], loss, grads


def _packed_run(lm, examples, loss_on, width=64):
    rows = pack_rows(examples, width)
    batch = packed_batch(rows, PAD, loss_on, width)
    logits, loss, grads = _run(lm, batch.inputs("cpu"))
    return _example_logits(logits, rows, examples), loss, grads


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("loss_on", ["all", "target"])
def test_packed_rows_compute_what_padded_batches_do(family, attention, loss_on):
    build = _gpt2 if family == "gpt2" else _llama
    examples = _examples()
    lm = build(attention)
    _assert_same(_padded_run(lm, examples, loss_on), _packed_run(lm, examples, loss_on))


def test_packing_without_restarted_positions_is_a_different_function():
    """The control: rows with one running position (no example boundaries) attend across
    examples, so the equality above cannot hold by accident."""
    examples = _examples()
    lm = _gpt2()
    rows = pack_rows(examples, 64)
    batch = packed_batch(rows, PAD, "all", 64)
    batch.position_ids = np.tile(np.arange(64), (len(rows), 1))
    logits, loss, _ = _run(lm, batch.inputs("cpu"))
    want_logits, want_loss, _ = _padded_run(lm, examples, "all")
    got = _example_logits(logits, rows, examples)
    assert any(not torch.allclose(a, b, atol=1e-3) for a, b in zip(want_logits, got))
    assert not torch.allclose(want_loss, loss, atol=1e-4)


def test_packed_rows_hold_every_token_once_and_no_cross_example_label():
    examples = _examples(40, seed=1)
    rows = pack_rows(examples, 64)
    assert all(sum(len(ids) for ids, _ in row) <= 64 for row in rows)
    assert sorted(id(ids) for row in rows for ids, _ in row) == sorted(
        id(ids) for ids, _ in examples
    )
    batch = packed_batch(rows, PAD, "all", 64)
    assert batch.attention_mask is None and batch.real_tokens == sum(
        len(ids) for ids, _ in examples
    )
    starts = batch.position_ids == 0
    assert (
        batch.labels[starts] == -100
    ).all()  # no example's first token is a target of the one before
    padded = pad_batch(examples, PAD, "all")
    assert (batch.labels[:, 1:] != -100).sum() == (padded.labels[:, 1:] != -100).sum()
    batches = list(packed_batches(examples, 3, 64, PAD, "all", random.Random(0)))
    assert sum(b.real_tokens for b in batches) == batch.real_tokens
    assert {b.input_ids.shape[1] for b in batches} == {64} and max(
        b.input_ids.shape[0] for b in batches
    ) == 3


def test_fused_attention_computes_what_plain_attention_does():
    examples = _examples()
    for build in (_gpt2, _llama):
        _assert_same(
            _padded_run(build("eager"), examples, "all"),
            _padded_run(build("sdpa"), examples, "all"),
        )


def test_compiled_model_computes_what_the_eager_one_does():
    examples = _examples()
    eager, compiled = _gpt2(), _gpt2()
    for lm in (eager, compiled):
        pad_vocabulary(lm, 64)  # the -inf hook on padding rows must survive compilation
    # The capture (dynamo and AOTAutograd) is what could lose the hook or the names; inductor's CPU kernels
    # are not the GPU's, and tests/test_labelled_head.py compiles a training step with inductor (its C++
    # builds would be paid again here on a fresh machine: RESULTS.md, the test suite).
    compiled.compile(backend="aot_eager")
    _assert_same(
        _packed_run(eager, examples, "all"), _packed_run(compiled, examples, "all"), atol=1e-4
    )
    assert list(compiled.state_dict()) == list(eager.state_dict())  # checkpoints keep their names


def test_auto_settings_pick_by_device():
    assert (
        resolve_compile("auto", "cuda")
        and not resolve_compile("auto", "cpu")
        and resolve_compile(True, "cpu")
    )


def _decoding_case(top_p: float, family: str = "gpt2"):
    """A tiny GPT-2 (or Llama or Qwen2, with two query heads per key-value head), five prompts of random
    lengths, common tokens as stops (so candidates end at different steps and leave the batch),
    four candidates each: (lm, prompts, stops, settings, seeds)."""
    rng = np.random.default_rng(3)
    prompts = [list(rng.integers(3, VOCAB, size=int(rng.integers(4, 30)))) for _ in range(5)]
    stops = {int(t) for t in rng.integers(3, VOCAB, size=12)}
    settings = SamplingSettings(
        top_k=40, top_p=top_p, temperature=1.0, candidates=4, max_new_tokens=20
    )
    lm = _gpt2(seed=7) if family == "gpt2" else _llama(seed=7, family=family)
    return lm, prompts, stops, settings, [11, 12, 13, 14, 15]


def _both_plans(lm, prompts, seeds, stops, settings, **sampler):
    """The candidates of the CPU's plan (loop) and of the CUDA plan (graph: the static cache, whose
    steps run eagerly off CUDA), and the graph sampler."""
    graph = CandidateSampler(lm, "cpu", plan="graph", **sampler)
    loop = CandidateSampler(lm, "cpu", plan="loop").sample(prompts, seeds, stops, PAD, settings)
    return loop, graph.sample(prompts, seeds, stops, PAD, settings), graph


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen2"])
@pytest.mark.parametrize("top_p", [1.0, 0.9])
def test_the_cuda_plan_draws_the_tokens_the_cpu_plan_does(top_p, family, monkeypatch):
    lm, prompts, stops, settings, seeds = _decoding_case(top_p, family)
    loop, graph, sampler = _both_plans(lm, prompts, seeds, stops, settings)
    assert {e for s in loop for e in s.ended} == {"stop", "length"}  # both ways of ending
    assert [s.tokens for s in graph] == [s.tokens for s in loop]
    assert [s.ended for s in graph] == [s.ended for s in loop]
    # 5 prompts run as 8 (32 rows); finished candidates move the batch down to smaller buckets.
    assert sampler.counts["decoders"] == 1 and sampler.counts["eager_steps"] > 0
    again = sampler.sample(prompts, seeds, stops, PAD, settings)  # its kept cache
    assert [s.tokens for s in again] == [s.tokens for s in loop]
    # A candidate's tokens depend on its seed, not on the batch it runs in; 8 rows of the 32 kept.
    alone = sampler.sample(prompts[3:], seeds[3:], stops, PAD, settings)
    assert [s.tokens for s in alone] == [s.tokens for s in loop[3:]]
    assert sampler.counts["decoders"] == 1
    # A batch whose static cache would not fit decodes the plain way, the same tokens.
    monkeypatch.setattr(
        sampler.static, "decode", lambda *a: (_ for _ in ()).throw(static_decode.NoRoom("full"))
    )
    full = sampler.sample(prompts, seeds, stops, PAD, settings)
    assert [s.tokens for s in full] == [s.tokens for s in loop] and sampler.counts["no_room"] == 1


def test_a_kept_static_cache_with_more_columns_serves_shorter_prompts(monkeypatch):
    lm, prompts, stops, settings, seeds = _decoding_case(1.0)
    rng = np.random.default_rng(4)
    long = [list(rng.integers(3, VOCAB, size=int(rng.integers(66, 90)))) for _ in prompts]
    sampler = CandidateSampler(lm, "cpu", plan="graph")
    loop = CandidateSampler(lm, "cpu", plan="loop").sample(prompts, seeds, stops, PAD, settings)

    def run(batch):
        """The batch's candidates, and the caches made and columns held for it."""
        made, held = sampler.counts["decoders"], sampler.counts["columns_held"]
        out = sampler.sample(batch, seeds, stops, PAD, settings)
        return out, sampler.counts["decoders"] - made, sampler.counts["columns_held"] - held

    # Columns round up to 64: the long prompts' cache has 128, the short ones need 64.
    monkeypatch.setattr(static_decode, "COLUMN_REUSE", 2.0)
    assert run(long)[1:] == (1, 128)
    reused, made, held = run(prompts)
    assert (made, held) == (0, 128)
    assert [s.tokens for s in reused] == [s.tokens for s in loop]
    assert [s.ended for s in reused] == [s.ended for s in loop]
    # Past the factor the short prompts get a cache of their own columns.
    monkeypatch.setattr(static_decode, "COLUMN_REUSE", 1.9)
    sampler.static.release()
    assert run(long)[1:] == (1, 128)
    own, made, held = run(prompts)
    assert (made, held) == (1, 64) and [s.tokens for s in own] == [s.tokens for s in loop]
    # A cache of fewer columns never serves a longer prompt.
    assert run(long)[1:] == (0, 128)


def test_the_static_caches_of_all_samplers_are_bounded_together(monkeypatch):
    """A replica holds a sampler per candidates value and guard choice: together they keep at most
    CPU_DECODERS caches (GPU_DECODERS on CUDA), the least recently used out, and when the GPU runs
    out of memory for a new one every kept cache goes and the batch decodes the plain way."""
    lm, prompts, stops, settings, seeds = _decoding_case(1.0)
    settings = replace(settings, max_new_tokens=4)
    samplers = [CandidateSampler(lm, "cpu", plan="graph") for _ in range(3)]
    monkeypatch.setattr(static_decode, "CPU_DECODERS", 2)
    for n, sampler in enumerate(samplers, 1):
        sampler.sample(prompts[:1], seeds[:1], stops, PAD, replace(settings, candidates=n))
    made = sum(s.counts["decoders"] for s in samplers)
    assert made == 3 and made - sum(s.counts["evictions"] for s in samplers) <= 2
    assert len(static_decode.DECODERS) <= 2
    # The first sampler's cache was the least recently used: it is made again.
    samplers[0].sample(prompts[:1], seeds[:1], stops, PAD, replace(settings, candidates=1))
    assert samplers[0].counts["decoders"] == 2

    def no_memory(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(static_decode, "StaticDecoder", no_memory)
    loop = CandidateSampler(lm, "cpu", plan="loop").sample(prompts, seeds, stops, PAD, settings)
    out = samplers[2].sample(prompts, seeds, stops, PAD, settings)
    assert samplers[2].counts["no_room"] == 1 and len(static_decode.DECODERS) == 0
    assert [s.tokens for s in out] == [s.tokens for s in loop]


def test_the_decoding_plan_is_graph_on_cuda_for_gpt2_and_llama():
    from transformers import AutoModelForCausalLM, GPTNeoXConfig

    for lm in (
        _gpt2(),
        _llama(),
        _llama(family="qwen2"),
        _llama(family="mistral", sliding_window=None),
    ):
        assert decode_plan(lm, "cuda") == decode_plan(lm, "cuda:0") == "graph"
        assert decode_plan(lm, "cpu") == "loop"
    # Frequencies rescaled from the positions seen (on the host, each step), a sliding window and
    # other families: the plain loop everywhere.
    stretched = _llama()
    stretched.model.rotary_emb.rope_type = "dynamic"
    windowed = _llama(family="mistral", sliding_window=16)
    neox = AutoModelForCausalLM.from_config(
        GPTNeoXConfig(
            vocab_size=VOCAB,
            hidden_size=64,
            num_hidden_layers=1,
            num_attention_heads=4,
            intermediate_size=128,
        )
    )
    for lm in (stretched, windowed, neox):
        assert decode_plan(lm, "cuda") == "loop"
        with pytest.raises(ValueError, match="GPT-2 or Llama family"):
            CandidateSampler(lm, "cpu", plan="graph")
    with pytest.raises(ValueError, match="unknown decoding plan"):
        CandidateSampler(_gpt2(), "cpu", plan="static")

"""The plain PyTorch engine (train.engine: torch): the same updates as a hand-written loop, and a
checkpoint that resumes to the same weights."""
from __future__ import annotations

import pytest
import torch

from rrt.modelling.engine import TorchEngine
from rrt.modelling.models import build_model
from rrt.modelling.optim import lr_factor

# No dropout: runs compared step by step must draw no random masks.
SHAPE = {"n_layer": 1, "n_head": 2, "n_embd": 32, "n_positions": 64, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
         "attn_pdrop": 0.0}


def _batches(count: int) -> list[dict]:
    generator = torch.Generator().manual_seed(5)
    return [{"input_ids": (ids := torch.randint(1, 300, (4, 16), generator=generator)), "labels": ids.clone()}
            for _ in range(count)]


def _engine(grad_accum: int = 1, precision: str = "fp32", seed: int = 3) -> TorchEngine:
    lm = build_model("tiny", 300, SHAPE, seed=seed)
    optimizer = torch.optim.AdamW(lm.parameters(), lr=1e-2, betas=(0.9, 0.95), fused=True)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, 2, 10, "cosine", 0.1))
    return TorchEngine(lm, optimizer, schedule, precision, grad_accum, 1.0, torch.device("cpu"))


def _run(engine: TorchEngine, batches: list[dict]) -> None:
    for inputs in batches:
        engine.backward(engine(**inputs).loss)
        engine.step()


def test_the_engine_makes_the_updates_of_a_plain_loop():
    engine, batches = _engine(), _batches(4)
    _run(engine, batches)
    lm = build_model("tiny", 300, SHAPE, seed=3)
    optimizer = torch.optim.AdamW(lm.parameters(), lr=1e-2, betas=(0.9, 0.95), fused=True)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, 2, 10, "cosine", 0.1))
    for inputs in batches:
        lm(**inputs).loss.backward()
        torch.nn.utils.clip_grad_norm_(lm.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
    assert engine.global_steps == 4
    for ours, theirs in zip(engine.module.parameters(), lm.parameters()):
        assert torch.allclose(ours, theirs, atol=1e-6)
    assert not torch.allclose(engine.module.transformer.wte.weight, build_model("tiny", 300, SHAPE, seed=3)
                              .transformer.wte.weight)


def test_accumulation_steps_once_per_group_with_the_mean_gradient():
    batches = _batches(4)
    accumulated = _engine(grad_accum=2)
    _run(accumulated, batches)
    assert accumulated.global_steps == 2 and accumulated.micro_steps == 4
    # Two micro-batches of 4 rows accumulated = one batch of their 8 rows (same row length).
    merged = _engine(grad_accum=1)
    _run(merged, [{k: torch.cat([a[k], b[k]]) for k in a} for a, b in zip(batches[::2], batches[1::2])])
    for ours, theirs in zip(accumulated.module.parameters(), merged.module.parameters()):
        assert torch.allclose(ours, theirs, atol=1e-5)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_checkpoint_resumes_to_the_same_weights(tmp_path, precision):
    batches = _batches(5)
    straight = _engine(precision=precision)
    _run(straight, batches)
    first = _engine(precision=precision)
    _run(first, batches[:3])
    first.save_checkpoint(str(tmp_path), "ds")
    resumed = _engine(precision=precision, seed=99)   # other weights: the checkpoint must replace them
    resumed.load_checkpoint(str(tmp_path), "ds")
    assert resumed.global_steps == 3 and resumed.schedule.last_epoch == 3
    _run(resumed, batches[3:])
    for ours, theirs in zip(resumed.module.parameters(), straight.module.parameters()):
        assert torch.equal(ours, theirs)

"""The plain PyTorch engine (train.engine: torch): the same updates as a hand-written loop, and a
checkpoint that resumes to the same weights."""

from __future__ import annotations

import contextlib

import pytest
import torch

from rrt.modelling.models import build_model
from rrt.training.engine import TorchEngine
from rrt.training.optim import lr_factor

# No dropout: runs compared step by step must draw no random masks.
SHAPE = {
    "n_layer": 1,
    "n_head": 2,
    "n_embd": 32,
    "n_positions": 64,
    "resid_pdrop": 0.0,
    "embd_pdrop": 0.0,
    "attn_pdrop": 0.0,
}


def _batches(count: int) -> list[dict]:
    generator = torch.Generator().manual_seed(5)
    return [
        {
            "input_ids": (ids := torch.randint(1, 300, (4, 16), generator=generator)),
            "labels": ids.clone(),
        }
        for _ in range(count)
    ]


def _engine(grad_accum: int = 1, precision: str = "fp32", seed: int = 3) -> TorchEngine:
    lm = build_model("tiny", 300, SHAPE, seed=seed)
    optimizer = torch.optim.AdamW(lm.parameters(), lr=1e-2, betas=(0.9, 0.95), fused=True)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, 2, 10, "cosine", 0.1)
    )
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
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, 2, 10, "cosine", 0.1)
    )
    for inputs in batches:
        lm(**inputs).loss.backward()
        torch.nn.utils.clip_grad_norm_(lm.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
    assert engine.global_steps == 4
    for ours, theirs in zip(engine.module.parameters(), lm.parameters()):
        assert torch.allclose(ours, theirs, atol=1e-6)
    assert not torch.allclose(
        engine.module.transformer.wte.weight,
        build_model("tiny", 300, SHAPE, seed=3).transformer.wte.weight,
    )


def test_accumulation_steps_once_per_group_with_the_mean_gradient():
    batches = _batches(4)
    accumulated = _engine(grad_accum=2)
    _run(accumulated, batches)
    assert accumulated.global_steps == 2 and accumulated.micro_steps == 4
    # Two micro-batches of 4 rows accumulated = one batch of their 8 rows (same row length).
    merged = _engine(grad_accum=1)
    _run(
        merged,
        [{k: torch.cat([a[k], b[k]]) for k in a} for a, b in zip(batches[::2], batches[1::2])],
    )
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
    resumed = _engine(
        precision=precision, seed=99
    )  # other weights: the checkpoint must replace them
    resumed.load_checkpoint(str(tmp_path), "ds")
    assert resumed.global_steps == 3 and resumed.schedule.last_epoch == 3
    _run(resumed, batches[3:])
    for ours, theirs in zip(resumed.module.parameters(), straight.module.parameters()):
        assert torch.equal(ours, theirs)


# Reading a tensor's values on the host: on a GPU each waits until the device has computed them.
READS = ("item", "tolist", "numpy", "__float__", "__int__", "__bool__")


@contextlib.contextmanager
def _host_reads():
    """Counts the tensor values read on the host inside it."""
    count = [0]
    own = {name: torch.Tensor.__dict__.get(name) for name in READS}
    for name in READS:
        read = getattr(torch.Tensor, name)

        def counted(self, *args, read=read, **kwargs):
            count[0] += 1
            return read(self, *args, **kwargs)

        setattr(torch.Tensor, name, counted)
    try:
        yield count
    finally:
        for name, read in own.items():
            if read is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, read)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_steps_wait_on_the_device_only_at_the_metrics_line(precision):
    """Each training step as the job's loop runs it (the compiled model's call, backward and update,
    and the window's sums) leaves its loss on the device; the metrics line reads them once. A GPU
    then never idles between steps while the host builds the next batch. (Compiled, as on a GPU:
    the library's eager forward of packed rows reads one value back to find the examples.)"""
    from rrt.modelling.kernels import compile_model
    from rrt.modelling.packing import pack_rows, packed_batch
    from rrt.training.step_window import StepWindow

    def example(n: int):
        return torch.randint(
            1, 300, (n,), generator=torch.Generator().manual_seed(n)
        ).numpy(), n // 2

    # Two rows of 32 each, as a job's batches are one shape.
    batches = [
        packed_batch(pack_rows([example(a), example(b)], 32), 0, "target", 32)
        for a, b in ((20, 15), (25, 12), (18, 30))
    ]
    assert {b.input_ids.shape for b in batches} == {(2, 32)}
    engine, window = _engine(precision=precision), StepWindow()
    reference = _engine(precision=precision)
    # Models compiled earlier in this process count against the recompile limit of the code the
    # model shares with them: past it the forward would run eagerly.
    torch._dynamo.reset()
    # Captured as torch.compile captures it, without inductor's build of kernels (most of a cold
    # compile's minute here): the capture is what keeps the model's own checks off the host, and
    # inductor's kernels read no values back.
    compile_model(engine.module, backend="aot_eager")
    # One whole step before the count, on both: capturing the forward, and the backward at its first
    # call, reads values.
    for warmed in (engine, reference):
        _run(warmed, [batches[0].inputs("cpu")])
    with _host_reads() as reads:
        for batch in batches:
            window.start()
            loss = engine(**batch.inputs("cpu")).loss
            engine.backward(loss)
            engine.step()
            window.add(loss, batch)
    assert reads[0] == 0
    with _host_reads() as reads:
        loss_sum, micro, real, total, seconds, wait = window.totals(torch.device("cpu"))
    assert reads[0] == 1 and micro == 3 and seconds > 0 and wait == 0.0
    assert real == sum(b.real_tokens for b in batches) and total == sum(
        b.total_tokens for b in batches
    )
    read_each_step = 0.0
    for batch in batches:  # the same run, each loss read at once
        loss = reference(**batch.inputs("cpu")).loss
        reference.backward(loss)
        reference.step()
        read_each_step += float(loss)
    assert loss_sum == pytest.approx(read_each_step, rel=1e-6)

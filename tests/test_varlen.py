"""Variable-length attention (train.attention: varlen) computes the function of the packed
mask: the examples' boundaries, the layout around the kernel (checked with a kernel that attends
one segment at a time, since the flash kernel runs on CUDA only), grouped-query heads, rows wider
than the block, and the fallback where the kernel cannot run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_gpu_paths import (
    GPT2_SHAPE,
    PAD,
    VOCAB,
    _assert_same,
    _example_logits,
    _examples,
    _llama,
    _padded_run,
    _run,
)

from rrt.modelling import varlen
from rrt.modelling.models import build_model
from rrt.modelling.packing import pack_rows, packed_batch

CHECKED = "rrt_varlen_checked"  # the layout with the reference kernel, on CPU in fp32


@pytest.fixture(scope="module", autouse=True)
def checked_attention():
    varlen.register(
        CHECKED, kernel=varlen.reference_segments, devices=("cpu",), dtypes=("float32",)
    )


def _gpt2(attention: str):
    return build_model(
        "tiny", VOCAB, GPT2_SHAPE, seed=5, pad_token_id=PAD, attention=attention
    ).eval()


def _packed(lm, examples, width: int):
    rows = pack_rows(examples, width)
    logits, loss, grads = _run(
        lm, packed_batch(rows, PAD, "target", width, boundaries=True).inputs("cpu")
    )
    return _example_logits(logits, rows, examples), loss, grads


def test_segments_start_where_positions_restart_and_end_at_the_total():
    positions = np.array([[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 0, 1]])
    assert varlen.segment_offsets(positions).tolist() == [0, 3, 5, 6, 10, 12]
    rows = pack_rows(_examples(), 64)
    assert packed_batch(rows, PAD, "all", 64).segments is None  # only a varlen model reads them
    batch = packed_batch(rows, PAD, "all", 64, boundaries=True)
    inputs = batch.inputs("cpu")
    lengths = np.diff(batch.segments)
    assert inputs["cu_seq_lens_q"].dtype == torch.int32 and inputs["max_length_q"] == 64
    assert sorted(lengths[lengths > 0].tolist()) == sorted(
        [len(ids) for row in rows for ids, _ in row]
        + [
            64 - sum(len(ids) for ids, _ in row)
            for row in rows
            if sum(len(ids) for ids, _ in row) < 64
        ]
    )


@pytest.mark.parametrize("width", [64, 128])
def test_attention_by_segment_computes_what_the_packed_mask_does(width):
    """Logits, loss and every gradient, in rows of the block and twice as wide (examples from
    different rows of the narrow packing share a row)."""
    examples = _examples(12, seed=3)
    want = _packed(_gpt2("sdpa"), examples, width)
    _assert_same(want, _packed(_gpt2(CHECKED), examples, width))
    _assert_same(_padded_run(_gpt2("sdpa"), examples, "target"), want)


def test_grouped_query_heads_are_shared_as_the_model_shares_them():
    examples = _examples(8, seed=4)
    _assert_same(_packed(_llama("sdpa"), examples, 128), _packed(_llama(CHECKED), examples, 128))


def test_a_boundary_moved_by_one_token_changes_the_function():
    """The control: the checked path really attends by the given segments."""
    examples = _examples(6, seed=5)
    rows = pack_rows(examples, 128)
    batch = packed_batch(rows, PAD, "all", 128, boundaries=True)
    lm = _gpt2(CHECKED)
    logits = lm(**batch.inputs("cpu")).logits
    batch.segments = batch.segments.copy()
    batch.segments[1] += 1
    moved = lm(**batch.inputs("cpu")).logits
    assert not torch.allclose(logits, moved, atol=1e-4)


def test_off_cuda_the_varlen_setting_is_the_sdpa_function():
    """The kernel's own setting: on CPU (and in fp32) it falls back to sdpa with the packed mask."""
    examples = _examples(10, seed=6)
    lm = _gpt2("varlen")
    assert lm.config._attn_implementation == varlen.NAME
    _assert_same(_packed(_gpt2("sdpa"), examples, 128), _packed(lm, examples, 128))
    # Padded batches carry no boundaries: sdpa with their padding mask.
    _assert_same(_padded_run(_gpt2("sdpa"), examples, "all"), _padded_run(lm, examples, "all"))


@torch.library.custom_op("rrt_test::segments", mutates_args=())
def _opaque_segments(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    offsets: torch.Tensor,
    longest: int,
    dropout: float,
    scale: float,
) -> torch.Tensor:
    """The reference kernel as one operator a compiled graph keeps whole, as it keeps the flash kernel."""
    return varlen.reference_segments(query, key, value, offsets, longest, dropout, scale)


@_opaque_segments.register_fake
def _(query, key, value, offsets, longest, dropout, scale):
    return torch.empty_like(query)


def test_a_compiled_model_is_built_once_whatever_a_batch_holds():
    """Batches hold different numbers of examples, so of boundaries: the first batch's build serves
    the rest, not built again at the second (RESULTS.md: what a build costs on a GPU)."""
    from torch._dynamo.utils import counters

    name = varlen.register(
        "rrt_varlen_opaque",
        kernel=lambda q, k, v, offsets, longest, dropout, scale: _opaque_segments(
            q, k, v, offsets, longest, dropout, q.shape[-1] ** -0.5 if scale is None else scale
        ),
        devices=("cpu",),
        dtypes=("float32",),
    )
    lm = _gpt2(name)
    plain = _gpt2(CHECKED)
    lm.compile()
    torch._dynamo.reset()
    counts, graphs = [], []
    for size in (8, 9, 10):  # four rows each, as a job's batches hold micro-batch rows each
        rows = pack_rows(_examples(size, seed=7), 64)
        batch = packed_batch(rows, PAD, "all", 64, boundaries=True)
        assert batch.input_ids.shape == (4, 64)
        counts.append(len(batch.segments))
        with torch.no_grad():
            logits = lm(**batch.inputs("cpu")).logits
            torch.testing.assert_close(
                logits, plain(**batch.inputs("cpu")).logits, atol=1e-4, rtol=1e-4
            )
        graphs.append(counters["stats"]["unique_graphs"])
    assert len(set(counts)) == 3, counts  # the batches really differ in their boundaries' length
    assert graphs[0] >= 1 and graphs[-1] == graphs[0], graphs

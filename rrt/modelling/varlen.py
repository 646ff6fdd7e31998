"""Variable-length attention for packed training rows (`train.attention: varlen`).

A packed row (rrt.modelling.packing) holds several examples end to end. With `sdpa` the model
builds a block-diagonal causal mask over the whole row, and the fused kernel that takes a mask
computes every query against every key of the row, masked or not. `varlen` hands the kernel the
examples' boundaries instead (cumulative lengths over the flattened rows, as flash attention's
variable-length form takes them): each example attends causally within itself, so a row costs the
sum of its examples' squared lengths, not the square of the row's, and attention dropout stays
as it is. That also lets rows be wider than the block (`train.pack_width`) without attention
growing with them, and wider rows waste less of a row on padding.

The kernel is PyTorch's own flash attention (CUDA, 16-bit). Elsewhere (the CPU, fp32, batches
that are not packed) the same function runs as `sdpa` with the packed mask.

    name = register()                                   # the attn_implementation to build with
    batch = packed_batch(rows, pad_id, "target", width, boundaries=True)   # Batch.segments
    model(**batch.inputs(device))                       # cu_seq_lens_q / max_length_q reach attention
"""

from __future__ import annotations

# torch and transformers are imported where used: jobs/train.py imports this module (through
# rrt.modelling.models), and its --help and driver start without them.
from collections.abc import Callable
from itertools import pairwise

import numpy as np

NAME = "rrt_varlen"  # the attention implementation registered with transformers


def segment_offsets(positions: np.ndarray) -> np.ndarray:
    """Where every example (and every row's padding tail) starts in the flattened rows, then the
    total: the cumulative lengths flash attention takes. A segment starts where positions restart."""
    flat = positions.reshape(-1)
    return np.append(np.flatnonzero(flat == 0), flat.size).astype(np.int32)


def flash_segments(query, key, value, offsets, longest: int, dropout: float, scale: float | None):
    """Causal attention within each segment of the flattened tokens ([tokens, heads, dim] each),
    by PyTorch's flash kernel in its variable-length form (it keeps dropout)."""
    import torch

    return torch.ops.aten._flash_attention_forward(
        query, key, value, offsets, offsets, longest, longest, dropout, True, False, scale=scale
    )[0]


def reference_segments(
    query, key, value, offsets, longest: int, dropout: float, scale: float | None
):
    """The same as flash_segments, one segment at a time through sdpa (any device; for checks)."""
    import torch
    import torch.nn.functional as F

    out = torch.empty_like(query)
    bounds = offsets.tolist()
    for start, end in pairwise(bounds):
        if end > start:
            q, k, v = (t[start:end].transpose(0, 1) for t in (query, key, value))
            out[start:end] = F.scaled_dot_product_attention(
                q, k, v, dropout_p=dropout, is_causal=True, scale=scale
            ).transpose(0, 1)
    return out


def segment_attention(
    query,
    key,
    value,
    offsets,
    longest: int,
    dropout: float,
    scale: float | None,
    kernel: Callable = flash_segments,
):
    """Attention of packed rows by segment: query, key and value as the model gives them
    ([rows, heads, width, dim]); the output as transformers' attention functions return it
    ([rows, width, heads, dim])."""
    rows, heads, width, dim = query.shape
    if key.shape[1] != heads:  # grouped-query attention (Llama family): one key head per group
        key, value = (t.repeat_interleave(heads // t.shape[1], dim=1) for t in (key, value))
    flat = [t.transpose(1, 2).reshape(rows * width, heads, dim) for t in (query, key, value)]
    out = kernel(*flat, offsets, longest, dropout, scale)
    return out.view(rows, width, heads, dim)


def attention_function(
    kernel: Callable = flash_segments,
    devices: tuple[str, ...] = ("cuda",),
    dtypes: tuple[str, ...] = ("float16", "bfloat16"),
) -> Callable:
    """A transformers attention function: `segment_attention` by `kernel` for packed batches in
    `dtypes` on `devices` (the flash kernel's), else sdpa with the mask the model built (the packed
    mask for packed rows)."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    kinds = tuple(getattr(torch, name) for name in dtypes)

    def attention(
        module,
        query,
        key,
        value,
        attention_mask,
        dropout: float = 0.0,
        scaling: float | None = None,
        **kwargs,
    ):
        offsets = kwargs.get("cu_seq_lens_q")
        if offsets is None or query.device.type not in devices or query.dtype not in kinds:
            return sdpa_attention_forward(
                module,
                query,
                key,
                value,
                attention_mask,
                dropout=dropout,
                scaling=scaling,
                **kwargs,
            )
        return segment_attention(
            query, key, value, offsets, int(kwargs["max_length_q"]), dropout, scaling, kernel
        ), None

    return attention


def register(
    name: str = NAME,
    kernel: Callable = flash_segments,
    devices: tuple[str, ...] = ("cuda",),
    dtypes: tuple[str, ...] = ("float16", "bfloat16"),
) -> str:
    """Register the attention (and sdpa's mask, for the fallback) with transformers under `name`;
    returns the name to build a model with."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(name, attention_function(kernel, devices, dtypes))
    AttentionMaskInterface.register(name, sdpa_mask)
    return name

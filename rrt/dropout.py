"""GPT-2's dropout, made cheap on CPU: the same Bernoulli masks from 16 random bits an element.

torch's CPU dropout draws one Mersenne-Twister number per element (`bernoulli_`), about 10 ns
each; in a tiny-preset training step that was a tenth of the time. Here one 64-bit draw masks
four elements, and the drop rate is rounded to a multiple of 1/65536 (0.1 becomes 0.100006) with
the kept values scaled by the rounded rate, so every activation keeps its expectation.
Attention dropout also kept torch's scaled-dot-product attention off its fused CPU kernel and on
a generic path that checks every row for -inf; `dropout_attention` does the same arithmetic
directly, and defers to the fused kernel whenever no dropout applies (evaluation, inference).
"""
from __future__ import annotations

import torch
from torch import nn

LANES = 65536  # values of one 16-bit lane
ATTENTION = "rrt_dropout"  # the attention implementation's registered name


def keep_mask(shape: torch.Size, p: float, device: torch.device) -> tuple[torch.Tensor, float]:
    """A boolean keep-mask of `shape` and the scale 1 / (1 - rounded p) for the kept values."""
    dropped = round(p * LANES)
    count = shape.numel()
    # The full 64-bit range (from the int64 minimum, no upper bound) leaves no lane biased.
    bits = torch.empty((count + 3) // 4, dtype=torch.int64, device=device).random_(-2 ** 63, None)
    lanes = bits.view(torch.int16)[:count].view(shape)
    return lanes >= dropped - LANES // 2, LANES / (LANES - dropped)


class _MaskedScale(torch.autograd.Function):
    """x * mask * scale, keeping only the boolean mask for the backward pass."""

    @staticmethod
    def forward(ctx, x, keep, scale):
        """Zero the dropped values and scale the kept ones."""
        ctx.save_for_backward(keep)
        ctx.scale = scale
        # where + in-place scale: two passes, no float copy of the boolean mask.
        return torch.where(keep, x, 0.0).mul_(scale)

    @staticmethod
    def backward(ctx, grad):
        """The same mask and scale on the gradient."""
        (keep,) = ctx.saved_tensors
        return torch.where(keep, grad, 0.0).mul_(ctx.scale), None, None


def masked_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """Inverted dropout with 16-bit masks (identity when not training or p is 0)."""
    if not training or p <= 0.0:
        return x
    keep, scale = keep_mask(x.shape, p, x.device)
    return _MaskedScale.apply(x, keep, scale)


class Dropout(nn.Dropout):
    """`nn.Dropout` with 16-bit masks; the same `p`, the same state dict."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Drop on the training pass only."""
        return masked_dropout(x, self.p, self.training)


_CAUSAL: dict[tuple, torch.Tensor] = {}


def _causal(q_len: int, k_len: int, device: torch.device) -> torch.Tensor:
    """The causal mask (True where a query may attend), one per shape and device."""
    key = (q_len, k_len, str(device))
    if key not in _CAUSAL:
        _CAUSAL[key] = torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(k_len - q_len)
    return _CAUSAL[key]


def _attend(query, key, value, allowed, scale: float, dropout: float):
    """softmax(q k^T) v with a boolean or additive mask and 16-bit dropout masks."""
    scores = torch.matmul(query * scale, key.transpose(-1, -2))
    # matmul keeps its inputs, not its output, so the mask may go in place.
    if allowed is not None and allowed.dtype == torch.bool:
        # The dtype's minimum, not -inf: a row with nothing allowed gives uniform weights, not NaN.
        scores.masked_fill_(~allowed, torch.finfo(scores.dtype).min)
    elif allowed is not None:
        scores.add_(allowed)
    return torch.matmul(masked_dropout(torch.softmax(scores, dim=-1), dropout), value)


def dropout_attention(module, query, key, value, attention_mask, dropout: float = 0.0,
                      scaling: float | None = None, **kwargs):
    """Attention for Hugging Face models: softmax(q k^T) v with 16-bit dropout masks while
    training, torch's fused kernel otherwise. Masks are SDPA's (boolean, True where allowed) or
    additive; no mask means causal unless the call or module says otherwise."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if dropout <= 0.0 or kwargs.get("output_attentions"):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    causal = kwargs.get("is_causal")
    if causal is None:
        causal = getattr(module, "is_causal", True)
    if attention_mask is None and causal:
        attention_mask = _causal(query.shape[2], key.shape[2], query.device)
    return _attend(query, key, value, attention_mask, scale, dropout).transpose(1, 2).contiguous(), None


def use_cheap_dropout(lm) -> None:
    """Swap a Hugging Face model's dropout layers and attention for the 16-bit-mask versions."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION, dropout_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)
    for parent in list(lm.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout:
                setattr(parent, name, Dropout(child.p, child.inplace))
    lm.set_attn_implementation(ATTENTION)

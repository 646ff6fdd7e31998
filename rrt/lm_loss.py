"""The causal LM loss as Hugging Face defines it (next-token cross-entropy, -100 ignored, mean
over counted tokens), with a backward pass that reuses the forward's log-probabilities in place.

torch's backward for cross-entropy allocates a zeroed batch x vocabulary gradient, scatters into
it, then runs the log-softmax backward into another one: five passes over the largest tensor of
a small model's step, plus fresh pages each time. Here the gradient is exp(log p) - one-hot,
scaled, written over the saved log-probabilities: two passes, no new memory.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE = -100


class _CrossEntropy(torch.autograd.Function):
    """Sum of -log p(target) over counted rows, divided by `divisor`."""

    @staticmethod
    def forward(ctx, logits, targets, divisor):
        """Log-softmax once; keep it, each row's weight (0 for ignored rows) and target for the backward."""
        logp = torch.log_softmax(logits, dim=-1)
        # Masks rather than `nonzero`: the number of counted rows would cost a GPU a host sync.
        counted = (targets != IGNORE).to(logp.dtype)
        safe = targets.clamp_min(0).unsqueeze(1)
        ctx.save_for_backward(logp, counted, safe)
        ctx.divisor = divisor
        return -(logp.gather(1, safe).squeeze(1) * counted).sum() / divisor

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        """(softmax - one-hot) * grad / divisor, built over the saved log-probabilities."""
        logp, counted, safe = ctx.saved_tensors
        weight = (counted * (grad / ctx.divisor)).unsqueeze(1)
        # The graph is freed after this pass (no retain_graph in training), so the saved
        # log-probabilities can become the gradient.
        probs = logp.exp_().mul_(weight)
        probs.scatter_add_(1, safe, weight.neg())
        return probs, None, None


def causal_lm_loss(logits, labels, vocab_size: int, num_items_in_batch=None, ignore_index: int = IGNORE,
                   shift_labels=None, **kwargs):
    """Hugging Face's `ForCausalLMLoss`, same arguments and value, with the cheaper backward."""
    if ignore_index != IGNORE:
        raise ValueError(f"causal_lm_loss ignores label {IGNORE} only, not {ignore_index}")
    if shift_labels is None:
        shift_labels = F.pad(labels, (0, 1), value=IGNORE)[..., 1:]
    targets = shift_labels.reshape(-1).to(logits.device)
    divisor = num_items_in_batch if num_items_in_batch is not None else (targets != IGNORE).sum()
    if torch.is_tensor(divisor):
        divisor = divisor.to(logits.device)
    return _CrossEntropy.apply(logits.float().reshape(-1, vocab_size), targets, divisor)

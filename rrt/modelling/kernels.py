"""Which kernels run the model: the attention implementation and torch.compile for training, and
where the rewriter's decode loop samples; every choice computes the same function
(tests/test_gpu_paths.py)."""

from __future__ import annotations

from rrt.modelling import varlen
from rrt.modelling.labelled_head import causal_lm, labelled_head

# The choices (rrt.config): train.attention is PyTorch's fused scaled-dot-product kernels (sdpa:
# flash or memory-efficient on a GPU), the library's plain matrix products (eager) or, for packed
# rows, flash attention by example (varlen: rrt.modelling.varlen); rewrite.decode
# `host` samples each token on the CPU from the logits (finished candidates leave the batch at
# once), `device` samples on the model's device from pre-drawn numbers and checks for finished
# candidates every few tokens, so the host never waits on the GPU per token.


def attention_implementation(setting: str) -> str:
    """The attn_implementation a model is built with for train.attention (varlen is registered
    with transformers first, under its own name)."""
    if setting == "varlen":
        return varlen.register()
    return setting


def resolve_compile(setting, device_type: str) -> bool:
    """`auto`: compile on a GPU (fused element-wise kernels, fewer launches), not on CPU (compile
    time there outweighs a short run's gain)."""
    if setting == "auto":
        return device_type == "cuda"
    return bool(setting)


def compile_model(lm, **options) -> None:
    """Compile the model's forward in place (its state dict keeps its names, so checkpoints
    and the export are unchanged); with the head on the labelled positions
    (rrt.modelling.labelled_head), its body only: how many positions the head takes is known only
    from the labels, a shape a compiled graph would break at. `options` go to torch.compile."""
    if labelled_head(lm):
        causal_lm(lm).base_model.compile(**options)
    else:
        lm.compile(**options)

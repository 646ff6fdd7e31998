"""Which weights a fine-tuning run trains: all of them, the top transformer blocks, or LoRA
adapters (peft). In the last two the embedding rows of the tokens we added still learn, and only
they: a pretrained model has never seen `<inst>` or `<tgt:vegan>`, and the tied LM head must
learn to emit `<endofinst>`, or a rewrite never ends.

The export is always a plain model: LoRA adapters are merged into their base weights, so
rewrite, evaluate and serve load every run the same way, with no peft at inference and no
extra matrix product per layer.
"""

from __future__ import annotations

# torch and peft (seconds to import) are imported where used: jobs/train.py imports this module,
# and its --help and driver start without them.
from typing import Any

from rrt.modelling.models import PaddedVocabulary

METHODS = ("full", "freeze", "lora")
SOME_ROWS = (
    "rrt_some_rows"  # the first row a weight learns, when it learns only some (no weight decay)
)


def transformer_blocks(lm):
    """The model's stack of transformer blocks: its longest ModuleList (GPT-2's `h`, Llama's `layers`)."""
    from torch import nn

    lists = [m for m in lm.modules() if isinstance(m, nn.ModuleList)]
    if not lists:
        raise ValueError(f"{type(lm).__name__} has no list of transformer blocks")
    return max(lists, key=len)


def _learn_rows_from(weight, first: int) -> None:
    """Only rows `first`.. of an embedding get gradients (the tokens we added)."""
    import torch

    keep = torch.zeros(weight.shape[0], 1, dtype=weight.dtype, device=weight.device)
    keep[first:] = 1
    setattr(weight, SOME_ROWS, first)
    weight.register_hook(lambda grad: grad * keep.to(grad.dtype))


def freeze_lower(lm, trainable_layers: int, new_tokens_from: int) -> None:
    """Train the top `trainable_layers` blocks and what follows them (final norm, an untied
    head); the lower blocks and position embeddings stay frozen, the token embedding learns
    only the rows of added tokens."""
    blocks = transformer_blocks(lm)
    trainable_layers = max(0, min(trainable_layers, len(blocks)))
    embedding = lm.get_input_embeddings().weight
    lower = {
        id(p)
        for block in list(blocks)[: len(blocks) - trainable_layers]
        for p in block.parameters()
    }
    for module in lm.modules():
        if isinstance(module, type(lm.get_input_embeddings())) and module.weight is not embedding:
            lower.add(id(module.weight))  # position embeddings (GPT-2's wpe)
    for parameter in lm.parameters():
        parameter.requires_grad_(id(parameter) not in lower)
    # The embedding (and the head tied to it) learns the added tokens' rows only, if any.
    embedding.requires_grad_(new_tokens_from < embedding.shape[0])
    if embedding.requires_grad:
        _learn_rows_from(embedding, new_tokens_from)


def add_lora(lm, lora: dict[str, Any], new_token_ids: list[int]):
    """The model wrapped with LoRA adapters (peft) on its linear layers, the added tokens' rows
    of the (tied) embedding trainable too."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=int(lora["r"]),
        lora_alpha=lora["alpha"],
        lora_dropout=float(lora["dropout"]),
        target_modules=lora["targets"],
        task_type="CAUSAL_LM",
        trainable_token_indices=list(new_token_ids) or None,
    )
    return get_peft_model(lm, config)


def prepare(
    lm,
    method: str,
    new_tokens: range,
    trainable_layers: int = 0,
    lora: dict | None = None,
    padding: PaddedVocabulary | None = None,
):
    """The model to train under `method` (full | freeze | lora); `new_tokens` are the ids we
    added to a pretrained vocabulary, `padding` the vocabulary's padding when it has any. lora
    returns a peft wrapper."""
    if method not in METHODS:
        raise ValueError(f"fine-tuning method must be one of {', '.join(METHODS)} (got {method!r})")
    if method == "lora" and not lora:
        raise ValueError("lora needs its settings (train.lora: r, alpha, dropout, targets)")
    if method == "freeze":
        freeze_lower(
            lm,
            trainable_layers,
            new_tokens.start if len(new_tokens) else lm.get_input_embeddings().weight.shape[0],
        )
    elif method == "lora":
        wrapped = add_lora(lm, lora, list(new_tokens))
        if padding is not None and padding.hook is not None:
            # peft computes a tied head inside its own wrapper, so the padding's mask moves there.
            padding.mask(wrapped)
        return wrapped
    return lm


def plain_model(lm):
    """The model to export: LoRA merged into the base weights, everything trainable again."""
    if hasattr(lm, "merge_and_unload"):
        lm = lm.merge_and_unload()
    for parameter in lm.parameters():
        parameter.requires_grad_(True)
    return lm


def optimizer_groups(lm, weight_decay: float) -> list[dict]:
    """The trained weights as AdamW groups: decay on matrices; none on biases, norms, or a weight
    that learns some rows only (decay would shrink its frozen pretrained rows too). An empty
    group is left out: DeepSpeed drops it, and a schedule must see the groups the engine keeps."""
    trained = [p for p in lm.parameters() if p.requires_grad]
    decay = [p for p in trained if p.ndim >= 2 and getattr(p, SOME_ROWS, None) is None]
    no_decay = [p for p in trained if p.ndim < 2 or getattr(p, SOME_ROWS, None) is not None]
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return [g for g in groups if g["params"]]


def new_tokens_from(tokenizer) -> int:
    """The first id of the tokens we added to a pretrained tokenizer (its base vocabulary's size)."""
    return min(int(tokenizer.vocab_size), len(tokenizer))


def parameter_counts(lm) -> dict[str, int]:
    """Trainable and total parameters (shared tensors counted once)."""
    seen: dict[int, Any] = {p.data_ptr(): p for p in lm.parameters()}
    total = sum(p.numel() for p in seen.values())
    # A weight that learns some rows only counts those rows.
    trainable = sum(
        p.numel()
        if getattr(p, SOME_ROWS, None) is None
        else (p.shape[0] - getattr(p, SOME_ROWS)) * p[0].numel()
        for p in seen.values()
        if p.requires_grad
    )
    return {"parameters": total, "trainable_parameters": trainable}

"""The LM head and the loss on the labelled positions only, for `train.loss_on` step or target.

The library's forward of a causal LM computes logits at every position, casts them to fp32, and
then takes the loss at the positions whose next token is labelled. With the loss on the rewrite
only, most positions of a Contextual text carry no label, so their logits (a vocabulary-wide row
each, forward and backward) are work and memory spent for nothing. `head_on_labels` makes a
model's forward, when it is given labels, run the body on every position and the LM head and the
cross-entropy only where the next token is labelled. The loss is the library's (the mean over the
labelled tokens), so the model computes the same function with the same gradients
(tests/test_labelled_head.py). Without labels (generation, scoring) the library's forward runs.

    head_on_labels(lm)          # True where the model family's logits are its head's (GPT-2, Llama, ...)
    compile_model(lm)           # rrt.modelling.kernels then compiles the body only
"""

from __future__ import annotations

# torch and transformers are imported where used: jobs/train.py imports this module (through
# rrt.modelling.models), and its --help and driver start without them.
import types

from rrt.modelling.batching import IGNORED
from rrt.modelling.decode_bodies import LLAMA_LIKE

# Families whose logits are the LM head on the body's last hidden states, with nothing after it
# (no soft-capping or scaling of the logits, which the library's forward would add).
FAMILIES = ("gpt2", *LLAMA_LIKE)


def causal_lm(lm):
    """The causal LM inside a fine-tuning library's wrapper (peft's LoRA), or the model itself."""
    return lm.get_base_model() if hasattr(lm, "get_base_model") else lm


def supports(lm) -> bool:
    """Whether the model's logits are its plain LM head on its body's output."""
    return getattr(getattr(causal_lm(lm), "config", None), "model_type", None) in FAMILIES


def head_on_labels(lm) -> bool:
    """Give `lm` (or the causal LM in its wrapper) a forward that, with labels, takes the head and
    the loss at the labelled positions only; False, and nothing changed, for other families."""
    if not supports(lm):
        return False
    model = causal_lm(lm)
    # Bound to the instance, so a deep copy of the model gets a forward bound to the copy.
    model.forward = types.MethodType(_forward, model)
    return True


def labelled_head(lm) -> bool:
    """Whether `lm` (or the causal LM in its wrapper) takes its head at the labelled positions only."""
    return getattr(getattr(causal_lm(lm), "forward", None), "__func__", None) is _forward


def _forward(self, input_ids=None, labels=None, **kwargs):
    """The library's forward without labels; with them, the loss from the labelled positions' logits."""
    if labels is None:
        return type(self).forward(self, input_ids=input_ids, **kwargs)
    return labelled_loss(self, input_ids, labels, kwargs)


def labelled_loss(model, input_ids, labels, inputs: dict):
    """The cross-entropy of the labelled next tokens, from the head on their positions only."""
    import torch.nn.functional as F
    from transformers.modeling_outputs import CausalLMOutputWithPast

    # As the library's loss: the mean, or with `num_items_in_batch` (gradient accumulation's count) the sum over it.
    count = inputs.get("num_items_in_batch")
    inputs = {
        k: v
        for k, v in inputs.items()
        if k not in ("num_items_in_batch", "logits_to_keep", "return_dict")
    }
    hidden = model.base_model(input_ids=input_ids, **inputs)[0]
    # Position t predicts token t + 1: the library shifts the labels the same way.
    targets = labels[:, 1:]
    kept = targets != IGNORED
    logits = model.get_output_embeddings()(hidden[:, :-1][kept])
    loss = F.cross_entropy(
        logits.float(), targets[kept], reduction="mean" if count is None else "sum"
    )
    return CausalLMOutputWithPast(loss=loss if count is None else loss / count)

"""The LM head on the labelled positions only (rrt/modelling/labelled_head.py) computes the library's
loss and gradients: GPT-2 and Llama, padded and packed batches, a padded vocabulary, LoRA, compiled;
without labels the library's forward runs, and other model families are left as they are."""

from __future__ import annotations

import copy

import pytest
import torch
from test_gpu_paths import PAD, VOCAB, _examples, _gpt2, _llama

from rrt.modelling.batching import pad_batch
from rrt.modelling.kernels import compile_model
from rrt.modelling.labelled_head import causal_lm, head_on_labels, labelled_head
from rrt.modelling.models import pad_vocabulary
from rrt.modelling.packing import pack_rows, packed_batch
from rrt.training import finetune


def _loss_and_grads(lm, inputs: dict):
    """The loss and every trained parameter's gradient of one forward and backward."""
    lm.zero_grad(set_to_none=True)
    loss = lm(**inputs).loss
    loss.backward()
    return loss.detach(), {
        name: p.grad.detach().clone() for name, p in lm.named_parameters() if p.grad is not None
    }


def _head_positions(lm, inputs: dict) -> int:
    """How many positions the LM head computes logits for in one forward."""
    seen = []
    head = causal_lm(lm).get_output_embeddings()
    hook = head.register_forward_hook(lambda module, args, out: seen.append(out.shape[:-1].numel()))
    try:
        with torch.no_grad():
            lm(**inputs)
    finally:
        hook.remove()
    return sum(seen)


def _labelled(inputs: dict) -> int:
    """Positions whose next token is labelled."""
    return int((inputs["labels"][:, 1:] != -100).sum())


def _assert_same(want, got, atol=1e-6):
    (w_loss, w_grads), (g_loss, g_grads) = want, got
    torch.testing.assert_close(w_loss, g_loss, atol=atol, rtol=1e-5)
    assert w_grads.keys() == g_grads.keys() and w_grads
    for name in w_grads:
        torch.testing.assert_close(w_grads[name], g_grads[name], atol=atol, rtol=1e-4, msg=name)


def _batches(examples):
    """A padded batch and a packed one of the same examples, loss on the target."""
    padded = pad_batch(examples, PAD, "target").inputs("cpu")
    packed = packed_batch(pack_rows(examples, 64), PAD, "target", 64).inputs("cpu")
    return {"padded": padded, "packed": packed}


def _both(build, prepare=lambda lm: lm):
    """The library's model and a copy that takes its head on the labelled positions."""
    library = prepare(build())
    ours = copy.deepcopy(library)
    assert head_on_labels(ours) and labelled_head(ours) and not labelled_head(library)
    return library, ours


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("kind", ["padded", "packed"])
def test_the_loss_and_gradients_are_the_librarys(family, kind):
    library, ours = _both(_gpt2 if family == "gpt2" else _llama)
    inputs = _batches(_examples())[kind]
    _assert_same(_loss_and_grads(library, inputs), _loss_and_grads(ours, inputs))
    assert _head_positions(library, inputs) == inputs["input_ids"].numel()
    assert 0 < _head_positions(ours, inputs) == _labelled(inputs) < inputs["input_ids"].numel() / 2


def test_a_shifted_label_is_a_different_loss():
    """The control: the head must read the position before each label, as the library's loss does."""
    library, ours = _both(_gpt2)
    inputs = _batches(_examples())["padded"]
    want, _ = _loss_and_grads(library, inputs)
    shifted = dict(inputs, labels=torch.roll(inputs["labels"], 1, dims=1))
    got, _ = _loss_and_grads(ours, shifted)
    assert not torch.allclose(want, got, atol=1e-3)


def test_a_padded_vocabulary_keeps_its_padding_rows_out():
    """pad_vocabulary's -inf hook sits on the head, which now sees the labelled positions only."""
    library, ours = _both(_llama, lambda lm: (pad_vocabulary(lm, 64), lm)[1])
    assert ours.get_input_embeddings().weight.shape[0] % 64 == 0 and VOCAB % 64
    inputs = _batches(_examples())["packed"]
    _assert_same(_loss_and_grads(library, inputs), _loss_and_grads(ours, inputs))
    assert _head_positions(ours, inputs) == _labelled(inputs)


@pytest.mark.parametrize("method", ["freeze", "lora"])
def test_fine_tuning_methods_train_the_same_rows(method):
    from rrt.config import load_settings

    lora = load_settings().train.lora.model_dump()

    def prepare(lm):
        return finetune.prepare(
            lm.train(), method, range(VOCAB - 20, VOCAB), trainable_layers=1, lora=lora
        ).eval()

    torch.manual_seed(0)
    library = prepare(_llama())
    torch.manual_seed(0)
    ours = prepare(_llama())
    assert head_on_labels(ours) and labelled_head(ours)
    inputs = _batches(_examples())["padded"]
    _assert_same(_loss_and_grads(library, inputs), _loss_and_grads(ours, inputs))
    assert _head_positions(ours, inputs) == _labelled(inputs)


def test_without_labels_the_librarys_forward_runs():
    library, ours = _both(_gpt2)
    inputs = _batches(_examples())["padded"]
    inputs.pop("labels")
    with torch.no_grad():
        torch.testing.assert_close(library(**inputs).logits, ours(**inputs).logits)


def test_other_families_are_left_as_they_are():
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(
        "gpt_neox",
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
    )
    lm = AutoModelForCausalLM.from_config(config)
    forward = lm.forward
    assert not head_on_labels(lm) and not labelled_head(lm) and lm.forward == forward


def test_compiled_the_body_gives_the_same_loss():
    pytest.importorskip("torch._inductor")
    library, ours = _both(_gpt2)
    compile_model(ours)
    # The body is compiled, not the whole forward: the head's gather would break its graph.
    assert ours.base_model._compiled_call_impl is not None and ours._compiled_call_impl is None
    inputs = _batches(_examples())["packed"]
    _assert_same(_loss_and_grads(library, inputs), _loss_and_grads(ours, inputs), atol=1e-4)
    assert _head_positions(ours, inputs) == _labelled(inputs)
    assert list(ours.state_dict()) == list(library.state_dict())  # checkpoints keep their names


def test_a_copy_takes_its_own_head():
    """The forward is bound to its model: a deep copy's forward runs the copy's weights."""
    _, ours = _both(_gpt2)
    twin = copy.deepcopy(ours)
    assert labelled_head(twin) and twin.forward.__self__ is twin
    with torch.no_grad():
        twin.get_output_embeddings().weight.mul_(2)
    inputs = _batches(_examples())["padded"]
    assert not torch.allclose(_loss_and_grads(ours, inputs)[0], _loss_and_grads(twin, inputs)[0])


def test_a_count_of_items_sums_the_loss_over_it_as_the_library_does():
    library, ours = _both(_llama)
    inputs = dict(_batches(_examples())["padded"], num_items_in_batch=torch.tensor(500))
    _assert_same(_loss_and_grads(library, inputs), _loss_and_grads(ours, inputs))

"""Our cheaper training computations compute the same functions: 16-bit dropout masks, the
attention that uses them, and the causal LM loss with its in-place backward."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from transformers.loss.loss_utils import ForCausalLMLoss

from rrt.dropout import ATTENTION, Dropout, dropout_attention, keep_mask, masked_dropout
from rrt.lm_loss import causal_lm_loss
from rrt.models import build_model, pad_vocabulary, training_kernels, trim_vocabulary

SHAPE = {"n_layer": 2, "n_head": 2, "n_embd": 32}


def test_masks_keep_one_minus_p_with_unbiased_lanes():
    torch.manual_seed(0)
    keep, scale = keep_mask(torch.Size([1_000_000]), 0.1, torch.device("cpu"))
    assert keep.dtype == torch.bool and keep.shape == (1_000_000,)
    assert abs(keep.float().mean().item() - (1 - 6554 / 65536)) < 0.002
    assert scale == pytest.approx(65536 / (65536 - 6554))
    # Each of the four 16-bit lanes of a 64-bit draw drops its share, none more.
    lanes = keep.view(-1, 4).float().mean(0)
    assert torch.all((lanes - lanes.mean()).abs() < 0.004), lanes


def test_dropout_keeps_expectations_and_masks_its_gradient():
    torch.manual_seed(1)
    x = torch.ones(400_000, requires_grad=True)
    out = masked_dropout(x, 0.2)
    assert out.detach().unique().tolist() == pytest.approx([0.0, 65536 / (65536 - round(0.2 * 65536))])
    assert out.mean().item() == pytest.approx(1.0, abs=0.01)
    out.sum().backward()
    assert torch.equal(x.grad, out.detach())  # d(x * mask * scale)/dx with x = 1
    assert masked_dropout(x, 0.2, training=False) is x and masked_dropout(x, 0.0) is x
    module = Dropout(0.3).eval()
    assert module(x) is x and module.p == 0.3


@pytest.mark.parametrize("length", [16, 96])
@pytest.mark.parametrize("padded", [False, True])
def test_attention_without_drops_equals_torch_sdpa(padded, length):
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 3, length, 8, requires_grad=True) for _ in range(3))
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    mask = None
    if padded:
        keys = torch.ones(2, length, dtype=torch.bool)
        keys[0, length - 5:] = False
        mask = (causal[None] & keys[:, None, :])[:, None]
    # A rate this small drops nothing at 16 bits, so the result must be plain attention.
    ours, _ = dropout_attention(None, q, k, v, mask, dropout=1e-7, scaling=8 ** -0.5)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None).transpose(1, 2)
    assert torch.allclose(ours, expected, atol=1e-5)
    grads = torch.autograd.grad(ours.sum(), (q, k, v))
    for got, want in zip(grads, torch.autograd.grad(expected.sum(), (q, k, v))):
        assert torch.allclose(got, want, atol=1e-5)


def test_attention_takes_additive_masks_and_no_mask_when_not_causal():
    torch.manual_seed(6)
    q, k, v = (torch.randn(1, 2, 80, 4) for _ in range(3))
    additive = torch.zeros(1, 1, 80, 80).masked_fill(torch.ones(80, 80, dtype=torch.bool).tril().logical_not(),
                                                     float("-inf"))
    ours, _ = dropout_attention(None, q, k, v, additive, dropout=1e-7, scaling=0.5)
    assert torch.allclose(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.5).transpose(1, 2),
                          atol=1e-5)
    full, _ = dropout_attention(None, q, k, v, None, dropout=1e-7, scaling=0.5, is_causal=False)
    assert torch.allclose(full, F.scaled_dot_product_attention(q, k, v, scale=0.5).transpose(1, 2), atol=1e-5)


def test_attention_drops_weights_and_survives_a_row_with_nothing_allowed():
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 2, 8, 4) for _ in range(3))
    mask = torch.zeros(1, 1, 8, 8, dtype=torch.bool)
    out, _ = dropout_attention(None, q, k, v, mask, dropout=0.5, scaling=0.5)
    assert torch.isfinite(out).all()
    plain, _ = dropout_attention(None, q, k, v, None, dropout=0.0, scaling=0.5)
    dropped, _ = dropout_attention(None, q, k, v, None, dropout=0.5, scaling=0.5)
    assert not torch.allclose(plain, dropped)


def test_models_with_the_cheap_kernels_compute_the_same_outputs_and_export_cleanly(tmp_path):
    stock = build_model("tiny", 300, SHAPE, seed=4).eval()
    ours = build_model("tiny", 300, SHAPE, seed=4)
    assert training_kernels(ours, on_gpu=False) == {"fast_dropout": True, "fused_loss": True}
    assert ours.config._attn_implementation == ATTENTION
    assert not any(type(m) is torch.nn.Dropout for m in ours.modules())
    ids = torch.randint(0, 300, (2, 24))
    mask = torch.ones_like(ids)
    mask[1, 20:] = 0
    labels = ids.masked_fill(mask == 0, -100)
    ours.eval()
    want, got = stock(input_ids=ids, attention_mask=mask, labels=labels), ours(input_ids=ids, attention_mask=mask,
                                                                                  labels=labels)
    assert torch.allclose(want.logits, got.logits, atol=1e-5) and torch.allclose(want.loss, got.loss, atol=1e-6)
    ours.train()
    loss = ours(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False).loss
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in ours.parameters() if p.grad is not None)
    ours.save_pretrained(tmp_path)
    assert ATTENTION not in (tmp_path / "config.json").read_text()
    assert json.loads((tmp_path / "config.json").read_text())["attn_pdrop"] == pytest.approx(0.1)


@pytest.mark.parametrize("fused", [True, False])
def test_a_padded_vocabulary_is_the_same_model_and_exports_unpadded(tmp_path, fused):
    plain = build_model("tiny", 300, SHAPE, seed=5)
    padded = build_model("tiny", 300, SHAPE, seed=5)
    training_kernels(plain, on_gpu=False, fused_loss=fused)
    training_kernels(padded, on_gpu=False, fused_loss=fused)
    assert pad_vocabulary(padded, 64) == 300 and padded.config.vocab_size == 320
    plain.eval()
    padded.eval()
    assert padded.lm_head.weight is padded.transformer.wte.weight  # still tied
    ids = torch.randint(0, 300, (2, 16))
    want, got = plain(input_ids=ids, labels=ids), padded(input_ids=ids, labels=ids)
    assert torch.isneginf(got.logits[..., 300:]).all()
    assert torch.allclose(want.logits, got.logits[..., :300]) and torch.allclose(want.loss, got.loss)
    want.loss.backward()
    got.loss.backward()
    grad = padded.transformer.wte.weight.grad
    assert torch.allclose(grad[:300], plain.transformer.wte.weight.grad, atol=1e-6)
    assert torch.count_nonzero(grad[300:]) == 0  # the padding rows never learn
    trim_vocabulary(padded, 300)
    assert padded.config.vocab_size == 300 and padded.lm_head.weight.shape[0] == 300
    padded.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["vocab_size"] == 300
    assert torch.allclose(padded(input_ids=ids).logits, want.logits)
    assert pad_vocabulary(plain, 1) == 300 and pad_vocabulary(plain, 60) == 300  # off; already a multiple


def test_gpu_keeps_torchs_dropout_unless_asked():
    lm = build_model("tiny", 300, SHAPE)
    assert training_kernels(lm, on_gpu=True, fused_loss=False) == {"fast_dropout": False, "fused_loss": False}
    assert lm.config._attn_implementation != ATTENTION
    assert training_kernels(build_model("tiny", 300, SHAPE), on_gpu=True, fast_dropout=True)["fast_dropout"]


@pytest.mark.parametrize("items", [None, 37])
def test_loss_and_gradient_equal_hugging_faces(items):
    torch.manual_seed(5)
    logits = torch.randn(3, 17, 50, requires_grad=True)
    labels = torch.randint(0, 50, (3, 17))
    labels[0, 10:] = -100
    labels[2, :4] = -100
    count = None if items is None else torch.tensor(items)
    want = ForCausalLMLoss(logits, labels, 50, num_items_in_batch=count)
    (want_grad,) = torch.autograd.grad(want, logits)
    got = causal_lm_loss(logits, labels, 50, num_items_in_batch=count)
    (got_grad,) = torch.autograd.grad(got, logits)
    assert got.item() == pytest.approx(want.item(), rel=1e-6)
    assert torch.allclose(got_grad, want_grad, atol=1e-8)


def test_loss_refuses_another_ignore_label():
    with pytest.raises(ValueError, match="-100"):
        causal_lm_loss(torch.randn(1, 4, 5), torch.zeros(1, 4, dtype=torch.long), 5, ignore_index=0)

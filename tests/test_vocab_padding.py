"""An LM head padded to a multiple of rows while training is the same model, and exports unpadded."""

from __future__ import annotations

import json

import torch

from rrt.modelling.models import build_model, pad_vocabulary

SHAPE = {"n_layer": 2, "n_head": 2, "n_embd": 32}


def test_a_padded_vocabulary_is_the_same_model_and_exports_unpadded(tmp_path):
    plain = build_model("tiny", 300, SHAPE, seed=5)
    padded = build_model("tiny", 300, SHAPE, seed=5)
    padding = pad_vocabulary(padded, 64)
    assert padding.live == 300 and padded.config.vocab_size == 320
    plain.eval()
    padded.eval()
    assert padded.lm_head.weight is padded.transformer.wte.weight  # still tied
    ids = torch.randint(0, 300, (2, 16))
    want, got = plain(input_ids=ids, labels=ids), padded(input_ids=ids, labels=ids)
    assert torch.isneginf(got.logits[..., 300:]).all()
    assert torch.allclose(want.logits, got.logits[..., :300]) and torch.allclose(
        want.loss, got.loss
    )
    want.loss.backward()
    got.loss.backward()
    grad = padded.transformer.wte.weight.grad
    assert torch.allclose(grad[:300], plain.transformer.wte.weight.grad, atol=1e-6)
    assert torch.count_nonzero(grad[300:]) == 0  # the padding rows never learn
    padding.trim(padded)
    assert padded.config.vocab_size == 300 and padded.lm_head.weight.shape[0] == 300
    padded.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["vocab_size"] == 300
    assert torch.allclose(padded(input_ids=ids).logits, want.logits)
    assert (
        pad_vocabulary(plain, 1).live == 300 and pad_vocabulary(plain, 60).live == 300
    )  # off; already a multiple

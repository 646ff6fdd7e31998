"""A model's training lifecycle through its one owner: made ready, then exported as a plain model."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import SAMPLE
from transformers import AutoModelForCausalLM

from rrt.config import load_settings
from rrt.corpus import formats
from rrt.modelling.models import train_tiny_tokenizer
from rrt.recipes.loaders import read_recipes
from rrt.training.training_model import export, prepare_for_training

TINY_SHAPE = {"n_layer": 1, "n_head": 2, "n_embd": 32, "n_positions": 128}


@pytest.fixture(scope="module")
def tokenizer():
    recipes = list(read_recipes([str(SAMPLE)]))
    return train_tiny_tokenizer(
        [formats.no_source(r.title, r.ingredients, r.steps) for r in recipes], 700
    )


def _train_settings(**changes):
    train = load_settings().train
    tiny = train.tiny.model_copy(update=TINY_SHAPE)
    return train.model_copy(update={"model": "tiny", "tiny": tiny, "compile": False, **changes})


@pytest.mark.parametrize(
    ("loss_on", "pad_to", "head"),
    [("step", 64, "labelled positions"), ("all", 1, "every position")],
)
def test_a_prepared_model_exports_exactly_the_tokenizers_rows(
    tmp_path, tokenizer, loss_on, pad_to, head
):
    train = _train_settings(loss_on=loss_on, pad_vocab_to=pad_to, finetune="full")
    model = prepare_for_training(train, tokenizer, block=64, device_type="cpu")
    assert model.live_vocab == len(tokenizer)
    assert model.padded_vocab % pad_to == 0 and model.padded_vocab >= len(tokenizer)
    assert model.head == head
    assert model.sizes["parameters"] > 0
    ids = torch.tensor([tokenizer.encode("Whisk the eggs.", add_special_tokens=False)])
    model.lm.eval()  # no dropout: the same function before and after the export
    with torch.no_grad():
        before = model.lm(input_ids=ids).logits[0, -1, : len(tokenizer)]
    export(model.lm, model, tokenizer, str(tmp_path / "model"), {"variant": "no_source"})
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "model").eval()
    assert saved.get_input_embeddings().weight.shape[0] == len(tokenizer)
    assert json.loads((tmp_path / "model" / "rrt_meta.json").read_text())["variant"] == "no_source"
    with torch.no_grad():
        after = saved(input_ids=ids).logits[0, -1]
    # The export computes what the trained model computed, over the tokenizer's rows.
    assert torch.allclose(before, after, atol=1e-4)

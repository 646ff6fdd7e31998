"""Token batches, model presets and optimisation settings used by training."""

from __future__ import annotations

import random
from itertools import pairwise

import numpy as np
import pyarrow as pa
import pytest

from rrt.config import load_settings
from rrt.corpus.formats import contextual, contextual_ing, no_context, no_source
from rrt.modelling.batching import (
    bucket_batches,
    fit_block,
    pad_batch,
    token_budget_chunks,
    tokenize_table,
)
from rrt.modelling.models import build_model, special_tokens, train_tiny_tokenizer
from rrt.training.optim import deepspeed_config, lr_factor, resolve_precision
from rrt.training.speed import attention_flops_per_token, estimate_mfu, gpu_peak_flops

TITLE, INGS = "Hot Cocoa", ["2 cups milk", "3 tbsp cocoa", "2 tbsp sugar"]
SOURCE = ["Warm the milk in a pan.", "Whisk in the cocoa and sugar.", "Pour into mugs and serve."]
TARGET = ["Warm the soymilk in a pan.", "Whisk in the cocoa and sugar."]


@pytest.fixture(scope="module")
def tokenizer():
    texts = [
        contextual(TITLE, INGS, SOURCE[:n], TARGET[: min(n, 2)], "vegan") for n in (1, 2, 3)
    ] * 30
    return train_tiny_tokenizer(texts, vocab_size=400)


def test_every_special_token_is_one_token(tokenizer):
    for token in special_tokens():
        assert (
            tokenizer.convert_tokens_to_ids(token) != tokenizer.unk_token_id
            or token == tokenizer.unk_token
        )
        assert len(tokenizer(token, add_special_tokens=False).input_ids) == 1, token
    text = contextual(TITLE, INGS, SOURCE, TARGET, "vegan")
    assert tokenizer.decode(tokenizer(text).input_ids).replace(" ", "") == text.replace(" ", "")


def test_truncation_cuts_the_source_context_from_the_left_and_keeps_the_target(tokenizer):
    text = contextual(TITLE, INGS, SOURCE, TARGET, "vegan")
    full = tokenize_table(
        pa.table({"text": [text]}), tokenizer.backend_tokenizer.to_str(), "contextual", 1024
    )
    ids, start = full.column("input_ids")[0].as_py(), full.column("target_start")[0].as_py()
    assert tokenizer.convert_ids_to_tokens(ids[start]) == "<tgt:vegan>"
    block = len(ids) - 10
    cut = tokenize_table(
        pa.table({"text": [text]}), tokenizer.backend_tokenizer.to_str(), "contextual", block
    )
    kept, kept_start = cut.column("input_ids")[0].as_py(), cut.column("target_start")[0].as_py()
    assert len(kept) == block and cut.column("truncated")[0].as_py()
    assert kept[:2] == ids[:2]  # BOS and the source tag stay
    assert kept[kept_start:] == ids[start:]  # the whole target stays
    assert (
        kept[2:kept_start] == ids[start - (kept_start - 2) : start]
    )  # the context nearest the target stays


@pytest.mark.parametrize("block", [1024, 40])
@pytest.mark.parametrize("steps", [1, 2])
def test_the_learned_step_starts_after_the_earlier_target_steps(tokenizer, steps, block):
    # What the rewriter writes is the last target step; the earlier ones are its own rewrites then.
    table = tokenizer.backend_tokenizer.to_str()
    texts = {
        "contextual": contextual(TITLE, INGS, SOURCE, TARGET[:steps], "vegan"),
        "contextual_ing": contextual_ing(
            TITLE, INGS, SOURCE, TARGET[:steps], "vegan", ["cocoa", "sugar"]
        ),
    }
    for variant, text in texts.items():
        rows = tokenize_table(pa.table({"text": [text]}), table, variant, block)
        ids, start, step = (
            rows.column(c)[0].as_py() for c in ("input_ids", "target_start", "step_start")
        )
        assert block > len(ids) or rows.column("truncated")[0].as_py()
        assert tokenizer.convert_ids_to_tokens(ids[start]) == "<tgt:vegan>" and step > start
        assert tokenizer.convert_ids_to_tokens(ids[step - 1]) == (
            "<endofprompt>"
            if variant == "contextual_ing"
            else "<inst>"
            if steps > 1
            else "<tgt:vegan>"
        )
        assert (
            tokenizer.decode(ids[step:])
            .replace(" ", "")
            .startswith(TARGET[steps - 1].replace(" ", ""))
        )
    plain = tokenize_table(
        pa.table({"text": [no_context(TITLE, SOURCE[0], TARGET[0], "vegan")]}),
        table,
        "no_context",
        block,
    )
    assert plain.column("step_start")[0].as_py() == plain.column("target_start")[0].as_py()


def test_a_target_longer_than_the_block_is_marked_not_cut(tokenizer):
    text = contextual(TITLE, INGS, SOURCE, TARGET * 20, "vegan")
    rows = tokenize_table(
        pa.table({"text": [text]}), tokenizer.backend_tokenizer.to_str(), "contextual", 64
    )
    assert rows.column("length")[0].as_py() == 0 and rows.column("truncated")[0].as_py()


def test_a_plain_recipe_is_cut_from_the_right():
    assert fit_block(list(range(10)), 0, 4, 0) == ([0, 1, 2, 3], 0)
    assert fit_block(list(range(10)), 6, 8, 2) == ([0, 1, 4, 5, 6, 7, 8, 9], 4)
    assert fit_block(list(range(10)), 2, 5, 2) is None
    assert no_source(TITLE, INGS, SOURCE).startswith("<|startoftext|>")


def test_pad_batch_masks_padding_and_optionally_the_context():
    batch = pad_batch(
        [(np.array([5, 6, 7]), 1), (np.array([5, 6, 7, 8, 9]), 2)], pad_id=0, loss_on="target"
    )
    assert batch.input_ids.shape == (2, 8) and batch.real_tokens == 8 and batch.total_tokens == 16
    assert batch.labels[0].tolist() == [-100, 6, 7] + [-100] * 5
    assert batch.labels[1].tolist() == [-100, -100, 7, 8, 9] + [-100] * 3
    assert batch.attention_mask[0].tolist() == [1, 1, 1] + [0] * 5
    # With the learned step's start as the example's start, "step" labels as "target" does.
    assert pad_batch([(np.array([5, 6, 7]), 1)], pad_id=0, loss_on="step").labels[
        0, :3
    ].tolist() == [-100, 6, 7]
    every = pad_batch([(np.array([5, 6, 7]), 1)], pad_id=0, loss_on="all")
    assert every.labels[0, :3].tolist() == [5, 6, 7]


def test_length_buckets_keep_padding_low_and_lose_no_example():
    rng = random.Random(0)
    window = [(np.arange(rng.choice([20, 60, 120, 250])), 0) for _ in range(512)]
    padded_to_block = pad_batch(window, 0, "all", multiple=256)
    by_rows = list(bucket_batches(window, 8, 0, "all", random.Random(1)))
    by_tokens = list(bucket_batches(window, 8, 0, "all", random.Random(1), token_budget=8 * 256))
    for batches in (by_rows, by_tokens):
        assert sum(len(b.input_ids) for b in batches) == 512
        assert sum(b.real_tokens for b in batches) == sum(len(ids) for ids, _ in window)
        assert 1 - sum(b.real_tokens for b in batches) / sum(b.total_tokens for b in batches) < 0.05
    assert 1 - padded_to_block.real_tokens / padded_to_block.total_tokens > 0.3
    assert all(b.total_tokens <= 8 * 256 for b in by_tokens)
    assert len(by_tokens) < len(by_rows)  # short rows travel together


def test_token_budget_chunks_never_exceed_the_budget():
    examples = [(np.arange(n), 0) for n in sorted([3, 9, 17, 40, 41, 64, 100, 200])]
    chunks = token_budget_chunks(examples, budget=128)
    assert [len(e[0]) for c in chunks for e in c] == [3, 9, 17, 40, 41, 64, 100, 200]
    for chunk in chunks[:-1]:
        assert len(chunk) * -(-max(len(e[0]) for e in chunk) // 8) * 8 <= 128


def test_tiny_model_matches_the_tokenizer(tokenizer):
    lm = build_model(
        "tiny",
        len(tokenizer),
        {"n_layer": 1, "n_head": 2, "n_embd": 32},
        seed=1,
        pad_token_id=tokenizer.pad_token_id,
    )
    assert lm.get_input_embeddings().weight.shape[0] == len(tokenizer)
    assert lm.config.n_layer == 1 and lm.config.pad_token_id == tokenizer.pad_token_id


def test_precision_and_deepspeed_config():
    assert resolve_precision("auto", cuda=False, bf16_supported=False) == "fp32"
    assert resolve_precision("auto", cuda=True, bf16_supported=False) == "fp16"  # V100
    assert resolve_precision("auto", cuda=True, bf16_supported=True) == "bf16"
    block = load_settings().train.deepspeed.model_dump()
    config = deepspeed_config({**block, "zero_stage": 2, "micro_batch": 4, "grad_accum": 2}, "fp16")
    assert config["zero_optimization"]["stage"] == 2 and config["fp16"]["enabled"]
    assert (
        config["train_micro_batch_size_per_gpu"] == 4 and config["gradient_accumulation_steps"] == 2
    )
    assert "fp16" not in deepspeed_config(block, "fp32") and "bf16" not in deepspeed_config(
        block, "fp32"
    )
    zero = deepspeed_config({**block, "bucket_size": 5.0e6}, "fp32")["zero_optimization"]
    assert zero["reduce_bucket_size"] == zero["allgather_bucket_size"] == 5_000_000
    cluster = load_settings(profile="v100x64").train.deepspeed.model_dump()
    assert (
        deepspeed_config(cluster, "fp16")["zero_optimization"]["reduce_bucket_size"] == 500_000_000
    )


def test_lr_schedule_warms_up_then_decays_to_the_floor():
    factors = [lr_factor(s, 10, 100, "cosine", 0.1) for s in range(101)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in pairwise(factors[10:]))
    assert factors[100] == pytest.approx(0.1)
    assert lr_factor(55, 10, 100, "linear", 0.0) == pytest.approx(0.5)


def test_mfu_formula():
    assert estimate_mfu(1_000_000, 1000.0, 6e9) == pytest.approx(1.0)
    # Freezing: the forward runs every weight, the backward only the trained ones (2N + 4T).
    assert estimate_mfu(
        1_000_000, 1000.0, 6e9, trainable=250_000, method="freeze"
    ) == pytest.approx(0.5)
    assert estimate_mfu(1_000_000, 1000.0, 6e9, trainable=10_000, method="lora") == pytest.approx(
        4 / 6
    )
    # PaLM's count adds attention's products: gpt2-medium at a 256-token context, 3.5% more than 6N.
    attention = attention_flops_per_token(24, 1024, 256)
    assert attention == 12 * 24 * 1024 * 256
    assert estimate_mfu(354_862_080, 1000.0, 1e12, extra_flops=attention) / estimate_mfu(
        354_862_080, 1000.0, 1e12
    ) == pytest.approx(1.0355, abs=1e-4)
    assert (
        gpu_peak_flops("Tesla V100-SXM2-16GB") == 125e12 and gpu_peak_flops("NVIDIA H200") == 989e12
    )
    assert gpu_peak_flops("Some CPU") is None


def test_built_models_use_the_fused_tanh_gelu_which_equals_gpt2s_own():
    import math

    import torch

    from rrt.modelling.models import build_model

    lm = build_model("tiny", 300, {"n_layer": 1, "n_head": 2, "n_embd": 16})
    assert lm.config.activation_function == "gelu_pytorch_tanh"
    x = torch.linspace(-8, 8, 10_001)
    # GPT-2's own activation (`gelu_new`), evaluated in float64: its float32 form goes through torch.tanh,
    # which on some CPU runs is off by about 1e-4 near |x| = 4 and so cannot be the reference.
    exact = (
        0.5
        * x.double()
        * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x.double() + 0.044715 * x.double() ** 3)))
    )
    assert torch.allclose(lm.transformer.h[0].mlp.act(x).double(), exact, atol=1e-6)


class _Shard:
    """A worker's shard as Ray Train hands it over, reduced to the one call the worker makes."""

    def __init__(self, table: pa.Table):
        self.table = table

    def iter_batches(self, batch_size: int, batch_format: str, **_):
        yield {
            name: self.table.column(name).to_numpy(zero_copy_only=False)
            for name in self.table.column_names
        }


@pytest.mark.parametrize("loss_on", ["step", "target", "all"])
def test_the_worker_labels_what_train_loss_on_names(tokenizer, loss_on):
    from jobs.train_plan import BatchPlan
    from jobs.train_worker import micro_batches

    text = contextual_ing(TITLE, INGS, SOURCE, TARGET, "vegan", ["cocoa", "sugar"])
    rows = tokenize_table(
        pa.table({"text": [text]}), tokenizer.backend_tokenizer.to_str(), "contextual_ing", 1024
    )
    plan = BatchPlan(
        variant="contextual_ing",
        micro_batch=1,
        bucket_window=1,
        batching="tokens",
        pad_id=0,
        loss_on=loss_on,
    )
    (batch,) = micro_batches(_Shard(rows), plan, seed=0, counts=None)
    learned = [t for t in batch.labels[0].tolist() if t != -100]
    expected = {"step": TARGET[-1:], "target": TARGET, "all": [TITLE, *SOURCE, *TARGET]}
    words = tokenizer.decode(learned, skip_special_tokens=True).replace(" ", "")
    assert all(part.replace(" ", "") in words for part in expected[loss_on])
    if loss_on == "step":
        assert words.replace(TARGET[-1].replace(" ", ""), "") == ""  # nothing but the learned step

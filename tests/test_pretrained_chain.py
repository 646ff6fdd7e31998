"""A pretrained Llama through the whole chain on Ray: fine-tuning of the Contextual Rewriter
(Ray Train + DeepSpeed) from a tiny random Llama folder, batch rewriting (Ray Data) and evaluation
with its plain export. The real recipes come from ../shared/data (the `prepared` fixture)."""

from __future__ import annotations

import json
import math
import os

import pytest
from conftest import needs_dictionary, needs_shared_data, quick_train_config, run_script

from testing.local_service import tiny_llama

pytestmark = [pytest.mark.slow, pytest.mark.shared_data, needs_shared_data, needs_dictionary]

# freeze runs through build_engine in test_finetune.py; here LoRA goes all the way (merge, export), trained
# by the plain PyTorch engine (the other training jobs under test run DeepSpeed).
FINETUNE = "lora"


def done_ok(done, what: str) -> None:
    """The job exited 0; else its stderr tail is the failure message."""
    assert done.returncode == 0, f"{what} exited {done.returncode}:\n{done.stderr[-4000:]}"


@pytest.fixture(scope="module")
def tuned(prepared, tmp_path_factory):
    """The Contextual Rewriter fine-tuned (FINETUNE) from a tiny Llama for 4 steps by the torch engine:
    (base, run folder, result)."""
    folder = tmp_path_factory.mktemp("llama-chain")
    base = tiny_llama(str(folder / "base"))
    config = quick_train_config(
        folder,
        model=base,
        finetune=FINETUNE,
        trainable_layers=1,
        eval_examples=16,
        engine="torch",
        checkpoint_interval=2,
    )
    out = folder / "run"
    done = run_script(
        "train_contextual.py",
        "--data",
        str(prepared[0]),
        "--output",
        str(out),
        "--config",
        config,
        "--model",
        base,
        "--finetune",
        FINETUNE,
        "--max-steps",
        "4",
        "--micro-batch",
        "2",
        "--num-workers",
        "1",
        "--lr",
        "1e-3",
        timeout=600,
    )
    done_ok(done, "train_contextual.py")
    return base, out, done


@pytest.fixture(scope="module")
def rewritten(prepared, tuned, tmp_path_factory):
    """Three test recipes rewritten by the fine-tuned export: (folder, result)."""
    out = tmp_path_factory.mktemp("llama-rewrite") / "run"
    done = run_script(
        "rewrite.py",
        "--data",
        str(prepared[0]),
        "--system",
        "contextual",
        "--model",
        str(tuned[1] / "model"),
        "--output",
        str(out),
        "--num-recipes",
        "3",
        "--candidates",
        "2",
        "--actors",
        "1",
        timeout=600,
    )
    done_ok(done, "rewrite.py")
    return out, done


def test_the_run_exports_a_plain_llama_that_kept_the_pretrained_rows(tuned):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    base, out, done = tuned
    model = out / "model"
    config = json.loads((model / "config.json").read_text())
    assert config["model_type"] == "llama" and config["architectures"] == ["LlamaForCausalLM"]
    assert not [f for f in os.listdir(model) if "adapter" in f], os.listdir(model)
    meta = json.loads((model / "rrt_meta.json").read_text())
    assert meta["finetune"] == FINETUNE and meta["model"] == base and meta["steps"] == 4
    assert meta["variant"] == "contextual" and "<tgt:vegan>" in meta["constraint_tokens"]
    stats = json.loads((out / "train_stats.json").read_text())
    assert stats["finetune"] == FINETUNE and stats["steps"] == 4
    assert stats["lm_head"] == "labelled positions"  # inside peft's wrapper too
    assert 0 < stats["trainable_parameters"] < stats["parameters"]
    tokenizer = AutoTokenizer.from_pretrained(model)
    exported, pretrained = (
        load_file(str(model / "model.safetensors")),
        load_file(os.path.join(base, "model.safetensors")),
    )
    assert not [k for k in exported if "lora" in k or "trainable_tokens" in k]
    rows = pretrained["model.embed_tokens.weight"].shape[0]
    embedding = exported["model.embed_tokens.weight"]
    assert embedding.shape[0] == len(tokenizer) == stats["vocab"] == config["vocab_size"] > rows
    assert torch.equal(
        embedding[:rows], pretrained["model.embed_tokens.weight"]
    )  # only our rows learn
    for layer, trained in ((0, FINETUNE != "freeze"), (1, True)):  # freeze: the top block only
        key = f"model.layers.{layer}.mlp.up_proj.weight"
        assert torch.equal(exported[key], pretrained[key]) != trained, key
    evals = [
        json.loads(line)["eval_loss"] for line in (out / "metrics.jsonl").read_text().splitlines()
    ]
    assert all(math.isfinite(e) for e in evals if e is not None) and evals[-1] is not None
    assert "4 steps of contextual" in done.stdout
    # The torch engine's checkpoints (step 2 and the end), as Ray keeps them: rank 0's weights, optimizer and
    # schedule (tests/test_engine.py resumes from such a folder to the same weights), and the training state.
    checkpoints = [
        p for p in (out / "ray").iterdir() if p.name.startswith("checkpoint_") and p.is_dir()
    ]
    assert len(checkpoints) == 2 and all((c / "ds" / "engine.pt").exists() for c in checkpoints), (
        checkpoints
    )
    assert all((c / "train_state.0.json").exists() for c in checkpoints)


def test_rewrite_and_evaluate_the_llama_export(tuned, rewritten, tmp_path):
    out, done = rewritten
    rows = [json.loads(line) for line in (out / "rewrites.jsonl").read_text().splitlines()]
    assert len(rows) == 3
    for row in rows:
        assert row["system"] == "contextual"
        assert len(row["rewrite"]["steps"]) == len(row["source"]["steps"]) == len(row["steps"])
        for entry in row["steps"]:
            assert entry["candidates"] and all("total" in c["scores"] for c in entry["candidates"])
    evaluated = tmp_path / "eval"
    # A small foods file spares the food vocabulary's Ray Data pass over the corpus (half the job's time).
    foods = tmp_path / "food.csv"
    foods.write_text("id,name\n1,Milk\n2,Butter\n3,Egg\n4,Cheese\n5,Flour\n6,Sugar\n")
    done = run_script(
        "evaluate.py",
        "--lm",
        str(tuned[1] / "model"),
        "--rewrites",
        str(out),
        "--foods",
        str(foods),
        "--output",
        str(evaluated),
        "--scorers",
        "1",
        "--report-recipes",
        "3",
        timeout=600,
    )
    done_ok(done, "evaluate.py")
    metrics = json.loads((evaluated / "metrics.json").read_text())
    system = metrics["systems"]["contextual"]
    assert (
        system["n_recipes"] == 3
        and math.isfinite(system["perplexity"])
        and system["perplexity"] > 1
    )

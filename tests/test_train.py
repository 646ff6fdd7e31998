"""Training on Ray Train + DeepSpeed (CPU, gloo, tiny preset) from real prepared step pairs."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import needs_shared_data, quick_train_config, run_script

from rrt.corpus.formats import parse_text
from rrt.recipes.paper_format import END_INST, EOS
from runtime.cluster import allocator_env

METRIC_KEYS = {
    "step",
    "epoch",
    "train_loss",
    "eval_loss",
    "lr",
    "tokens_per_s",
    "padding_fraction",
    "data_wait_fraction",
}


def metrics(output) -> list[dict]:
    with open(os.path.join(output, "metrics.jsonl"), encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


@pytest.fixture(scope="module")
def trained(trained_contextual):
    """The shared two-worker contextual run: 20 steps, resumed to 30 by a submitted job."""
    return trained_contextual


@pytest.mark.slow
@needs_shared_data
def test_two_workers_learn_and_write_every_output(trained):
    out, done, _ = trained
    rows = metrics(out)
    assert all(set(row) == METRIC_KEYS for row in rows)
    evals = [row for row in rows if row["eval_loss"] is not None]
    assert evals[0]["step"] == 0 and evals[-1]["step"] == 30
    assert evals[-1]["eval_loss"] < evals[0]["eval_loss"] - 1.0, evals
    assert [row["step"] for row in rows] == sorted({row["step"] for row in rows})
    stats = json.loads((out / "train_stats.json").read_text())
    assert stats["world_size"] == 2 and stats["steps"] == 30 and stats["precision"] == "fp32"
    assert stats["padding_fraction"] < 0.10 and 0 <= stats["data_wait_fraction"] < 1
    assert stats["torch_threads"] >= 1
    assert stats["allocator"] == ("tcmalloc" if allocator_env("tcmalloc") else "system")
    assert stats["finetune"] == "full" and stats["trainable_parameters"] == stats["parameters"]
    assert (
        stats["lm_head"] == "labelled positions"
    )  # train.loss_on: step (rrt.modelling.labelled_head)
    # The LM head trains on a vocabulary padded to 64 rows; the export has the tokenizer's own.
    assert stats["vocab_padded_to"] % 64 == 0 and stats["vocab_padded_to"] >= stats["vocab"]
    assert "Failed to query Ray Train Controller" not in done.logs  # the cleaner is quiet
    assert sum(stats["examples"].values()) > 0
    assert (out / "loss.png").stat().st_size > 1000
    assert any(p.name.startswith("checkpoint_") for p in (out / "ray").iterdir())
    assert "train_contextual: 30 steps of contextual" in done.logs


@pytest.mark.slow
@needs_shared_data
def test_export_loads_and_generates_a_step_in_the_contextual_format(trained, prepared):
    import pyarrow.dataset as pads
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = trained[0] / "model"
    meta = json.loads((out / "rrt_meta.json").read_text())
    assert meta["variant"] == "contextual" and meta["block_size"] == 256 and meta["steps"] == 30
    assert "<tgt:vegan>" in meta["constraint_tokens"] and meta["data_fingerprint"]
    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    text = pads.dataset(str(prepared[0] / "step_pairs" / "contextual" / "test")).to_table(
        columns=["text"]
    )[0][0]
    prompt = (
        text.as_py().split("<tgt:", 1)[0]
        + "<tgt:"
        + text.as_py().split("<tgt:", 1)[1].split(">", 1)[0]
        + ">"
    )
    ids = tokenizer(prompt, return_tensors="pt").input_ids[:, -200:]
    torch.manual_seed(0)
    generated = model.generate(
        ids,
        max_new_tokens=40,
        do_sample=True,
        top_k=40,
        eos_token_id=[tokenizer.convert_tokens_to_ids(END_INST), tokenizer.eos_token_id],
        pad_token_id=tokenizer.pad_token_id,
    )
    new = tokenizer.decode(generated[0, ids.shape[1] :], skip_special_tokens=False)
    step = new.split(END_INST)[0].split(EOS)[0].strip()
    assert step, new
    parts = parse_text("contextual", prompt + " " + step + f" {END_INST} {EOS}")
    assert parts.target_steps and parts.constraint


@pytest.mark.slow
@needs_shared_data
def test_a_finished_run_is_refused_without_resume_and_resume_continues(trained):
    out, _resumed, first = trained
    assert first["returncode"] == 0, first["output"][-4000:]
    assert first["stats"]["steps"] == 20 and first["steps"][-1] == 20
    assert first["steps"] == sorted(set(first["steps"])), first["steps"]
    refused = first["refused"]
    assert refused.returncode == 2 and "--resume" in refused.stderr
    steps = [row["step"] for row in metrics(out)]
    assert steps[-1] == 30 and steps == sorted(set(steps)), steps
    assert json.loads((out / "model" / "rrt_meta.json").read_text())["steps"] == 30


@pytest.mark.parametrize(
    "args, message",
    [
        (["--data", "/nonexistent/prepared"], "data folder not found"),
        (["--epochs", "0"], "train.epochs must be >= 1"),
        (["--num-workers", "0"], "train.num_workers must be >= 1"),
        (["--profile", "nope"], "unknown profile"),
        (["--model", "/nonexistent/model"], "cannot load model"),
    ],
)
def test_bad_settings_fail_with_one_line_before_any_worker(tmp_path, args, message):
    data = tmp_path / "prepared"
    for split in ("train", "dev"):
        (data / "step_pairs" / "contextual" / split).mkdir(parents=True)
    import pyarrow as pa
    import pyarrow.parquet as pq

    for split in ("train", "dev"):
        pq.write_table(
            pa.table({"text": ["<|startoftext|> a <tgt:vegan> b <|endoftext|>"] * 64}),
            data / "step_pairs" / "contextual" / split / "part.parquet",
        )
    base = ["--data", str(data), "--output", str(tmp_path / "out")]
    done = run_script("train_contextual.py", *base, *args, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert (
        len(lines) == 1 and lines[0].startswith("train_contextual: error:") and message in lines[0]
    ), lines
    assert not (tmp_path / "out").exists()  # nothing claimed, so a corrected rerun just works


def test_an_empty_split_or_bad_config_value_is_one_line(tmp_path):
    data = tmp_path / "prepared"
    for split in ("train", "dev"):
        (data / "step_pairs" / "contextual" / split).mkdir(parents=True)
    done = run_script(
        "train_contextual.py", "--data", str(data), "--output", str(tmp_path / "out"), timeout=120
    )
    assert (
        done.returncode == 2
        and "the train split of contextual" in done.stderr
        and "is empty" in done.stderr
    )
    config = quick_train_config(tmp_path, loss_on="sometimes")
    done = run_script("train_contextual.py", "--data", str(data), "--config", config, timeout=120)
    assert done.returncode == 2 and done.stderr.strip() == (
        "train_contextual: error: train.loss_on must be one of step, target, all (got 'sometimes')"
    )
    assert not (tmp_path / "out").exists()
    shutil.rmtree(data)


@pytest.mark.parametrize(
    "setting, line",
    [
        ({"allocator": "hoard"}, "train.allocator must be one of tcmalloc, system (got 'hoard')"),
        (
            {"finetune": "adapters"},
            "train.finetune must be one of full, freeze, lora (got 'adapters')",
        ),
        (
            {"batching": "rows"},
            "train.batching must be one of tokens, examples, packed (got 'rows')",
        ),
        (
            {"attention": "flash"},
            "train.attention must be one of sdpa, eager, varlen (got 'flash')",
        ),
        ({"engine": "jax"}, "train.engine must be one of deepspeed, torch (got 'jax')"),
        ({"compile": "sometimes"}, "train.compile must be one of auto"),
        (
            {"attention": "varlen"},
            "train.attention varlen is for packed rows of a causal LM: set train.batching: packed",
        ),
        (
            {"batching": "packed", "pack_width": 100},
            "train.pack_width 100 is narrower than the block (256)",
        ),
    ],
)
def test_each_bad_training_setting_is_named_before_any_work(tmp_path, setting, line):
    from jobs.train import build_parser, settings_from
    from runtime.runs import JobError

    config = quick_train_config(tmp_path, **setting)
    with pytest.raises(JobError) as caught:
        settings_from(build_parser().parse_args(["--data", str(tmp_path), "--config", config]))
    assert line in str(caught.value)


def test_the_allocator_is_preloaded_by_soname_and_keeps_an_earlier_preload(monkeypatch):
    assert allocator_env("system") == {}
    env = allocator_env("tcmalloc")
    if not env:
        pytest.skip("libtcmalloc-minimal4 is not installed here (make setup installs it)")
    assert env["LD_PRELOAD"].startswith(
        "libtcmalloc_minimal.so"
    )  # each node's loader finds its own copy
    monkeypatch.setenv("LD_PRELOAD", "libother.so")
    assert allocator_env("tcmalloc")["LD_PRELOAD"].endswith(":libother.so")
    probe = [
        sys.executable,
        "-c",
        "from rrt.training.speed import loaded_allocator; print(loaded_allocator())",
    ]
    ran = subprocess.run(
        probe, env={**os.environ, **env}, capture_output=True, text=True, check=True
    )
    assert ran.stdout.strip() == "tcmalloc"
    plain = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    assert (
        subprocess.run(probe, env=plain, capture_output=True, text=True, check=True).stdout.strip()
        == "system"
    )


def test_the_dev_rows_are_the_first_in_file_order_so_every_run_scores_the_same(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from jobs.train import first_rows
    from jobs.train_plan import TrainRun
    from rrt.config import load_settings
    from rrt.recipes.paper_format import constraint_tag

    folder = tmp_path / "step_pairs" / "contextual" / "dev"
    folder.mkdir(parents=True)
    vegan = constraint_tag("tgt", "vegan", True)
    texts = [f"row {i} {vegan if i % 3 == 0 else ''}" for i in range(30)]
    for part in range(3):  # written out of name order: the order is the files' names
        pq.write_table(
            pa.table({"text": texts[part * 10 : (part + 1) * 10]}),
            folder / f"part-{2 - part}.parquet",
        )
    config = load_settings()
    run = TrainRun(
        train=config.train.model_copy(update={"data": str(tmp_path)}),
        ray=config.ray,
        pairs="contextual",
        block=256,
    )
    first = first_rows(run, "dev", 12).column("text").to_pylist()
    assert first == texts[20:30] + texts[10:12]
    assert first_rows(run, "dev", 12).column("text").to_pylist() == first
    vegan_run = dataclasses.replace(run, constraint="vegan")
    tagged = first_rows(vegan_run, "dev", 4).column("text").to_pylist()
    assert tagged == [t for t in texts[20:30] + texts[10:20] if vegan in t][:4]

"""The sentence-level transfer baselines (rrt/baselines/seq2seq.py): the copy head's mixture, a
copy of a token only the source holds, and Transformer and Seq2seq Copy trained with Ray Train,
rewritten by the rewrite job and scored by the evaluation job."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, job_env, needs_dictionary, needs_shared_data, quick_train_config

from rrt.baselines.seq2seq import (
    COPY,
    TRANSFORMER,
    build_seq2seq,
    copy_mixture,
    sample_steps,
    seq2seq_batch,
)
from rrt.modelling.sampling import SamplingSettings

SHAPE = {"d_model": 32, "layers": 1, "heads": 2, "ffn_dim": 64, "dropout": 0.0}
SOURCE = {
    "title": "Buttermilk Pancakes",
    "ingredients": ["2 cups flour", "2 cups buttermilk", "2 eggs"],
    "steps": [
        "Whisk the flour and buttermilk.",
        "Beat in the eggs.",
        "Fry in butter until golden.",
    ],
}


class Vocabulary:
    """The ids a model config needs, without a trained tokenizer."""

    pad_token_id, bos_token_id, eos_token_id = 0, 1, 2


def test_the_final_distribution_is_a_mixture_that_sums_to_one():
    import torch

    torch.manual_seed(0)
    vocab = torch.softmax(torch.randn(2, 3, 20), -1)
    attention = torch.softmax(torch.randn(2, 3, 4), -1)
    source = torch.tensor([[5, 7, 5, 9], [3, 3, 3, 3]])
    p_gen = torch.rand(2, 3, 1)
    final = copy_mixture(vocab, attention, source, p_gen)
    assert torch.allclose(final.sum(-1), torch.ones(2, 3))
    assert torch.allclose(copy_mixture(vocab, attention, source, torch.ones(2, 3, 1)), vocab)
    copied = copy_mixture(vocab, attention, source, torch.zeros(2, 3, 1))
    # A token at several source positions gets all their attention; tokens not in the source get none.
    assert torch.allclose(copied[0, :, 5], attention[0, :, 0] + attention[0, :, 2])
    assert torch.allclose(copied[1, :, 3], torch.ones(3)) and float(copied[0, :, 6].sum()) == 0


def _copy_model(gate_bias: float):
    """A fresh tiny copy model whose gate is held at sigmoid(gate_bias)."""
    import torch

    lm = build_seq2seq(COPY, 40, SHAPE, 32, Vocabulary, seed=3).eval()
    with torch.no_grad():
        lm.copy_gate.weight.zero_()
        lm.copy_gate.bias.fill_(gate_bias)
    return lm


def test_a_gate_at_one_is_the_plain_decoder():
    import torch
    from transformers import BartForConditionalGeneration

    lm = _copy_model(40.0)
    batch = seq2seq_batch([(np.array([1, 5, 6, 7, 30, 9, 10, 2]), 4)], 0).inputs("cpu")
    with torch.no_grad():
        mixed = lm(**batch).logits
        plain = BartForConditionalGeneration.forward(lm, **batch).logits
    assert torch.allclose(mixed.exp(), torch.softmax(plain, -1), atol=1e-6)


def test_the_copy_model_copies_a_token_only_the_source_holds():
    import torch

    source, only = [1, 5, 33, 33, 33, 33, 6], 33
    greedy = SamplingSettings(top_k=1, top_p=1.0, temperature=1.0, candidates=2, max_new_tokens=3)
    for gate, copies in ((-40.0, True), (40.0, False)):
        lm = _copy_model(gate)
        with torch.no_grad():
            # The generator can never write this token: only the copy path can.
            lm.final_logits_bias[0, only] = float("-inf")
        tokens, _ = sample_steps(lm, source, 4, {2}, greedy, seed=1)
        assert (only in tokens[0]) is copies, tokens
    # p_gen near 0: every token written is one of the source's.
    assert set(sample_steps(_copy_model(-40.0), source, 4, {2}, greedy, 1)[0][0]) <= set(source)


def test_a_batch_reads_the_source_and_learns_the_target_from_its_tag():
    batch = seq2seq_batch(
        [(np.array([1, 5, 6, 7, 30, 9, 2]), 4), (np.array([1, 8, 30, 2]), 2)], 0, multiple=1
    )
    assert batch.input_ids.tolist() == [[1, 5, 6, 7], [1, 8, 0, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert batch.decoder_input_ids.tolist() == [[30, 9], [30, 0]]
    assert batch.labels.tolist() == [[9, 2], [2, -100]] and batch.predicted_tokens == 3


def _job(script: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "jobs" / script), *args],
        cwd=ROOT,
        env=job_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(jobs: dict) -> dict:
    """Wait for jobs started together; each must succeed."""
    done = {}
    for name, job in jobs.items():
        out, err = job.communicate(timeout=600)
        assert job.returncode == 0, f"{name}: {err[-3000:]}"
        done[name] = (out, err)
    return done


def _rewrite(settings, tasks: list[dict], out) -> None:
    """The rewrite job's actor in this process, its records written as the job writes them."""
    from jobs.rewrite_actor import Seq2seqBatch, task_table

    records = Seq2seqBatch(settings)(task_table(tasks)).column("record").to_pylist()
    out.mkdir(parents=True)
    (out / "rewrites.jsonl").write_text("".join(line + "\n" for line in records))


def _evaluate(args: list[str]) -> dict:
    """The evaluation job's settings, Ray Data task and scorer actor in this process; its outputs."""
    import pyarrow as pa

    from jobs.evaluate import (
        StepScorer,
        measure_batch,
        parse_args,
        rewrite_items,
        row_measures,
        settings_from,
        write_outputs,
    )
    from rrt.recipes.foods import food_vocabulary

    settings = settings_from(parse_args(args))
    items = rewrite_items(settings.systems)
    measured = measure_batch(pa.Table.from_pylist(items), food_vocabulary(settings.foods), False)
    scored = StepScorer(settings.lm, settings.block, settings.evaluate.batch_size, False, 1)(
        measured
    ).to_pylist()
    measures = {label: [None] * len(s["records"]) for label, s in settings.systems.items()}
    for row in scored:
        measures[row["system"]][row["position"]] = row_measures(row)
    return write_outputs(settings, measures, {})


@pytest.fixture(scope="module")
def pipeline(prepared, tmp_path_factory):
    """Both systems trained by the training job (Seq2seq Copy for vegan only, the two jobs side by
    side on the session's Ray), then two vegan test recipes rewritten by each through the rewrite
    job's settings and actor, and scored by the evaluation job's settings, task and scorer (the
    rewrite and evaluation jobs themselves run in benchmarks/quality.py)."""
    import pyarrow.dataset as pads

    from jobs.rewrite import build_parser, build_tasks, rewrite_keys, settings_from
    from testing.local_service import tiny_model

    folder = tmp_path_factory.mktemp("seq2seq")
    config = quick_train_config(
        folder,
        num_workers=1,
        engine="torch",
        eval_examples=32,
        seq2seq={**SHAPE, "vocab_size": 600, "lr": 3.0e-3},
    )
    data = str(prepared[0])
    base = ["--data", data, "--config", config, "--max-steps", "4", "--micro-batch", "4"]
    trained = _finish(
        {
            TRANSFORMER: _job(
                "train.py", "--variant", TRANSFORMER, "--output", str(folder / "transformer"), *base
            ),
            COPY: _job(
                "train.py",
                "--variant",
                COPY,
                "--constraint",
                "vegan",
                "--output",
                str(folder / "copy"),
                *base,
            ),
        }
    )
    models = {TRANSFORMER: str(folder / "transformer" / "model"), COPY: str(folder / "copy")}
    recipes = {
        r["id"]: r
        for r in pads.dataset(str(prepared[0] / "recipes")).to_table().to_pylist()
        if r["split"] == "test"
    }
    tasks, _ = build_tasks(rewrite_keys(list(recipes.values()), "vegan")[:2], recipes)
    for system, model in models.items():
        settings = settings_from(
            build_parser().parse_args(
                [
                    "--data",
                    data,
                    "--system",
                    system,
                    "--model",
                    model,
                    "--output",
                    str(folder / "unused"),
                    "--candidates",
                    "3",
                    "--constraint",
                    "vegan",
                ]
            )
        )
        _rewrite(settings, tasks, folder / "rewrites" / system)
    foods = folder / "food.csv"
    foods.write_text("id,name\n1,Milk\n2,Butter\n3,Egg\n4,Cheese\n5,Flour\n")
    metrics = _evaluate(
        [
            "--lm",
            tiny_model(str(folder / "lm")),
            "--foods",
            str(foods),
            "--output",
            str(folder / "eval"),
            "--rewrites",
            ",".join(str(folder / "rewrites" / system) for system in models),
        ]
    )
    return folder, models, trained, metrics, settings


@pytest.mark.slow
@needs_shared_data
@needs_dictionary
def test_both_systems_train_with_the_outputs_of_every_trained_system(pipeline):
    from rrt.baselines.seq2seq import load_seq2seq

    folder, models, trained = pipeline[:3]
    for run in (folder / "transformer", folder / "copy" / "vegan"):
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert rows[0]["step"] == 0 and rows[-1]["step"] == 4 and rows[-1]["eval_loss"] is not None
        assert (run / "loss.png").exists() and any(
            p.name.startswith("checkpoint_") for p in (run / "ray").iterdir()
        )
        stats = json.loads((run / "train_stats.json").read_text())
        assert stats["steps"] == 4 and stats["finetune"] == "full"
        assert (
            stats["lm_head"] == "every position"
        )  # an encoder-decoder keeps the library's forward
    # One model per constraint, each in its own run folder; the folder above sums them up.
    assert sorted(p.name for p in (folder / "copy").iterdir()) == ["train_stats.json", "vegan"]
    assert list(json.loads((folder / "copy" / "train_stats.json").read_text())["constraints"]) == [
        "vegan"
    ]
    copy = load_seq2seq(str(folder / "copy" / "vegan" / "model"))
    assert type(copy.lm).__name__ == "CopyBart" and copy.meta["constraint"] == "vegan"
    plain = load_seq2seq(models[TRANSFORMER])
    assert plain.meta["variant"] == TRANSFORMER and not hasattr(plain.lm, "copy_gate")
    assert plain.tokenizer.convert_tokens_to_ids("<tgt:vegan>") != plain.tokenizer.unk_token_id
    assert (
        "seq2seq_copy (1 constraint)" in trained[COPY][0]
        and "steps of transformer" in trained[TRANSFORMER][0]
    )


@pytest.mark.slow
@needs_shared_data
@needs_dictionary
def test_each_step_is_rewritten_alone_best_of_n_and_the_same_in_a_rerun(pipeline):
    from jobs.rewrite_actor import Seq2seqBatch, task_table

    folder, models, _, _, settings = pipeline
    for system in models:
        rows = [
            json.loads(line)
            for line in (folder / "rewrites" / system / "rewrites.jsonl").read_text().splitlines()
        ]
        assert len(rows) == 2 and all(
            r["system"] == system and r["constraint"] == "vegan" for r in rows
        )
        for row in rows:
            assert len(row["rewrite"]["steps"]) == len(row["source"]["steps"]) == len(row["steps"])
            for n, entry in enumerate(row["steps"]):
                assert entry["source_step"] == n and len(entry["candidates"]) == (
                    1 if entry.get("note") else 3
                )
                assert row["rewrite"]["steps"][n] == entry["candidates"][entry["chosen"]]["text"]
                assert all(
                    c["scores"]["total"] <= entry["candidates"][entry["chosen"]]["scores"]["total"]
                    for c in entry["candidates"]
                )
    # Seeded per recipe and step: a recipe rewritten alone is rewritten as it was in its batch.
    actor = Seq2seqBatch(settings)
    row = rows[1]
    task = {"id": row["id"], "constraints": ["vegan"], "source": row["source"]}
    assert (
        json.loads(actor(task_table([task])).column("record")[0].as_py())["rewrite"]
        == row["rewrite"]
    )


@pytest.mark.slow
@needs_shared_data
@needs_dictionary
def test_the_evaluation_scores_both_systems(pipeline):
    folder, metrics = pipeline[0], pipeline[3]
    for system in (TRANSFORMER, COPY):
        assert metrics["systems"][system]["n_recipes"] == 2 and math.isfinite(
            metrics["systems"][system]["perplexity"]
        )
    assert f"| {COPY} |" in (folder / "eval" / "table.md").read_text()


def test_bad_input_is_one_line_before_any_work(tmp_path, capsys):
    from jobs.rewrite import main as rewrite
    from jobs.train import build_parser, settings_from
    from runtime.runs import JobError

    data = tmp_path / "prepared"
    for folder in ("recipe_pairs", "recipes"):
        (data / folder).mkdir(parents=True)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": ["a"]}), data / "recipe_pairs" / "part.parquet")
    trained = tmp_path / "copy" / "vegan" / "model"
    trained.mkdir(parents=True)
    (trained / "rrt_meta.json").write_text('{"variant": "seq2seq_copy"}')
    (trained / "config.json").write_text("{}")
    cases = [
        ([], "this system needs --model"),
        (["--model", str(tmp_path)], "holds no seq2seq_copy model"),
        (
            ["--model", str(tmp_path / "copy"), "--constraint", "nut-free"],
            "has no seq2seq_copy model for nut-free (it holds vegan)",
        ),
    ]
    for extra, message in cases:
        assert (
            rewrite(
                ["--data", str(data), "--system", COPY, "--output", str(tmp_path / "out"), *extra]
            )
            == 2
        )
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("rewrite: error:") and message in lines[0], (
            lines
        )
    assert (
        rewrite(
            [
                "--data",
                str(data),
                "--system",
                TRANSFORMER,
                "--model",
                str(trained),
                "--output",
                str(tmp_path / "out"),
            ]
        )
        == 2
    )
    assert "holds a seq2seq_copy model, not a transformer one" in capsys.readouterr().err
    # Pairs but no recipes (a prepared folder cut short): one line, not an error of the reader.
    assert (
        rewrite(["--data", str(data), "--system", "rule_based", "--output", str(tmp_path / "out")])
        == 2
    )
    assert capsys.readouterr().err.strip().splitlines() == [
        f"rewrite: error: {data}/recipes holds no recipes: rerun jobs/prepare_data.py into that folder"
    ]
    assert not (tmp_path / "out").exists()
    for extra, message in (
        (["--constraint", "vegan"], "train.constraint.*for seq2seq_copy"),
        (["--model", "tiny"], "--model does not apply to transformer"),
    ):
        with pytest.raises(JobError, match=message):
            settings_from(
                build_parser().parse_args(["--variant", TRANSFORMER, "--data", str(data), *extra])
            )

"""The document-level controllable baselines (rrt/baselines/controllable.py): CTRL's prompt and
PPLM's steering, their step-by-step rewrites, the bags of words, and runs through the rewrite and
evaluation jobs."""

from __future__ import annotations

import json
import math

import pytest
from conftest import DECODING, needs_dictionary, needs_shared_data, run_script

from rrt.baselines.controllable import (
    ControlledRewriter,
    ControlSettings,
    ctrl_prompt,
    ctrl_writer,
    pplm_writer,
)
from rrt.baselines.pplm import PplmSettings, bow_targets, steered_probs, word_token_ids
from rrt.corpus.bow import build_bags, load_bag, recipe_words
from rrt.modelling.rewriter import RewriteTask
from testing.local_service import tiny_ctrl, tiny_model

SOURCE = {
    "title": "Buttermilk Pancakes",
    "ingredients": ["2 cups flour", "2 cups buttermilk", "2 eggs"],
    "steps": [
        "Whisk the flour and buttermilk.",
        "Beat in the eggs.",
        "Fry in butter until golden.",
    ],
}
SETTINGS = ControlSettings(**DECODING.ctrl.model_dump(), max_new_tokens=12)
_PPLM = {k: v for k, v in DECODING.pplm.model_dump().items() if k not in ("bow", "length")}
STEER = PplmSettings(**_PPLM, max_new_tokens=6)


def test_the_prompt_is_the_papers_ctrl_format():
    assert ctrl_prompt("Links", ["vegan"], "Pancakes", ["2 cups flour", "1 cup oat milk"], []) == (
        "Links Vegan Pancakes \n 2 cups flour \n 1 cup oat milk \n 1. "
    )
    assert ctrl_prompt(
        "Links", ["dairy-free", "nut-free"], "Pancakes", ["flour"], ["Mix.", "Fry."]
    ) == ("Links Dairy-free, nut-free Pancakes \n flour \n 1. Mix. \n 2. Fry. \n 3. ")
    assert DECODING.ctrl.model_dump() == {
        "control_code": "Links",
        "temperature": 0.5,
        "top_k": 2,
        "repetition_penalty": 1.2,
    }


@pytest.fixture(scope="module")
def ctrl(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tiny_ctrl(str(tmp_path_factory.mktemp("ctrl")))
    return (
        folder,
        AutoModelForCausalLM.from_pretrained(folder).eval(),
        AutoTokenizer.from_pretrained(folder),
    )


@needs_dictionary
def test_each_step_is_written_after_the_steps_before_it_with_the_guides_lines(ctrl):
    _, lm, tok = ctrl
    prompts = []
    original = tok.__call__

    class Recording(type(tok)):
        """The tokenizer, keeping each prompt it encodes."""

        def __call__(self, text, *args, **kwargs):
            prompts.append(text)
            return original(text, *args, **kwargs)

    tok.__class__ = Recording
    write = ctrl_writer(lm, tok, SETTINGS)
    rewriter = ControlledRewriter("ctrl", write)
    tasks = [
        RewriteTask("a", ["dairy-free"], SOURCE, 5),
        RewriteTask("b", ["vegan"], {**SOURCE, "steps": SOURCE["steps"][:1]}, 5),
    ]
    records = rewriter.rewrite(tasks)
    prompts = [p for p in prompts if isinstance(p, str) and p.startswith("Links ")]
    assert [len(r["rewrite"]["steps"]) for r in records] == [3, 1] and len(prompts) == 4
    first = records[0]
    assert first["system"] == "ctrl" and "2 cups buttermilk" not in first["rewrite"]["ingredients"]
    # The guide's title and lines open every prompt; each step's prompt holds the steps written before it.
    assert prompts[0].startswith(f"Links Dairy-free {first['rewrite']['title']} \n ")
    assert prompts[2].endswith(
        f"1. {first['rewrite']['steps'][0]} \n 2. {first['rewrite']['steps'][1]} \n 3. "
    )
    assert all("\n" not in s for s in first["rewrite"]["steps"])
    assert all(
        len(e["candidates"]) == 1 and "total" in e["candidates"][0]["scores"]
        for e in first["steps"]
    )
    # Seeded per recipe and step: the same rewrite alone as in a batch.
    again = ControlledRewriter("ctrl", write).rewrite(tasks[:1])
    assert again[0]["rewrite"] == first["rewrite"]
    tok.__class__ = Recording.__bases__[0]


def test_an_unknown_system_is_refused():
    with pytest.raises(ValueError, match="not a controllable baseline"):
        ControlledRewriter("gedi", lambda *args: "")


@pytest.fixture(scope="module")
def no_source(tmp_path_factory):
    from rrt.modelling.loading import load_model

    return load_model(tiny_model(str(tmp_path_factory.mktemp("lm"))))


def test_steering_raises_the_bag_of_words_probability_of_the_same_lm(no_source):
    import torch

    from rrt.baselines.pplm import _cache, _layers
    from rrt.modelling.models import build_model
    from rrt.modelling.sampling import cache_argument

    tok = no_source.tokenizer
    # Two layers with larger random weights: a history that moves the next token, as a trained LM's does.
    lm = build_model(
        "tiny",
        len(tok),
        {
            "n_layer": 2,
            "n_head": 2,
            "n_embd": 64,
            "initializer_range": 0.2,
            "resid_pdrop": 0.0,
            "embd_pdrop": 0.0,
            "attn_pdrop": 0.0,
        },
        seed=1,
    ).eval()
    ids = tok.encode(
        "Pancakes <endoftitle> 2 cups flour <ing> 1 cup milk", add_special_tokens=False
    )
    kw = cache_argument(lm)
    cache = _cache([])
    with torch.no_grad():
        lm(input_ids=torch.tensor([ids[:-1]]), use_cache=True, **{kw: cache})
    targets = bow_targets(word_token_ids(tok, load_bag("paper", ["vegan"])), [])
    steered, plain, _ = steered_probs(
        lm, _layers(cache), ids[-1], targets, PplmSettings(**_PPLM, max_new_tokens=1), kw
    )
    assert float(steered[targets].sum()) > float(plain[targets].sum()) > 0
    stronger = PplmSettings(**{**_PPLM, "step_size": 0.1}, max_new_tokens=1)
    steered, _, _ = steered_probs(lm, _layers(cache), ids[-1], targets, stronger, kw)
    assert float(steered[targets].sum()) > 1.3 * float(plain[targets].sum())
    # No iterations: the distribution is the LM's own.
    same, _, _ = steered_probs(
        lm,
        _layers(cache),
        ids[-1],
        targets,
        PplmSettings(**{**_PPLM, "iterations": 0}, max_new_tokens=1),
        kw,
    )
    assert torch.allclose(same, plain)


def test_words_of_several_tokens_are_followed_through():
    words = [(5,), (7, 8, 9)]
    assert bow_targets(words, []) == [5, 7]
    assert bow_targets(words, [3, 7]) == [5, 7, 8]
    assert bow_targets(words, [7, 8]) == [5, 7, 9]


def test_bags_keep_words_frequent_in_fitting_recipes_and_absent_from_breaking_ones(tmp_path):
    fits, breaks = {"vegan": True}, {"vegan": False}
    rows = [(recipe_words("Tofu Scramble", ["tofu"], ["Crumble the tofu."]), fits)] * 5 + [
        (recipe_words("Egg Bake", ["eggs"], ["Whisk the eggs."]), breaks)
    ]
    # "the" is in a recipe that breaks the constraint; the others are in five that fit it.
    assert build_bags(rows, ["vegan"], min_count=5)["vegan"] == ["crumble", "scramble", "tofu"]
    assert build_bags(rows, ["vegan"], min_count=6)["vegan"] == []
    assert "tofu" in load_bag("paper", ["vegan"]) and set(
        load_bag("paper", ["vegan", "nut-free"])
    ) > set(load_bag("paper", ["vegan"]))
    with pytest.raises(FileNotFoundError, match="keto.txt"):
        load_bag(str(tmp_path), ["keto"])


@needs_dictionary
def test_pplm_rewrites_each_step_from_the_no_source_format(no_source):
    write = pplm_writer(no_source.lm, no_source.tokenizer, STEER, load_bag("paper", ["vegan"]))
    records = ControlledRewriter("pplm", write).rewrite([RewriteTask("a", ["vegan"], SOURCE, 5)])
    assert records[0]["system"] == "pplm" and len(records[0]["rewrite"]["steps"]) == 3
    assert (
        ControlledRewriter("pplm", write).rewrite([RewriteTask("a", ["vegan"], SOURCE, 5)])
        == records
    )


@pytest.mark.slow
@needs_shared_data
@needs_dictionary
def test_the_rewrite_job_runs_ctrl_and_evaluate_scores_it(prepared, ctrl, tmp_path):
    out = tmp_path / "rewrite"
    done = run_script(
        "rewrite.py",
        "--data",
        str(prepared[0]),
        "--system",
        "ctrl",
        "--model",
        ctrl[0],
        "--output",
        str(out),
        "--num-recipes",
        "2",
        "--actors",
        "1",
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "rewrites.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["system"] == "ctrl" for r in rows)
    assert all(len(r["rewrite"]["steps"]) == len(r["source"]["steps"]) for r in rows)
    foods = tmp_path / "food.csv"
    foods.write_text("id,name\n1,Milk\n2,Butter\n3,Egg\n4,Cheese\n5,Flour\n")
    done = run_script(
        "evaluate.py",
        "--lm",
        tiny_model(str(tmp_path / "lm")),
        "--rewrites",
        str(out),
        "--foods",
        str(foods),
        "--output",
        str(tmp_path / "eval"),
        "--scorers",
        "1",
        "--report-recipes",
        "2",
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    system = json.loads((tmp_path / "eval" / "metrics.json").read_text())["systems"]["ctrl"]
    assert system["n_recipes"] == 2 and math.isfinite(system["perplexity"])


@pytest.mark.slow
@needs_shared_data
@needs_dictionary
def test_rrt_bow_builds_lists_that_the_rewrite_job_takes_for_pplm(prepared, no_source, tmp_path):
    from cli.main import main as rrt
    from jobs.rewrite import build_parser, settings_from
    from jobs.rewrite_actor import ControlledBatch, task_table
    from runtime.runs import JobError

    assert (
        rrt(
            [
                "bow",
                "--data",
                str(prepared[0]),
                "--output",
                str(tmp_path / "bow"),
                "--min-count",
                "3",
            ]
        )
        == 0
    )
    vegan = (tmp_path / "bow" / "vegan.txt").read_text().split()
    assert vegan and not {"butter", "milk", "egg", "chicken"} & set(vegan)
    args = [
        "--data",
        str(prepared[0]),
        "--system",
        "pplm",
        "--model",
        no_source.folder,
        "--output",
        str(tmp_path / "o"),
    ]
    config = tmp_path / "pplm.yaml"
    config.write_text(f"rewrite: {{pplm: {{bow: {tmp_path / 'bow'}, length: 6}}}}\n")
    settings = settings_from(build_parser().parse_args([*args, "--config", str(config)]))
    assert settings.pplm.bow == str(tmp_path / "bow") and settings.pplm.length == 6
    # The job's actor, in this process: the No-Source LM steered by the corpus's vegan bag.
    actor = ControlledBatch(settings)
    table = task_table([{"id": "a", "constraints": ["vegan"], "source": SOURCE}])
    rows = [json.loads(r) for r in actor(table).column("record").to_pylist()]
    assert rows[0]["system"] == "pplm" and len(rows[0]["rewrite"]["steps"]) == 3
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"rewrite: {{pplm: {{bow: {tmp_path / 'none'}}}}}\n")
    with pytest.raises(JobError, match="rewrite.pplm.bow"):
        settings_from(build_parser().parse_args([*args, "--config", str(bad)]))

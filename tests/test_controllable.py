"""The CTRL baseline (rrt/modelling/controllable.py): its prompt, its step-by-step rewrite, and a
run through the rewrite and evaluation jobs."""
from __future__ import annotations

import json
import math

import pytest

from conftest import DECODING, needs_dictionary, needs_shared_data, run_script
from rrt.modelling.controllable import ControlledRewriter, ControlSettings, ctrl_prompt
from rrt.modelling.rewriter import RewriteTask
from testing.local_service import tiny_ctrl, tiny_model

SOURCE = {"title": "Buttermilk Pancakes", "ingredients": ["2 cups flour", "2 cups buttermilk", "2 eggs"],
          "steps": ["Whisk the flour and buttermilk.", "Beat in the eggs.", "Fry in butter until golden."]}
SETTINGS = ControlSettings(**DECODING["ctrl"], max_new_tokens=12)


def test_the_prompt_is_the_papers_ctrl_format():
    assert ctrl_prompt("Links", ["vegan"], "Pancakes", ["2 cups flour", "1 cup oat milk"], []) == (
        "Links Vegan Pancakes \n 2 cups flour \n 1 cup oat milk \n 1. ")
    assert ctrl_prompt("Links", ["dairy-free", "nut-free"], "Pancakes", ["flour"], ["Mix.", "Fry."]) == (
        "Links Dairy-free, nut-free Pancakes \n flour \n 1. Mix. \n 2. Fry. \n 3. ")
    assert DECODING["ctrl"] == {"control_code": "Links", "temperature": 0.5, "top_k": 2, "repetition_penalty": 1.2}


@pytest.fixture(scope="module")
def ctrl(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tiny_ctrl(str(tmp_path_factory.mktemp("ctrl")))
    return folder, AutoModelForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)


@needs_dictionary
def test_each_step_is_written_after_the_steps_before_it_with_the_guides_lines(ctrl):
    _, lm, tok = ctrl
    rewriter = ControlledRewriter("ctrl", lm, tok, SETTINGS)
    prompts = []
    step = rewriter._step
    rewriter._step = lambda prompt, seed: prompts.append(prompt) or step(prompt, seed)
    tasks = [RewriteTask("a", ["dairy-free"], SOURCE, 5), RewriteTask("b", ["vegan"], {**SOURCE, "steps": SOURCE["steps"][:1]}, 5)]
    records = rewriter.rewrite(tasks)
    assert [len(r["rewrite"]["steps"]) for r in records] == [3, 1] and len(prompts) == 4
    first = records[0]
    assert first["system"] == "ctrl" and "2 cups buttermilk" not in first["rewrite"]["ingredients"]
    # The guide's title and lines open every prompt; each step's prompt holds the steps written before it.
    assert prompts[0].startswith(f"Links Dairy-free {first['rewrite']['title']} \n ")
    assert prompts[2].endswith(f"1. {first['rewrite']['steps'][0]} \n 2. {first['rewrite']['steps'][1]} \n 3. ")
    assert all("\n" not in s for s in first["rewrite"]["steps"])
    assert all(len(e["candidates"]) == 1 and "total" in e["candidates"][0]["scores"] for e in first["steps"])
    # Seeded per recipe and step: the same rewrite alone as in a batch.
    again = ControlledRewriter("ctrl", lm, tok, SETTINGS).rewrite(tasks[:1])
    assert again[0]["rewrite"] == first["rewrite"]


def test_an_unknown_system_is_refused(ctrl):
    _, lm, tok = ctrl
    with pytest.raises(ValueError, match="not a controllable baseline"):
        ControlledRewriter("pplm", lm, tok, SETTINGS)


@pytest.mark.slow
@needs_shared_data
@needs_dictionary
def test_the_rewrite_job_runs_ctrl_and_evaluate_scores_it(prepared, ctrl, tmp_path):
    out = tmp_path / "rewrite"
    done = run_script("rewrite.py", "--data", str(prepared[0]), "--system", "ctrl", "--model", ctrl[0],
                      "--output", str(out), "--num-recipes", "3", "--actors", "1", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "rewrites.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(r["system"] == "ctrl" for r in rows)
    assert all(len(r["rewrite"]["steps"]) == len(r["source"]["steps"]) for r in rows)
    foods = tmp_path / "food.csv"
    foods.write_text("id,name\n1,Milk\n2,Butter\n3,Egg\n4,Cheese\n5,Flour\n")
    done = run_script("evaluate.py", "--lm", tiny_model(str(tmp_path / "lm")), "--rewrites", str(out),
                      "--foods", str(foods), "--output", str(tmp_path / "eval"), "--scorers", "1",
                      "--report-recipes", "3", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    system = json.loads((tmp_path / "eval" / "metrics.json").read_text())["systems"]["ctrl"]
    assert system["n_recipes"] == 3 and math.isfinite(system["perplexity"])

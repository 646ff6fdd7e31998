"""Batch rewriting (jobs/rewrite.py on Ray Data) with a tiny Contextual Rewriter trained on real pairs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import (
    ROOT,
    config_copy,
    job_env,
    make_rewriter,
    needs_dictionary,
    needs_shared_data,
    run_script,
    sampling,
)

from rrt.config import load_settings
from rrt.modelling.selection import SELECTIONS
from rrt.recipes.recipe import Recipe
from rrt.recipes.tagger import tag_recipe, text_violations

pytestmark = [pytest.mark.slow, needs_shared_data, needs_dictionary]


def rewrites(folder) -> list[dict]:
    with open(os.path.join(folder, "rewrites.jsonl"), encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def disguised_chosen(rows: list[dict]) -> int:
    """Chosen steps that hide a forbidden food in a non-word (`disguised_foods`)."""
    from rrt.modelling.selection import disguised_foods, step_context

    return sum(
        bool(
            disguised_foods(
                e["candidates"][e["chosen"]]["text"],
                step_context(r["source"], e["source_step"], r["constraint"]),
            )
        )
        for r in rows
        for e in r["steps"]
    )


def candidate_violations(rows: list[dict]) -> int:
    """Sampled candidates (all of them, chosen or not) that break their recipe's constraints."""
    return sum(
        bool(text_violations(c["text"], row["constraint"].split(",")))
        for row in rows
        for entry in row["steps"]
        for c in entry["candidates"]
    )


def stopped_and_rerun(
    args: list[str], out, at_least: int
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Start a rewrite run, stop it (SIGTERM) once `at_least` records are written, then rerun it to the end:
    (the rerun's result, the lines written before the stop)."""
    job = subprocess.Popen(
        [sys.executable, str(ROOT / "jobs" / "rewrite.py"), *args],
        cwd=ROOT,
        env=job_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    path = out / "rewrites.jsonl"
    deadline = time.time() + 400
    while time.time() < deadline and job.poll() is None:
        if path.exists() and path.read_text().count("\n") >= at_least:
            break
        time.sleep(0.2)
    job.send_signal(signal.SIGTERM)
    job.wait(timeout=120)
    before = path.read_text().splitlines() if path.exists() else []
    done = run_script("rewrite.py", *args, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return done, before


@pytest.fixture(scope="module")
def contextual_runs(prepared, trained_contextual, tmp_path_factory):
    """The same 10 test recipes rewritten by the tiny Contextual Rewriter, plain and constrained. The plain
    run is stopped part-way, as a user's run may be, and rerun to the end: (folder, result, lines before)."""
    folder = tmp_path_factory.mktemp("rewrite")
    model = trained_contextual[0] / "model"
    # Sampled from the whole vocabulary, not the default top 40: whether the top 40 of a 30-step tiny model
    # hold a forbidden food at all depends on its training run, and a plain run without a violation leaves
    # the guard nothing to remove.
    vocabulary = json.loads((model / "config.json").read_text())["vocab_size"]
    # 32 new tokens, not 64: the whole vocabulary seldom draws the stop token, and the guard's checks need
    # no long steps.
    config = config_copy(folder, rewrite={"top_k": vocabulary, "max_step_tokens": 32})
    runs = {}
    # plain: one batch of 2 per call, so records arrive in small steps.
    for name, extra in (
        ("plain", ["--batch-recipes", "2", "--call-batches", "1", "--actors", "1"]),
        ("constrained", ["--constrained"]),
    ):
        out = folder / name
        args = [
            "--data",
            str(prepared[0]),
            "--system",
            "contextual",
            "--model",
            str(model),
            "--output",
            str(out),
            "--num-recipes",
            "10",
            "--candidates",
            "6",
            "--config",
            config,
            *extra,
        ]
        if name == "plain":
            done, before = stopped_and_rerun(args, out, 2)
        else:
            done, before = run_script("rewrite.py", *args, timeout=600), []
            assert done.returncode == 0, done.stderr[-4000:]
        runs[name] = (out, done, before)
    return runs


def test_every_sampled_recipe_is_rewritten_step_by_step_with_scored_candidates(contextual_runs):
    out, done, before = contextual_runs["plain"]
    rows = rewrites(out)
    assert len(rows) == 10 and len({(r["id"], r["constraint"]) for r in rows}) == 10
    for row in rows:
        assert row["system"] == "contextual" and row["constrained"] is False
        assert len(row["rewrite"]["steps"]) == len(row["source"]["steps"]) == len(row["steps"])
        for n, entry in enumerate(row["steps"]):
            texts = [c["text"] for c in entry["candidates"]]
            assert (
                entry["source_step"] == n and row["rewrite"]["steps"][n] == texts[entry["chosen"]]
            )
            assert set(entry["candidates"][0]["scores"]) >= set(
                SELECTIONS[load_settings().rewrite.selection]
            ) | {"total"}
            if entry.get(
                "note"
            ):  # too long for the block, or empty: the guide's, noted and counted
                assert len(texts) == 1 and entry["decision"] in ("guide", "kept")
            elif (
                entry["decision"] == "kept"
            ):  # the guide leaves it alone: the source step as it was
                assert texts == [row["source"]["steps"][n]]
            else:  # the guide's version first, then the six samples; it stays unless repaired
                assert len(texts) == 7 and entry["candidates"][0]["ended"] == "guide"
                assert (entry["chosen"] == 0) == (entry["decision"] == "guide")
        # Title and ingredient lines come from the substitution guide, so they obey the constraint.
        guide = Recipe("r", row["rewrite"]["title"], row["rewrite"]["ingredients"], ["Mix."])
        assert all(tag_recipe(guide, row["constraint"].split(",")).valid.values())
    run = json.loads((out / "run.json").read_text())
    # The rerun's counts are of the recipes it wrote itself.
    ours = rows[len(before) :]
    noted = sum(bool(e.get("note")) for r in ours for e in r["steps"])
    assert run["counts"]["steps_fallback"] + run["counts"]["empty_steps"] == noted
    assert run["counts"]["disguised_food_steps"] == disguised_chosen(ours)
    assert noted < run["counts"]["steps"] / 4
    assert run["counts"]["written"] == 10 - len(before) and run["steps_per_s"] > 0
    assert run["counts"]["steps"] == sum(len(r["rewrite"]["steps"]) for r in ours)
    # Each step says whose version it is, and the run counts them (the product's default).
    decided = sum(run["counts"][f"steps_{d}"] for d in ("kept", "guide", "model"))
    assert decided == run["counts"]["steps"] and run["counts"]["steps_kept"] > 0
    # The engine's rounds (one step of every recipe in flight each) and where its time went.
    assert run["engine"]["rounds"] >= max((len(r["source"]["steps"]) for r in ours), default=0)
    assert run["engine"]["sampling_s"] > 0 and set(run["engine"]) == {
        "rounds",
        "prompting_s",
        "sampling_s",
        "selection_s",
        "words_taken_back",
        "static_caches",
        "graph_captures",
        "cache_evictions",
        "no_room",
    }
    assert (
        run["engine"]["words_taken_back"] == 0 and "taken back" not in done.stdout
    )  # plain: no guard
    assert run["actors_used"] == 1
    # On a CPU the plan is the plain loop: no static cache.
    assert run["engine"]["static_caches"] == 0
    assert f"{10 - len(before)} recipes written ({len(before)} done earlier)" in done.stdout


def test_constrained_decoding_leaves_no_violation_where_sampling_makes_some(contextual_runs):
    plain = rewrites(contextual_runs["plain"][0])
    held = rewrites(contextual_runs["constrained"][0])
    assert {r["id"] for r in plain} == {r["id"] for r in held}
    assert candidate_violations(plain) > 0, [c["text"] for c in plain[0]["steps"][0]["candidates"]]
    assert candidate_violations(held) == 0
    assert all(
        not text_violations(s, r["constraint"].split(","))
        for r in held
        for s in r["rewrite"]["steps"]
    )
    assert all(r["constrained"] for r in held)
    out, done, _ = contextual_runs["constrained"]
    run = json.loads((out / "run.json").read_text())
    assert run["counts"]["disguised_food_steps"] == disguised_chosen(held)
    assert f"{disguised_chosen(held)} with a forbidden food inside a non-word" in done.stdout
    taken_back = run["engine"]["words_taken_back"]
    assert taken_back > 0  # the tiny model writes forbidden foods often
    # Two actors, two shares of 5 recipes: each actor rewrote one (the first actor up used to take both).
    assert run["actors_used"] == 2
    assert f", {taken_back} forbidden words taken back while sampling;" in done.stdout


def test_a_stopped_run_finishes_the_rest_and_writes_each_recipe_once(contextual_runs):
    out, _, before = contextual_runs["plain"]
    assert 2 <= len(before) < 10, "the run ended before it could be stopped part-way"
    after = (out / "rewrites.jsonl").read_text().splitlines()
    assert (
        len(after) == 10
        and len({(json.loads(x)["id"], json.loads(x)["constraint"]) for x in after}) == 10
    )
    assert after[: len(before)] == before
    run = json.loads((out / "run.json").read_text())
    assert run["resumed"] and run["counts"]["done_earlier"] == len(before)


def test_rule_based_and_retrieval_rewrite_the_same_sample(prepared, tmp_path):
    rows = {}
    for system in ("rule_based", "retrieval"):
        # The suite's one job that starts (and stops) a Ray of its own, as on a laptop; the others
        # join the session's.
        done = run_script(
            "rewrite.py",
            "--data",
            str(prepared[0]),
            "--system",
            system,
            "--output",
            str(tmp_path / system),
            "--num-recipes",
            "12",
            timeout=300,
            own_ray=system == "rule_based",
        )
        assert done.returncode == 0, done.stderr[-4000:]
        if system == "rule_based":  # a local Ray keeps its notes off the console (no --verbose)
            noise = [
                line
                for line in done.stderr.splitlines()
                if "\tINFO " in line or "Token authentication" in line
            ]
            assert not noise, noise
        rows[system] = {(r["id"], r["constraint"]): r for r in rewrites(tmp_path / system)}
    assert rows["rule_based"].keys() == rows["retrieval"].keys() and len(rows["rule_based"]) == 12
    for key, row in rows["rule_based"].items():
        recipe = Recipe(
            "r", row["rewrite"]["title"], row["rewrite"]["ingredients"], row["rewrite"]["steps"]
        )
        assert len(row["rewrite"]["steps"]) == len(row["source"]["steps"])
        assert row["substitutions"], (
            "every sampled source breaks its constraint, so the guide changes it"
        )
        assert all(tag_recipe(recipe, key[1].split(",")).valid.values())
    retrieved = [
        r for r in rows["retrieval"].values() if not any("rule-based" in n for n in r["notes"])
    ]
    assert retrieved, "no sampled dish has a valid recipe to retrieve"
    for row in retrieved:
        assert (
            row["rewrite"]["title"] != row["source"]["title"]
            or row["rewrite"]["steps"] != row["source"]["steps"]
        )
        recipe = Recipe(
            "r", row["rewrite"]["title"], row["rewrite"]["ingredients"], row["rewrite"]["steps"]
        )
        assert all(tag_recipe(recipe, row["constraint"].split(",")).valid.values())


@pytest.mark.parametrize(
    "args, message",
    [
        (["--system", "contextual"], "needs --model"),
        (["--system", "contextual", "--model", "/nonexistent"], "/nonexistent does not exist"),
        (
            ["--system", "rule_based", "--num-recipes", "0"],
            "rewrite.num_recipes must be >= 1 (got 0)",
        ),
        (["--system", "rule_based", "--constraint", "keto"], "unknown constraint 'keto'"),
    ],
)
def test_bad_settings_are_one_line_before_ray_starts(prepared, tmp_path, args, message):
    done = run_script(
        "rewrite.py",
        "--data",
        str(prepared[0]),
        "--output",
        str(tmp_path / "o"),
        *args,
        timeout=120,
    )
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "o").exists()


def test_a_model_of_another_format_is_refused_before_ray_starts(
    prepared, trained_contextual, tmp_path
):
    done = run_script(
        "rewrite.py",
        "--data",
        str(prepared[0]),
        "--output",
        str(tmp_path / "o"),
        "--system",
        "grounded_rule",
        "--model",
        str(trained_contextual[0] / "model"),
        timeout=120,
    )
    assert (
        done.returncode == 2
        and "holds a contextual model; grounded_rule rewrites with a grounded_ing one"
        in done.stderr
    ), done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "o").exists()


def test_one_step_empty_step_and_overlong_step_recipes_are_rewritten_and_counted(
    trained_contextual,
):
    from jobs.rewrite import record_counts
    from rrt.modelling.models import load_exported
    from rrt.modelling.rewriter import RewriteTask

    lm, tok = load_exported(str(trained_contextual[0] / "model"), "cpu")
    rewriter = make_rewriter("contextual", lm, tok, 256, sampling(candidates=2, max_new_tokens=16))
    base = {"title": "Cheese Toast", "ingredients": ["2 slices bread", "1 cup cheddar cheese"]}
    tasks = [
        RewriteTask("one", ["vegan"], {**base, "steps": ["Melt the cheese on the bread."]}),
        RewriteTask("empty", ["vegan"], {**base, "steps": ["Toast the bread.", "", "Serve."]}),
        RewriteTask(
            "long",
            ["vegan"],
            {**base, "steps": ["Toast the bread.", "Add cheese " * 200, "Serve."]},
        ),
        RewriteTask("none", ["vegan"], {**base, "steps": []}),
    ]
    out = {r["id"]: r for r in rewriter.rewrite(tasks)}
    assert len(out["one"]["rewrite"]["steps"]) == 1
    assert (
        out["empty"]["rewrite"]["steps"][1] == ""
        and out["empty"]["steps"][1]["note"] == "empty source step"
    )
    assert "rule-based" in out["long"]["steps"][1]["note"]
    assert not text_violations(out["long"]["rewrite"]["steps"][1], ["vegan"])
    assert out["none"]["rewrite"]["steps"] == [] and out["none"]["notes"] == [
        "the source recipe has no steps"
    ]
    assert rewriter.stats["empty_steps"] == 1 and rewriter.stats["steps_fallback"] == 1
    assert rewriter.stats["recipes_without_steps"] == 1
    # The empty step scores 0 on every rule, yet hides no food.
    assert record_counts(out["empty"])["disguised_food_steps"] == 0


def test_the_sample_is_every_recipe_whose_dish_has_a_version_obeying_the_constraint():
    from jobs.rewrite import rewrite_keys
    from rrt.corpus.pairing import valid_column
    from rrt.recipes.lexicon import CONSTRAINTS

    def row(rid, dish, *obeys):
        return {"id": rid, "dish": dish, **{valid_column(c): c in obeys for c in CONSTRAINTS}}

    rows = [
        row("a", "taco"),
        row("b", "taco", "vegan", "vegetarian", "dairy-free", "egg-free"),
        row("c", "stew"),
        row("d", "stew", "nut-free", "alcohol-free", "fish-free"),
    ]
    keys = rewrite_keys(rows)
    assert ("a", "vegan") in keys and ("c", "nut-free") in keys
    assert (
        "a",
        "nut-free",
    ) not in keys  # no taco is nut-free: nothing to retrieve, no version to learn
    assert not [
        key for key in keys if key[0] == "b" and key[1] in ("vegan", "dairy-free")
    ]  # "b" obeys them
    assert rewrite_keys(rows, "vegan,dairy-free") == [("a", "vegan,dairy-free")]


def test_lines_that_are_not_steps_keep_their_place_with_the_guides_stand_ins():
    from rrt.evaluation.baselines import rule_based
    from rrt.modelling.rewriter import RewriteTask

    source = {
        "title": "Beef Stew",
        "ingredients": ["1 lb beef", "1 onion"],
        "steps": ["Brown the beef.", "Simmer with the onion for 2 hours."],
        "non_steps": [
            {"kind": "header", "text": "Cut the Beef", "before": 0},
            {"kind": "storage", "text": "Keeps for 3 days in the fridge.", "before": 2},
        ],
    }
    record = rule_based(RewriteTask("s1", ["vegetarian"], source))
    carried = record["rewrite"]["non_steps"]
    assert [(c["kind"], c["before"]) for c in carried] == [("header", 0), ("storage", 2)]
    assert (
        "beef" not in carried[0]["text"].lower()
        and carried[1]["text"] == "Keeps for 3 days in the fridge."
    )
    assert record["source"]["non_steps"] == source["non_steps"]


def test_ids_sample_only_those_recipes_and_an_unknown_id_is_one_line(prepared, tmp_path):
    from jobs.rewrite import build_parser, plan_tasks, settings_from
    from runtime.runs import JobError

    def planned(*extra):
        args = build_parser().parse_args(
            ["--data", str(prepared[0]), "--system", "rule_based", "--output", str(tmp_path)]
            + list(extra)
        )
        return plan_tasks(settings_from(args))[0]

    every = planned("--num-recipes", "1000")
    chosen = sorted({t["id"] for t in every})[:2]
    only = planned("--num-recipes", "1000", "--ids", ",".join(chosen))
    assert {t["id"] for t in only} == set(chosen)
    assert len(only) == sum(t["id"] in chosen for t in every)
    with pytest.raises(JobError, match="rewrite.ids: 1 ids are no recipe of the test split"):
        planned("--ids", f"{chosen[0]},no-such-recipe")

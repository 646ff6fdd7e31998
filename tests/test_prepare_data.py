"""The prepare_data job end to end on real recipes, its resume, and its refusals."""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess

import pyarrow.dataset as pads
import pytest
from conftest import SAMPLE, config_copy, needs_shared_data, run_script
from hypothesis import given, settings
from hypothesis import strategies as st

from rrt.corpus.formats import PAIR_VARIANTS, VARIANTS, parse_text
from rrt.corpus.held_out import read_held_out
from rrt.corpus.pairing import valid_column
from rrt.corpus.step_pair_table import STEP_PAIR_SCHEMA
from rrt.recipes.lexicon import CONSTRAINTS
from rrt.recipes.loaders import LoadReport, expand_inputs, read_recipes
from rrt.recipes.step_kinds import KINDS


def run_job(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return run_script("prepare_data.py", *args, timeout=timeout)


def rows(path) -> list[dict]:
    files = [os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs if f.endswith(".parquet")]
    return pads.dataset(files, format="parquet").to_table().to_pylist() if files else []


@pytest.mark.slow
@needs_shared_data
def test_outputs_and_stats(prepared):
    out, _, done = prepared
    for name in (
        "recipes",
        "recipe_pairs",
        "translation_table.npz",
        "rejects.jsonl",
        "stats.json",
        "run.json",
    ):
        assert (out / name).exists(), name
    for variant in VARIANTS:
        for split in ("train", "dev", "test"):
            assert (out / "step_pairs" / variant / split).is_dir()
    stats = json.loads((out / "stats.json").read_text())
    assert set(stats["table1"]) == set(CONSTRAINTS) and stats["recipes_per_second"] > 0
    assert {"recipes", "translation_table", "pairs", "total"} <= set(stats["seconds_per_stage"])
    assert "step pairs (train)" in done.stdout
    # Real methods hold headers and notes: set aside, counted, and kept with their recipe.
    assert set(stats["non_steps"]) == set(KINDS) and stats["non_steps"]["header"] > 0
    assert "not instructions" in done.stdout and stats["candidate_pairs_unlike_dishes"] > 0
    recipes = rows(out / "recipes")
    aside = [n for r in recipes for n in r["non_steps"]]
    assert len(aside) == sum(stats["non_steps"].values())
    assert all(
        n["kind"] in KINDS and 0 <= n["before"] <= len(r["steps"])
        for r in recipes
        for n in r["non_steps"]
    )
    # One source step is linked to at most alignment.max_fanout target steps.
    links = [link for pair in rows(out / "recipe_pairs") for link in pair["alignment"]]
    assert links and max(len(link["target_steps"]) for link in links) <= 3


@pytest.mark.slow
@needs_shared_data
def test_every_constraint_in_the_data_yields_step_pairs(prepared):
    out, _, _ = prepared
    recipes = rows(out / "recipes")
    dishes = collections.defaultdict(list)
    for recipe in recipes:
        dishes[recipe["dish"]].append(recipe)
    present = {
        c
        for c in CONSTRAINTS
        for group in dishes.values()
        if any(r[valid_column(c)] for r in group) and not all(r[valid_column(c)] for r in group)
    }
    assert len(present) == len(CONSTRAINTS)
    step_pairs = collections.Counter(
        r["constraint"] for r in rows(out / "step_pairs" / "contextual")
    )
    assert all(step_pairs[c] > 0 for c in present), step_pairs


@pytest.mark.slow
@needs_shared_data
def test_every_variant_parses_back(prepared):
    out, _, _ = prepared
    pairs = {
        (r["source_id"], r["target_id"], r["constraint"]): r for r in rows(out / "recipe_pairs")
    }
    recipes = {r["id"]: r for r in rows(out / "recipes")}
    for variant in VARIANTS:
        found = rows(out / "step_pairs" / variant / "train")
        assert found, variant
        edits = [r for r in found if r.get("pair_source") == "edit"]
        if variant in PAIR_VARIANTS:
            assert edits, variant  # pairs: both, the default
        for row in edits[:50]:
            # An edit pair's target is the recipe itself; its source is made from it.
            assert row["source_id"] == row["target_id"] and row["source_id"] in recipes
            assert recipes[row["source_id"]]["split"] == "train"
        found = [r for r in found if r.get("pair_source") != "edit"]
        for row in found[:50]:
            parts = parse_text(variant, row["text"])
            if variant in PAIR_VARIANTS:
                assert (row["source_id"], row["target_id"], row["constraint"]) in pairs
                assert (
                    parts.title == recipes[row["source_id"]]["title"]
                    and parts.constraint == row["constraint"]
                )
            else:
                assert parts.title == recipes[row["id"]]["title"]
                assert parts.ingredients == list(recipes[row["id"]]["ingredients"])


@pytest.mark.slow
@needs_shared_data
def test_no_recipe_is_lost(prepared):
    out, inputs, _ = prepared
    report = LoadReport()
    expected = sum(1 for _ in read_recipes(expand_inputs(inputs.split(",")), report))
    kept = len(rows(out / "recipes"))
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    held = [json.loads(line) for line in (out / "held_out.jsonl").read_text().splitlines()]
    assert {h["id"] for h in held} <= read_held_out(["data/technique_set/recipes.tsv"])
    assert kept + len(held) == expected and report.read == kept + len(held) + len(rejects)
    stats = json.loads((out / "stats.json").read_text())
    assert stats["recipes"] == kept and stats["rejected"] + stats["inputs_unread"] == len(rejects)
    assert stats["held_out"]["recipes"] == len(held) > 0


@pytest.mark.slow
@needs_shared_data
def test_resumed_run_gives_the_same_outputs(prepared):
    out, inputs, _ = prepared
    before = {v: sorted(r["text"] for r in rows(out / "step_pairs" / v)) for v in VARIANTS}
    pairs_before = sorted(
        (r["source_id"], r["target_id"], r["constraint"]) for r in rows(out / "recipe_pairs")
    )
    # A run killed after pairing: the formatted outputs and the stats are missing.
    for variant in ("contextual", "no_source"):
        shutil.rmtree(out / "step_pairs" / variant)
    (out / "stats.json").unlink()
    done = run_job("--input", inputs, "--output", str(out), "--dish-key", "head", "--num-cpus", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "done earlier, kept" in done.stderr
    after = {v: sorted(r["text"] for r in rows(out / "step_pairs" / v)) for v in VARIANTS}
    assert after == before
    assert (
        sorted(
            (r["source_id"], r["target_id"], r["constraint"]) for r in rows(out / "recipe_pairs")
        )
        == pairs_before
    )
    assert json.loads((out / "stats.json").read_text())["resumed"] is True


@needs_shared_data
def test_other_settings_into_the_same_folder_are_refused(prepared):
    out, inputs, _ = prepared
    done = run_job("--input", inputs, "--output", str(out), "--dish-key", "title")
    assert done.returncode == 2 and "holds a run with other inputs or settings" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["--input", "/nonexistent/recipes.jsonl"], "no such file"),
        (["--constraints", "keto"], "unknown constraint"),
        (["--limit", "0"], "data.limit must be >= 1 (got 0)"),
        (["--profile", "nope"], "unknown profile"),
    ],
)
def test_bad_settings_fail_with_one_line_before_any_work(tmp_path, args, message):
    base = ["--input", str(SAMPLE), "--output", str(tmp_path / "out")]
    done = run_job(*base, *args, timeout=60)
    assert done.returncode == 2 and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_bad_config_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: [unclosed\n")
    done = run_job("--config", str(bad), "--output", str(tmp_path / "out"), timeout=60)
    assert done.returncode == 2 and "not valid YAML" in done.stderr


def test_dish_grouping_gets_a_partition_per_recipe_file(prepared, tmp_path):
    """The sort behind groupby makes one partition per input block: reading the recipes a
    file per block keeps every grouping task at about one file's worth of recipes."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import ray
    import ray.data

    from jobs.prepare_data import configure_data, read_blocks
    from rrt.config import load_settings

    recipes = pq.read_table(os.path.join(prepared[0], "recipes")).select(["id", "dish"])
    folder = tmp_path / "recipes"
    folder.mkdir()
    parts = 4
    step = -(-recipes.num_rows // parts)
    for k in range(parts):
        pq.write_table(recipes.slice(k * step, step), folder / f"part-{k}.parquet")
    started_here = not ray.is_initialized()
    ray.init(address="local", num_cpus=2, include_dashboard=False, ignore_reinit_error=True)
    try:
        configure_data(
            ray.data,
            load_settings().ray.model_copy(
                update={"shuffle": "sort", "operator_reservation": False}
            ),
        )
        assert not ray.data.DataContext.get_current().op_resource_reservation_enabled
        groups = (
            read_blocks(ray.data, str(folder))
            .groupby("dish")
            .map_groups(
                lambda g: pa.table({"dish": [g.column("dish")[0].as_py()], "rows": [g.num_rows]}),
                batch_format="pyarrow",
            )
            .materialize()
        )
        assert groups.num_blocks() == parts
        rows = pa.concat_tables(ray.get(groups.to_arrow_refs()))
        assert sum(rows.column("rows").to_pylist()) == recipes.num_rows
        assert sorted(rows.column("dish").to_pylist()) == sorted(
            set(recipes.column("dish").to_pylist())
        )
    finally:
        if started_here:
            ray.shutdown()


# ---------------------------------------------------------------- issue 49: one recipe, one row


def test_the_same_recipes_in_two_inputs_are_prepared_once(ray_cluster, tmp_path):
    lines = SAMPLE.read_text().splitlines(keepends=True)
    first, again, missing = (tmp_path / n for n in ("first.jsonl", "again.jsonl", "typo.jsonl"))
    first.write_text("".join(lines[:24]))
    again.write_text("".join(lines[16:30] + lines[28:30]))  # 8 of first's again, 2 twice in itself
    out = tmp_path / "out"
    done = run_job("--input", f"{first},{again},{missing}", "--output", str(out), "--num-cpus", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"warning: no such file: {missing}" in done.stderr
    assert "warning: 10 recipes repeat an id read before" in done.stderr
    ids = [r["id"] for r in rows(out / "recipes")]
    assert len(ids) == len(set(ids)) == 30
    no_source = [r["id"] for r in rows(out / "step_pairs" / "no_source")]
    assert len(no_source) == len(set(no_source)) == 30  # one training row per recipe, not two
    stats = json.loads((out / "stats.json").read_text())
    assert stats["recipes"] == 30 and stats["rejects"] == {"duplicate_id": 10, "missing_input": 1}
    # The missing file is listed, but it is no rejected recipe.
    assert stats["rejected"] == 10 and stats["inputs_unread"] == 1
    assert "30 recipes, 10 rejected, 1 input unread" in done.stdout
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    by_place = {r["location"]: r for r in rejects if r["reason"] == "duplicate_id"}
    assert set(by_place) == {f"{again}:{n}" for n in [*range(1, 9), 15, 16]}
    assert by_place[f"{again}:1"]["detail"].endswith(f"read first from {first}:17")
    assert by_place[f"{again}:1"]["record_id"] == json.loads(lines[16])["id"]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from("abcde"), min_size=1, max_size=12), st.randoms())
def test_an_id_bucket_keeps_the_first_read_of_each_id(tmp_path_factory, ids, rng):
    import pyarrow as pa

    from jobs.prepare_data import unique_ids

    out = tmp_path_factory.mktemp("bucket")
    order = list(range(len(ids)))
    rng.shuffle(order)  # a shuffle hands the group its rows in any order
    group = pa.table(
        {
            "id": [ids[k] for k in order],
            "title": [f"t{k}" for k in order],
            "_order": order,
            "_where": [f"in:{k}" for k in order],
            "_bucket": [0] * len(ids),
        }
    )
    kept = unique_ids(group, str(out)).to_pylist()
    firsts = {i: ids.index(i) for i in ids}
    assert kept == [
        {"id": i, "title": f"t{k}"} for i, k in sorted(firsts.items(), key=lambda x: x[1])
    ]
    rejects = [json.loads(line) for f in (out / "_rejects").glob("*") for line in f.open()]
    assert sorted(r["location"] for r in rejects) == sorted(
        f"in:{k}" for k, i in enumerate(ids) if k != firsts[i]
    )
    assert all(r["detail"].endswith(f"in:{firsts[r['record_id']]}") for r in rejects)


# ---------------------------------------------------------------- edit pairs and held-out recipes


def test_edit_pairs_and_held_out_recipes(ray_cluster, tmp_path):
    """pairs: edit writes edit rows only, each from its own split's recipes and counted in
    stats.json; the held-out ids are in no split and are counted, not silently dropped."""
    lines = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    held = [lines[0]["id"], lines[5]["id"]]
    listing = tmp_path / "held.tsv"
    listing.write_text("id\tconstraint\twhy\n" + "".join(f"{i}\tvegan\tx\n" for i in held))
    config = config_copy(
        tmp_path,
        data={"pairs": "edit", "held_out": [str(listing)], "variants": ["grounded", "no_source"]},
    )
    out = tmp_path / "out"
    done = run_job(
        "--input", str(SAMPLE), "--output", str(out), "--config", config, "--num-cpus", "2"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    recipes = {r["id"]: r for r in rows(out / "recipes")}
    assert not set(held) & set(recipes) and len(recipes) == len(lines) - 2
    stats = json.loads((out / "stats.json").read_text())
    assert stats["held_out"] == {"recipes": 2, "listed": 2}
    assert sorted(
        json.loads(x)["id"] for x in (out / "held_out.jsonl").read_text().splitlines()
    ) == sorted(held)
    found = {}
    for split in ("train", "dev", "test"):
        folder = out / "step_pairs" / "grounded" / split
        files = list(folder.glob("*.parquet"))
        for f in files:
            # The split is the folder (a hive partition); every other column is in the file.
            assert set(STEP_PAIR_SCHEMA.names) - {"split"} <= set(pads.dataset(f).schema.names)
        found[split] = rows(folder)
        for row in found[split]:
            assert row["pair_source"] == "edit" and row["source_id"] == row["target_id"]
            assert recipes[row["source_id"]]["split"] == split  # a split's recipes only
            parts = parse_text("grounded", row["text"])
            target = recipes[row["target_id"]]
            assert parts.target["title"] == target["title"]
            assert parts.target_steps[-1] == target["steps"][row["source_step"]]
            assert target[valid_column(row["constraint"])]  # the target fits the constraint
    assert sum(map(len, found.values())) > 0
    edits = stats["edit_pairs"]
    learned = collections.Counter((r["constraint"], s) for s, rs in found.items() for r in rs)
    assert {
        (c, s): n["changed_steps"] + n["copied_steps"]
        for c, by in edits.items()
        for s, n in by.items()
        if n["changed_steps"] + n["copied_steps"]
    } == dict(learned)


def test_a_recipe_too_long_to_align_is_counted_in_the_stats(tmp_path):
    import pyarrow as pa

    from jobs.prepare_data import pair_group, parse_args, recipe_schema, settings_from, write_stats
    from rrt.corpus.alignment import train_translation_table
    from rrt.corpus.pairing import MAX_ALIGNED_STEPS
    from rrt.corpus.recipe_table import recipe_row
    from rrt.recipes.recipe import Recipe

    run = settings_from(parse_args(["--input", str(SAMPLE), "--output", str(tmp_path)]))
    method = ["Whisk the flour and milk.", "Fry the batter in a pan.", "Serve warm."]
    long = [f"Stir the batter {k} times." for k in range(MAX_ALIGNED_STEPS + 1)]
    recipes = [
        Recipe("a", "Pancakes", ["1 cup flour", "1 cup milk"], method),
        Recipe("b", "Vegan Pancakes", ["1 cup flour", "1 cup oat milk"], method),
        Recipe("c", "Pancakes", ["1 cup flour", "1 cup milk"], long),
    ]
    group = pa.Table.from_pylist(
        [{**recipe_row(r, list(run.constraints), run.data), "dish": "pancakes"} for r in recipes],
        schema=recipe_schema(list(run.constraints)),
    )
    path = str(tmp_path / "translation_table.npz")
    train_translation_table([(method, method)], 100, 1).save(path)
    pairs = pair_group(group, run, path).to_pylist()
    assert pairs and {p["source_id"] for p in pairs} == {"a"}
    assert write_stats(run, {}, False)["unpaired_long_recipes"] == 1
    (listed,) = [json.loads(line) for f in (tmp_path / "_long").glob("*") for line in f.open()]
    assert listed["id"] == "c" and listed["steps"] == MAX_ALIGNED_STEPS + 1


def _shown_links(capsys, *args: str) -> list[dict]:
    """The links `rrt align` prints under "kept links", as the pipeline's alignment column."""
    from cli import main as cli

    assert cli.main(["align", *args]) == 0
    out = capsys.readouterr().out
    links = []
    for line in out.split("\nkept links", 1)[1].splitlines()[1:]:
        if line.strip() == "none":
            continue
        source, targets = line.strip().split(" -> ")
        pairs = [t.split(" @ ") for t in targets.split(", ")]
        links.append(
            {
                "source_step": int(source[1:]),
                "target_steps": [int(t[1:]) for t, _ in pairs],
                "scores": [float(s) for _, s in pairs],
            }
        )
    return links


def test_rrt_align_shows_the_links_the_pipeline_keeps(tmp_path, capsys):
    from jobs.prepare_data import parse_args, settings_from
    from rrt.corpus.alignment import AlignSettings, train_translation_table
    from rrt.corpus.pairing import PairSettings, pair_dish
    from rrt.corpus.recipe_table import recipe_row

    by_id = {r.id: r for r in read_recipes([str(SAMPLE)])}
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    # A run whose settings differ from ray_config.yaml's: rrt align takes them from its run.json.
    run = settings_from(parse_args(["--input", str(SAMPLE), "--output", str(prepared)]))
    record = run.record()
    record["alignment"].update(link_threshold=20.0, max_fanout=1)
    (prepared / "run.json").write_text(json.dumps({"job": "prepare_data", "settings": record}))
    cocoa = by_id["sample-hot-cocoa-1"]
    table = train_translation_table([(cocoa.steps, by_id["sample-hot-cocoa-2"].steps)], 200, 2)
    table.save(str(prepared / "translation_table.npz"))
    align = AlignSettings.from_config(run.alignment, link_threshold=20.0, max_fanout=1)
    # The same dish, paired: the links the run keeps. Another dish (pancakes): none.
    for target in (by_id["sample-hot-cocoa-2"], by_id["sample-pancakes-2"]):
        paths = []
        for recipe in (cocoa, target):
            paths.append(tmp_path / f"{recipe.id}.json")
            paths[-1].write_text(
                json.dumps({k: getattr(recipe, k) for k in ("id", "title", "ingredients", "steps")})
            )
        rows = [recipe_row(r, list(run.constraints), run.data) for r in (cocoa, target)]
        kept = [
            pair["alignment"]
            for pair in pair_dish(
                rows, list(run.constraints), table, PairSettings.from_config(run.data), align
            )
            if (pair["source_id"], pair["target_id"]) == (cocoa.id, target.id)
        ]
        shown = _shown_links(
            capsys, *map(str, paths), "--table", str(prepared / "translation_table.npz")
        )
        assert shown == (kept[0] if kept else []) and bool(kept) == ("cocoa" in target.id)

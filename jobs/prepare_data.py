"""Prepare training data on Ray Data: recipes -> dishes -> recipe pairs -> step pairs.

    python jobs/prepare_data.py --input data/sample/recipes.jsonl --output out/demo/prepared
    python jobs/prepare_data.py --input 'corpora/*.csv,layer1.json' --output out/full --profile v100x64
    ray job submit --working-dir . -- python jobs/prepare_data.py --input data/sample --output /shared/prepared

Writes into --output: recipes/, recipe_pairs/, step_pairs/<variant>/<split>/ (Parquet),
translation_table.npz, rejects.jsonl, held_out.jsonl and stats.json. A rerun into the same folder with the
same settings resumes: finished stages are kept, the rest are done. A rerun with other
settings is refused, so two runs never mix.
"""

from __future__ import annotations

# ray is imported where used: --help, and a bad argument, answer without it.
import argparse
import hashlib
import json
import os
import shutil
import sys
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from rrt.config import (
    AlignmentSettings,
    ConfigError,
    DataSettings,
    RaySettings,
    load_settings,
)
from rrt.corpus.alignment import AlignSettings, TranslationTable, train_translation_table
from rrt.corpus.edit_pairs import EditSettings, edit_pairs
from rrt.corpus.formats import PAIR_VARIANTS
from rrt.corpus.held_out import read_held_out
from rrt.corpus.pairing import (
    MAX_ALIGNED_STEPS,
    PairSettings,
    cap_dish,
    pair_dish,
    recipe_rows,
    step_pair_rows,
    valid_column,
)
from rrt.corpus.recipe_table import recipe_row
from rrt.corpus.step_pair_table import STEP_PAIR_SCHEMA
from rrt.recipes.loaders import (
    INPUT_REASONS,
    InputError,
    LoadReport,
    duplicate,
    expand_inputs,
    missing_input,
    read_located_recipes,
)
from rrt.recipes.loaders.source import is_remote
from rrt.recipes.step_kinds import KINDS
from rrt.recipes.tagger import parse_constraints
from runtime.cluster import start_ray
from runtime.parquet import count_rows, parquet_files
from runtime.runs import JobError, claim_output, write_json_atomic

SPLITS = ("train", "dev", "test")
LINK = pa.struct(
    [
        ("source_step", pa.int64()),
        ("target_steps", pa.list_(pa.int64())),
        ("scores", pa.list_(pa.float64())),
    ]
)
TEXTS = pa.list_(pa.string())
NON_STEPS = pa.list_(
    pa.struct([("kind", pa.string()), ("text", pa.string()), ("before", pa.int64())])
)
PAIR_SCHEMA = pa.schema(
    [
        ("source_id", pa.string()),
        ("target_id", pa.string()),
        ("constraint", pa.string()),
        ("split", pa.string()),
        ("dish", pa.string()),
        ("pair_score", pa.float64()),
        ("alignment", pa.list_(LINK)),
        ("source_title", pa.string()),
        ("source_ingredients", TEXTS),
        ("source_steps", TEXTS),
        ("target_title", pa.string()),
        ("target_ingredients", TEXTS),
        ("target_steps", TEXTS),
    ]
)
# An edit pair (rrt.corpus.edit_pairs): a recipe pair whose source is its target with the
# constraint's foods put back, and the steps it learns (the changed ones and a few copies).
EDIT_SCHEMA = pa.schema(
    list(PAIR_SCHEMA)
    + [
        ("pair_source", pa.string()),
        ("learned_steps", pa.list_(pa.int64())),
        ("copied_steps", pa.list_(pa.int64())),
    ]
)
EM_PAIRS_PER_DISH = 4
# Files are the unit of work of the stages that read them: small files, bounded task memory.
RECIPES_PER_FILE = 4000
PAIRS_PER_FILE = 1000
# Pairs (or recipes) formatted per small Arrow batch, within one file per task.
FORMAT_BATCH = 64
LOAD_CHUNK = 2000
WRITE_CPUS = 0.5
# A worker process keeps the heap its tasks grew; replacing it every few tasks keeps each
# process at about one task's footprint however many tasks the corpus needs.
WORKER_TASKS = 8
GROUP_TASKS = 4  # dish groups are the heaviest tasks
RECIPE_ROW_SCHEMA = pa.schema(
    [("id", pa.string()), ("split", pa.string()), ("step", pa.int64()), ("text", pa.string())]
)
EM_SCHEMA = pa.schema([("key", pa.string()), ("source_steps", TEXTS), ("target_steps", TEXTS)])
# What each loaded recipe carries until its id is known to be the first: its place in the read
# order (input index, then record) and where it was read, for a duplicate's reject.
LOADED_COLUMNS = [("_order", pa.int64()), ("_where", pa.string())]
RECORD_BITS = 40  # records per input below 2**40; inputs above it


# ---------------------------------------------------------------- settings and resume


@dataclass(frozen=True)
class PrepareRun:
    """One run's checked settings: the `data`, `alignment` and `ray` blocks after the profile and
    flags, with the input files found, the output made absolute and the constraints parsed. Frozen
    and typed, the same object reaches the Ray tasks."""

    data: DataSettings
    alignment: AlignmentSettings
    ray: RaySettings
    inputs: tuple[str, ...]
    output: str
    constraints: tuple[str, ...]
    translation_table: str | None = None  # a table to reuse instead of learning one
    held_out: frozenset[str] = frozenset()  # recipe ids of the data.held_out lists

    def record(self) -> dict[str, object]:
        """The settings as run.json keeps them (and the fingerprint reads them)."""
        data = self.data
        return {
            "inputs": list(self.inputs),
            "output": self.output,
            "constraints": list(self.constraints),
            "limit": data.limit,
            "variants": list(data.variants),
            "dish_key": data.dish_key,
            "train": data.split.train,
            "dev": data.split.dev,
            "seed": data.seed,
            "pairing": {
                key: getattr(data, key)
                for key in (
                    "pairs_per_source",
                    "candidates_per_source",
                    "max_dish_recipes",
                    "min_dish_similarity",
                    "title_extra_words",
                )
            },
            "pairs": data.pairs,
            "edit_source": data.edit_source,
            "copy_share": data.copy_share,
            "held_out": list(data.held_out),
            "alignment": self.alignment.model_dump(),
            "translation_table": self.translation_table,
            "ray": self.ray.model_dump(),
        }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line flags; each overrides the matching ray_config.yaml value."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--input", help="comma list of files, globs, folders or URIs (default: data.inputs)"
    )
    parser.add_argument("--output", help="output folder (default: data.output)")
    parser.add_argument("--config", help="config file (default: ray_config.yaml)")
    parser.add_argument(
        "--profile",
        help="config profile: local, v100x64 (a V100 cluster) or hopper (one H100/H200)",
    )
    parser.add_argument("--constraints", help="'all' or a comma list (default: data.constraints)")
    parser.add_argument(
        "--limit", type=int, help="read at most N clean recipes (duplicate ids among them dropped)"
    )
    parser.add_argument(
        "--dish-key", choices=("title", "head"), help="dish key level (default: data.dish_key)"
    )
    parser.add_argument(
        "--pairs",
        choices=("aligned", "edit", "both"),
        help="step pairs of the pair variants: aligned (the paper's), edit or both (default: data.pairs)",
    )
    parser.add_argument(
        "--translation-table", help="reuse this translation_table.npz instead of learning one"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier run of this job in --output (any other folder is refused)",
    )
    parser.add_argument("--num-cpus", type=int, help="CPUs for a local Ray (default: all)")
    parser.add_argument(
        "--verbose", action="store_true", help="Ray's own INFO lines on the console too"
    )
    return parser.parse_args(argv)


def settings_from(args: argparse.Namespace) -> PrepareRun:
    """Merge config and flags into the settings of this run; errors are JobError lines."""
    flags = {
        "output": args.output,
        "constraints": args.constraints,
        "limit": args.limit,
        "dish_key": args.dish_key,
        "pairs": args.pairs,
        "inputs": args.input.split(",") if args.input else None,
    }
    try:
        config = load_settings(
            args.config, args.profile, {"data": flags, "ray": {"num_cpus": args.num_cpus}}
        )
    except ConfigError as err:
        raise JobError(str(err)) from None
    inputs = config.data.inputs
    if not inputs:
        raise JobError("no input given (--input or data.inputs)")
    output = config.data.output
    if not output:
        raise JobError("no output folder given (--output or data.output)")
    if is_remote(output):
        raise JobError("--output must be a local or shared-filesystem folder")
    try:
        constraints = parse_constraints(config.data.constraints)
        paths = expand_inputs([i.strip() for i in inputs if i.strip()])
        # A list the project ships (the technique set) is found from any working folder.
        project = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        held_out = read_held_out(
            [
                path if os.path.exists(path) or os.path.isabs(path) else os.path.join(project, path)
                for path in config.data.held_out
            ]
        )
    except (ValueError, InputError) as err:
        raise JobError(str(err)) from None
    if not paths:
        raise JobError(f"no input files found in {', '.join(inputs)}")
    missing = [missing_input(path) for path in paths]
    if all(missing):
        raise JobError("; ".join(missing))  # nothing to read: fail before any work
    return PrepareRun(
        config.data,
        config.alignment,
        config.ray,
        tuple(paths),
        os.path.abspath(output),
        tuple(constraints),
        args.translation_table,
        held_out,
    )


def fingerprint(settings: PrepareRun) -> str:
    """Hash of everything that changes the outputs (inputs by path, size and mtime)."""
    files = []
    for path in settings.inputs + tuple(settings.data.held_out):
        stat = os.stat(path) if os.path.isfile(path) else None  # URIs, missing inputs
        files.append([path, stat.st_size if stat else None, int(stat.st_mtime) if stat else None])
    keep = {k: v for k, v in settings.record().items() if k not in ("ray", "output", "inputs")}
    blob = json.dumps({"files": files, **keep}, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def stage_done(path: str) -> bool:
    """A stage's output exists only once it finished (written to .tmp, then renamed)."""
    return os.path.exists(path)


def publish(tmp: str, final: str) -> None:
    """Atomically move a finished stage's output into place."""
    os.replace(tmp, final)


# ---------------------------------------------------------------- work done by Ray tasks


def recipe_schema(constraints: list[str]) -> pa.Schema:
    """Columns of recipes/: the recipe, its dish and split, one validity flag per constraint."""
    return pa.schema(
        [
            ("id", pa.string()),
            ("title", pa.string()),
            ("ingredients", TEXTS),
            ("steps", TEXTS),
            ("non_steps", NON_STEPS),
            ("source", pa.string()),
            ("dish", pa.string()),
            ("split", pa.string()),
        ]
        + [(valid_column(c), pa.bool_()) for c in constraints]
    )


def load_files(batch: pa.Table, settings: PrepareRun) -> Iterator[pa.Table]:
    """Ray task: input files -> recipe rows in chunks (a huge file never sits in memory whole),
    each with its read order and location; each file's rejects go to _rejects/<index>.jsonl,
    its held-out recipes (data.held_out) to _held_out/<index>.jsonl."""
    schema = pa.schema(list(recipe_schema(settings.constraints)) + LOADED_COLUMNS)
    for path, index in zip(batch.column("path").to_pylist(), batch.column("index").to_pylist()):
        report = LoadReport()
        reject_path = os.path.join(settings.output, "_rejects", f"{index:06d}.jsonl")
        os.makedirs(os.path.dirname(reject_path), exist_ok=True)
        with open(reject_path, "w", encoding="utf-8") as rejects:
            report.on_reject = lambda r: rejects.write(
                json.dumps(r.to_dict(), ensure_ascii=False) + "\n"
            )
            rows, held = [], []
            for number, (where, recipe) in enumerate(read_located_recipes([path], report)):
                if recipe.id in settings.held_out:
                    held.append({"id": recipe.id, "location": where})
                    continue
                row = recipe_row(recipe, list(settings.constraints), settings.data)
                rows.append({**row, "_order": (index << RECORD_BITS) + number, "_where": where})
                if len(rows) == LOAD_CHUNK:
                    yield pa.Table.from_pylist(rows, schema=schema)
                    rows = []
            if rows:
                yield pa.Table.from_pylist(rows, schema=schema)
        if held:
            _side_file(settings.output, "_held_out", f"{index:06d}", held)


def format_files(batch: pa.Table, variant: str, schema: pa.Schema) -> Iterator[pa.Table]:
    """Ray task: Parquet files of pairs (or recipes) -> training rows of one variant."""
    make = step_pair_rows if variant in PAIR_VARIANTS else recipe_rows
    for path in batch.column("path").to_pylist():
        for part in pq.ParquetFile(path).iter_batches(batch_size=FORMAT_BATCH):
            yield pa.Table.from_pylist(
                [row for item in part.to_pylist() for row in make(item, variant)], schema=schema
            )


def edit_files(batch: pa.Table, settings: PrepareRun) -> Iterator[pa.Table]:
    """Ray task: Parquet files of recipes -> their edit pairs (rrt.corpus.edit_pairs); each pair
    stays in its recipe's split."""
    edit = EditSettings.from_config(settings.data)
    for path in batch.column("path").to_pylist():
        for part in pq.ParquetFile(path).iter_batches(batch_size=FORMAT_BATCH):
            yield pa.Table.from_pylist(
                [
                    p
                    for row in part.to_pylist()
                    for p in edit_pairs(row, settings.constraints, edit)
                ],
                schema=EDIT_SCHEMA,
            )


def copy_columns(batch: pa.Table, columns: list[str] | None) -> Iterator[pa.Table]:
    """Ray task: some columns (None: all) of Parquet files, a row group at a time."""
    for path in batch.column("path").to_pylist():
        for part in pq.ParquetFile(path).iter_batches(batch_size=FORMAT_BATCH * 8, columns=columns):
            yield pa.Table.from_batches([part])


def per_file(ray_data, folder: str):
    """A dataset of a folder's Parquet files, one task each: files are the unit of work, so a
    task's memory is one (bounded) file's worth at any corpus size."""
    files = parquet_files(folder)
    return ray_data.from_items([{"path": f} for f in files], override_num_blocks=max(1, len(files)))


def read_blocks(ray_data, folder: str, columns: list[str] | None = None):
    """A Parquet folder as one block per file. Ray Data's own reader packs small files into
    blocks of up to 128 MB, and a sort makes as many partitions as it gets blocks, so a dish
    grouping over few big blocks would hand whole corpora to single tasks; file-sized blocks
    keep every grouping task at about one file's worth of recipes at any corpus size."""
    return per_file(ray_data, folder).map_batches(
        copy_columns,
        batch_format="pyarrow",
        batch_size=1,
        fn_kwargs={"columns": columns},
        max_calls=WORKER_TASKS,
    )


def id_bucket(batch: pa.Table, buckets: int) -> pa.Table:
    """Ray task: each row's id bucket (a stable hash of the id), the key duplicates meet on."""
    ids = batch.column("id").to_pylist()
    return batch.append_column(
        "_bucket", pa.array([zlib.crc32(i.encode()) % buckets for i in ids], pa.int64())
    )


def unique_ids(group: pa.Table, output: str) -> pa.Table:
    """Ray task: the recipes of one id bucket, each id once: the first read is kept, every
    later one is a duplicate_id reject (in _rejects/, named by the bucket, so a rerun of the
    task rewrites the same file)."""
    table = group.take(
        pc.sort_indices(group, sort_keys=[("id", "ascending"), ("_order", "ascending")])
    )
    ids, wheres = table.column("id").to_pylist(), table.column("_where").to_pylist()
    first = [k == 0 or ids[k] != ids[k - 1] for k in range(len(ids))]
    rejects, kept_at = [], ""
    for k, is_first in enumerate(first):
        if is_first:
            kept_at = wheres[k]
        else:
            rejects.append(duplicate(wheres[k], ids[k], kept_at).to_dict())
    if rejects:
        bucket = table.column("_bucket")[0].as_py()
        _side_file(output, "_rejects", f"duplicate-ids-{bucket}", rejects)
    kept = table.filter(pa.array(first))
    kept = kept.take(pc.sort_indices(kept, sort_keys=[("_order", "ascending")]))  # read order
    return kept.drop_columns(["_order", "_where", "_bucket"])


def _side_file(output: str, folder: str, name: str, rows: list[dict]) -> None:
    path = os.path.join(output, folder, hashlib.sha1(name.encode()).hexdigest()[:16] + ".jsonl")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def em_sample(
    group: pa.Table, constraints: tuple[str, ...], seed: int, keep: float, per_dish: int
) -> pa.Table:
    """Ray task: a few (invalid, valid) recipe pairs of one dish for learning the table.

    At most `per_dish` per dish, each kept with probability `keep`, so the rows
    sorted for the sample stay near a small multiple of `alignment.em_pairs`.
    """
    rows = sorted(group.to_pylist(), key=lambda r: r["id"])
    out = []
    for constraint in constraints:
        column = valid_column(constraint)
        sources = [r for r in rows if not r[column]][:2]
        targets = [r for r in rows if r[column]][:2]
        for s in sources:
            for t in targets:
                key = hashlib.sha1(f"{seed}|{s['id']}|{t['id']}".encode()).hexdigest()
                if int(key[:8], 16) / 16**8 < keep:
                    out.append({"key": key, "source_steps": s["steps"], "target_steps": t["steps"]})
    out = sorted(out, key=lambda row: row["key"])[:per_dish]
    return pa.Table.from_pylist(out, schema=EM_SCHEMA)


_TABLES: dict[str, TranslationTable] = {}


def pair_group(group: pa.Table, settings: PrepareRun, path: str) -> pa.Table:
    """Ray task: recipe pairs with step alignments for one dish (`path`: the translation table)."""
    if path not in _TABLES:
        _TABLES[path] = TranslationTable.load(path)
    rows = sorted(group.to_pylist(), key=lambda r: r["id"])
    pair_settings = PairSettings.from_config(settings.data)
    kept, capped = cap_dish(rows, pair_settings)
    if capped:
        _side_file(
            settings.output,
            "_capped",
            rows[0]["dish"],
            [{"id": r["id"], "dish": r["dish"]} for r in capped],
        )
    align = AlignSettings.from_config(settings.alignment)
    unlike: list[dict] = []
    too_long: list[dict] = []
    pairs = pair_dish(
        kept, list(settings.constraints), _TABLES[path], pair_settings, align, unlike, too_long
    )
    if unlike:
        _side_file(settings.output, "_unlike", rows[0]["dish"], unlike)
    if too_long:
        _side_file(settings.output, "_long", rows[0]["dish"], too_long)
    return pa.Table.from_pylist(pairs, schema=PAIR_SCHEMA)


# ---------------------------------------------------------------- stages (driver)


def log(message: str) -> None:
    """One progress line on stderr."""
    print(f"[prepare_data] {message}", file=sys.stderr, flush=True)


def group_partitions(settings: PrepareRun, folder: str = "recipes") -> int | None:
    """Hash-shuffle partitions for grouping a folder's recipes (by dish, by id bucket): enough
    for every CPU, not one per few rows. None for the sort shuffle, which makes one partition
    per input block instead."""
    import ray

    if settings.ray.shuffle == "sort":
        return None
    cpus = int(ray.cluster_resources().get("CPU", 1))
    recipes = count_rows(os.path.join(settings.output, folder))
    return max(cpus, min(1000, recipes // 2000))


def configure_data(ray_data, ray_settings: RaySettings) -> None:
    """Pick Ray Data's shuffle for the groupby stages (sort: spills, so memory stays bounded)
    and whether each operator keeps a reserved share of the CPUs."""
    strategies = {
        "sort": ray_data.context.ShuffleStrategy.SORT_SHUFFLE_PULL_BASED,
        "hash": ray_data.context.ShuffleStrategy.HASH_SHUFFLE,
    }
    context = ray_data.DataContext.get_current()
    context.shuffle_strategy = strategies[ray_settings.shuffle]
    # With a reserved share per operator, a map stage and its write split a few CPUs so
    # that one map task runs at a time and the other CPUs go unused.
    context.op_resource_reservation_enabled = ray_settings.operator_reservation


def stage_recipes(ray_data, settings: PrepareRun, timings: dict) -> None:
    """Load, clean, tag, key and split every recipe -> _loaded/, then keep each id once ->
    recipes/ (Parquet)."""
    final = os.path.join(settings.output, "recipes")
    loaded = os.path.join(settings.output, "_loaded")
    if stage_done(final):
        shutil.rmtree(loaded, ignore_errors=True)  # a run stopped just after publishing
        return log("recipes: done earlier, kept")
    started = time.perf_counter()
    if not stage_done(loaded):
        shutil.rmtree(os.path.join(settings.output, "_rejects"), ignore_errors=True)
        shutil.rmtree(os.path.join(settings.output, "_held_out"), ignore_errors=True)
        files = ray_data.from_items(
            [{"path": p, "index": i} for i, p in enumerate(settings.inputs)],
            override_num_blocks=max(1, len(settings.inputs)),
        )
        recipes = files.map_batches(
            load_files,
            batch_size=1,
            batch_format="pyarrow",
            fn_kwargs={"settings": settings},
            max_calls=WORKER_TASKS,
        )
        if settings.data.limit:
            recipes = recipes.limit(settings.data.limit)
        tmp = loaded + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        # A write fused to its map holds all that task's rows until the task ends; writing as a
        # separate operator (other CPUs) keeps one huge input file from filling memory. No
        # min_rows_per_file: it buffers rows until a file is full.
        recipes.write_parquet(
            tmp, max_rows_per_file=RECIPES_PER_FILE, ray_remote_args={"num_cpus": WRITE_CPUS}
        )
        os.makedirs(tmp, exist_ok=True)
        publish(tmp, loaded)
    stage_unique_ids(ray_data, settings, loaded, final)
    shutil.rmtree(loaded)
    timings["recipes"] = round(time.perf_counter() - started, 2)
    log(f"recipes: {count_rows(final)} in {timings['recipes']}s")


def stage_unique_ids(ray_data, settings: PrepareRun, loaded: str, final: str) -> None:
    """Keep each recipe id once across every input (the first read): the same recipe in two
    files would otherwise be two recipes in the statistics and twice in the training rows.
    Duplicates meet on a hash bucket of the id, about one file's worth of recipes a bucket, so
    every task stays bounded and the rejects make a file per bucket, not one per id."""
    rows = count_rows(loaded)
    tmp = final + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    if rows == 0:
        os.makedirs(tmp)
        return publish(tmp, final)
    buckets = max(1, rows // RECIPES_PER_FILE)
    unique = (
        read_blocks(ray_data, loaded)
        .map_batches(id_bucket, batch_format="pyarrow", fn_kwargs={"buckets": buckets})
        .groupby("_bucket", num_partitions=group_partitions(settings, "_loaded"))
        .map_groups(
            unique_ids,
            fn_kwargs={"output": settings.output},
            batch_format="pyarrow",
            max_calls=GROUP_TASKS,
        )
    )
    unique.write_parquet(tmp, max_rows_per_file=RECIPES_PER_FILE)
    os.makedirs(tmp, exist_ok=True)
    publish(tmp, final)


def stage_translation_table(ray_data, settings: PrepareRun, timings: dict) -> None:
    """Learn (or copy) the word translation table -> translation_table.npz."""
    final = os.path.join(settings.output, "translation_table.npz")
    if stage_done(final):
        return log("translation table: done earlier, kept")
    started = time.perf_counter()
    if settings.translation_table:
        TranslationTable.load(settings.translation_table)  # fail early on a bad file
        shutil.copyfile(settings.translation_table, final)
        return log(f"translation table: reused {settings.translation_table}")
    align = settings.alignment
    em_pairs = align.em_pairs
    recipes_path = os.path.join(settings.output, "recipes")
    # Keep about 4x what EM needs; small corpora may give many pairs per dish.
    recipes_count = max(1, count_rows(recipes_path))
    task = {
        "constraints": settings.constraints,
        "seed": settings.data.seed,
        "keep": min(1.0, 4 * em_pairs / recipes_count),
        "per_dish": max(EM_PAIRS_PER_DISH, -(-4 * em_pairs // recipes_count)),
    }
    recipes = read_blocks(ray_data, recipes_path)
    sample = (
        recipes.groupby("dish", num_partitions=group_partitions(settings))
        .map_groups(em_sample, fn_kwargs=task, batch_format="pyarrow", max_calls=GROUP_TASKS)
        .sort("key")
        .limit(em_pairs)
    )
    pairs = [(row["source_steps"], row["target_steps"]) for row in sample.iter_rows()]
    table = train_translation_table(pairs, align.vocab_size, align.em_iterations)
    tmp = final + ".tmp.npz"
    table.save(tmp)
    publish(tmp, final)
    timings["translation_table"] = round(time.perf_counter() - started, 2)
    log(
        f"translation table: {len(pairs)} recipe pairs, {len(table.vocab)} words, {timings['translation_table']}s"
    )


def stage_pairs(ray_data, settings: PrepareRun, timings: dict) -> None:
    """Pair and align recipes within each dish -> _pairs/ (staging) and recipe_pairs/."""
    out = settings.output
    staging, final = os.path.join(out, "_pairs"), os.path.join(out, "recipe_pairs")
    started = time.perf_counter()
    if not stage_done(staging):
        shutil.rmtree(os.path.join(out, "_capped"), ignore_errors=True)
        shutil.rmtree(os.path.join(out, "_unlike"), ignore_errors=True)
        shutil.rmtree(os.path.join(out, "_long"), ignore_errors=True)
        recipes = read_blocks(ray_data, os.path.join(out, "recipes"))
        task = {"settings": settings, "path": os.path.join(out, "translation_table.npz")}
        pairs = recipes.groupby("dish", num_partitions=group_partitions(settings)).map_groups(
            pair_group, fn_kwargs=task, batch_format="pyarrow", max_calls=GROUP_TASKS
        )
        tmp = staging + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        pairs.write_parquet(tmp, max_rows_per_file=PAIRS_PER_FILE)
        os.makedirs(tmp, exist_ok=True)
        publish(tmp, staging)
    if not stage_done(final):
        columns = [
            "source_id",
            "target_id",
            "constraint",
            "split",
            "dish",
            "pair_score",
            "alignment",
        ]
        tmp = final + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        write_table(ray_data, staging, tmp, columns=columns, schema=PAIR_SCHEMA)
        publish(tmp, final)
        timings["pairs"] = round(time.perf_counter() - started, 2)
        log(f"recipe pairs: {count_rows(final)} in {timings['pairs']}s")
    else:
        log("recipe pairs: done earlier, kept")


def stage_edit_pairs(ray_data, settings: PrepareRun, timings: dict) -> None:
    """Edit pairs of every recipe that fits a constraint -> _edits/ (data.pairs edit or both)."""
    final = os.path.join(settings.output, "_edits")
    if settings.data.pairs == "aligned":
        return
    if stage_done(final):
        return log("edit pairs: done earlier, kept")
    started = time.perf_counter()
    recipes = os.path.join(settings.output, "recipes")
    tmp = final + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    if count_rows(recipes):
        per_file(ray_data, recipes).map_batches(
            edit_files,
            batch_format="pyarrow",
            batch_size=1,
            fn_kwargs={"settings": settings},
            max_calls=WORKER_TASKS,
        ).write_parquet(tmp, max_rows_per_file=PAIRS_PER_FILE)
    os.makedirs(tmp, exist_ok=True)
    publish(tmp, final)
    timings["edit_pairs"] = round(time.perf_counter() - started, 2)
    log(f"edit pairs: {count_rows(final)} in {timings['edit_pairs']}s")


def pair_folders(settings: PrepareRun) -> list[str]:
    """The recipe-pair folders the pair variants are formatted from (data.pairs)."""
    out, pairs = settings.output, settings.data.pairs
    return [os.path.join(out, "_pairs")] * (pairs != "edit") + [os.path.join(out, "_edits")] * (
        pairs != "aligned"
    )


def write_table(ray_data, source: str, dest: str, columns: list[str], schema: pa.Schema) -> None:
    """Copy some columns of a Parquet folder (possibly empty) into another."""
    if count_rows(source) == 0:
        os.makedirs(dest, exist_ok=True)
        pq.write_table(
            pa.table({c: pa.array([], schema.field(c).type) for c in columns}),
            os.path.join(dest, "empty.parquet"),
        )
        return
    read_blocks(ray_data, source, columns).write_parquet(dest)


def stage_step_pairs(ray_data, settings: PrepareRun, timings: dict) -> None:
    """Format every variant, split by split -> step_pairs/<variant>/<split>/."""
    out = settings.output
    for variant in settings.data.variants:
        final = os.path.join(out, "step_pairs", variant)
        if stage_done(final):
            log(f"step pairs {variant}: done earlier, kept")
            continue
        started = time.perf_counter()
        if variant in PAIR_VARIANTS:
            sources, schema = pair_folders(settings), STEP_PAIR_SCHEMA
        else:
            sources, schema = [os.path.join(out, "recipes")], RECIPE_ROW_SCHEMA
        tmp = final + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        files = [f for source in sources if count_rows(source) for f in parquet_files(source)]
        if files:
            rows = ray_data.from_items(
                [{"path": f} for f in files], override_num_blocks=len(files)
            ).map_batches(
                format_files,
                batch_format="pyarrow",
                batch_size=1,
                fn_kwargs={"variant": variant, "schema": schema},
                max_calls=WORKER_TASKS,
            )
            # One pass writes every split; hive folders split=X are then renamed to X.
            rows.write_parquet(tmp, partition_cols=["split"])
        for split in SPLITS:
            hive = os.path.join(tmp, f"split={split}")
            if os.path.isdir(hive):
                os.replace(hive, os.path.join(tmp, split))
            os.makedirs(os.path.join(tmp, split), exist_ok=True)
        publish(tmp, final)
        timings[f"step_pairs/{variant}"] = round(time.perf_counter() - started, 2)
        log(f"step pairs {variant}: {count_rows(final)} in {timings[f'step_pairs/{variant}']}s")


# ---------------------------------------------------------------- measurements


def count_by(path: str, columns: list[str]) -> Counter:
    """Row counts per value combination of some columns, streamed in batches."""
    counts: Counter = Counter()
    files = [os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs if f.endswith(".parquet")]
    if not files:
        return counts
    for batch in pads.dataset(files, format="parquet").to_batches(columns=columns):
        counts.update(zip(*(batch.column(c).to_pylist() for c in columns)))
    return counts


def count_non_steps(path: str) -> dict[str, int]:
    """Method lines set aside as not instructions, by kind (serving, header, note, storage)."""
    kinds: Counter = Counter()
    files = [os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs if f.endswith(".parquet")]
    for batch in (
        pads.dataset(files, format="parquet").to_batches(columns=["non_steps"]) if files else []
    ):
        kinds.update(pc.list_flatten(batch.column("non_steps")).field("kind").to_pylist())
    return {kind: kinds.get(kind, 0) for kind in KINDS}


def gather_rejects(output: str) -> Counter:
    """Concatenate the tasks' reject files into rejects.jsonl; count by reason."""
    reasons: Counter = Counter()
    folder = os.path.join(output, "_rejects")
    with open(os.path.join(output, "rejects.jsonl"), "w", encoding="utf-8") as dest:
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            with open(os.path.join(folder, name), encoding="utf-8") as src:
                for line in src:
                    reasons[json.loads(line)["reason"]] += 1
                    dest.write(line)
    return reasons


def gather_held_out(output: str) -> int:
    """Concatenate the tasks' held-out files into held_out.jsonl; count the recipes."""
    count = 0
    folder = os.path.join(output, "_held_out")
    with open(os.path.join(output, "held_out.jsonl"), "w", encoding="utf-8") as dest:
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            with open(os.path.join(folder, name), encoding="utf-8") as src:
                for line in src:
                    count += 1
                    dest.write(line)
    return count


def count_edit_pairs(output: str, constraints: tuple[str, ...]) -> dict:
    """Edit pairs per constraint and split: recipes, changed steps and copied steps learned."""
    counts = {c: {s: Counter() for s in SPLITS} for c in constraints}
    columns = ["constraint", "split", "learned_steps", "copied_steps"]
    files = parquet_files(os.path.join(output, "_edits"))
    for batch in pads.dataset(files, format="parquet").to_batches(columns=columns) if files else []:
        for c, split, learned, copied in zip(*(batch.column(k).to_pylist() for k in columns)):
            row = counts[c][split]
            row["recipes"] += 1
            row["changed_steps"] += len(learned) - len(copied)
            row["copied_steps"] += len(copied)
    keys = ("recipes", "changed_steps", "copied_steps")
    return {c: {s: {k: row[k] for k in keys} for s, row in by.items()} for c, by in counts.items()}


def write_stats(settings: PrepareRun, timings: dict, resumed: bool) -> dict:
    """stats.json: the paper's Table 1 per constraint (aligned pairs), edit pairs, held-out
    recipes, rejects, timings and throughput."""
    out = settings.output
    constraints = settings.constraints
    recipes = os.path.join(out, "recipes")
    flags = count_by(recipes, ["split"] + [valid_column(c) for c in constraints])
    per_split = Counter()
    validity = {c: Counter() for c in constraints}
    for key, n in flags.items():
        per_split[key[0]] += n
        for c, ok in zip(constraints, key[1:]):
            validity[c]["valid" if ok else "invalid"] += n
    pairs = count_by(os.path.join(out, "recipe_pairs"), ["constraint", "split"])
    steps, aligned = {}, {}
    for v in settings.data.variants:
        steps[v] = Counter()
        for split in SPLITS:
            folder = os.path.join(out, "step_pairs", v, split)
            if v in PAIR_VARIANTS:
                by_source = count_by(folder, ["constraint", "pair_source"])
                steps[v].update({(c, split, kind): n for (c, kind), n in by_source.items()})
                if v == "contextual":
                    aligned.update(
                        {(c, split): n for (c, kind), n in by_source.items() if kind == "aligned"}
                    )
            else:
                steps[v][("all", split)] = count_rows(folder)
    contextual = aligned
    table1 = {
        c: {
            "recipe_pairs": {s: pairs.get((c, s), 0) for s in SPLITS},
            "step_pairs_train": contextual.get((c, "train"), 0),
            "recipes_valid": validity[c]["valid"],
            "recipes_invalid": validity[c]["invalid"],
        }
        for c in constraints
    }
    rejects = gather_rejects(out)
    capped, unlike, too_long = (
        sum(
            1
            for r, _, fs in os.walk(os.path.join(out, side))
            for f in fs
            for _ in open(os.path.join(r, f), encoding="utf-8")
        )
        for side in ("_capped", "_unlike", "_long")
    )
    total = sum(per_split.values())
    seconds = timings.get("recipes")
    stats = {
        "recipes": total,
        "recipes_per_split": dict(per_split),
        "table1": table1,
        "step_pairs": {
            v: {" / ".join(map(str, k)): n for k, n in sorted(c.items())} for v, c in steps.items()
        },
        "edit_pairs": count_edit_pairs(out, constraints),
        "held_out": {"recipes": gather_held_out(out), "listed": len(settings.held_out)},
        "non_steps": count_non_steps(recipes),
        "rejects": dict(rejects),
        # A missing or unreadable input is no recipe: rejects.jsonl lists it, the count does not.
        "rejected": sum(n for reason, n in rejects.items() if reason not in INPUT_REASONS),
        "inputs_unread": sum(n for reason, n in rejects.items() if reason in INPUT_REASONS),
        "unpaired_capped_recipes": capped,
        "unpaired_long_recipes": too_long,
        "candidate_pairs_unlike_dishes": unlike,
        "seconds_per_stage": timings,
        "resumed": resumed,
        "recipes_per_second": round(total / seconds, 1) if seconds else None,
    }
    write_json_atomic(os.path.join(out, "stats.json"), stats)
    return stats


def format_table1(stats: dict) -> str:
    """The paper's Table 1 as text: recipe pairs per split and train step pairs."""
    lines = [f"{'constraint':<13} {'train':>7} {'dev':>6} {'test':>6} {'step pairs (train)':>19}"]
    for c, row in stats["table1"].items():
        p = row["recipe_pairs"]
        lines.append(
            f"{c:<13} {p['train']:>7} {p['dev']:>6} {p['test']:>6} {row['step_pairs_train']:>19}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run (or resume) every stage."""
    args = parse_args(argv)
    try:
        settings = settings_from(args)
        key = fingerprint(settings)
        resumed = claim_output(
            settings.output,
            "prepare_data",
            key,
            {**settings.record(), "fingerprint": key},
            args.overwrite,
        )
    except JobError as err:
        print(f"prepare_data: error: {err}", file=sys.stderr)
        return 2
    import ray
    import ray.data

    start_ray(settings.ray, args.verbose)
    configure_data(ray.data, settings.ray)
    log(("resuming " if resumed else "writing ") + settings.output)
    for path in settings.inputs:
        if missing_input(path):  # the others are read; rejects.jsonl counts it as missing_input
            log(f"warning: {missing_input(path)}")
    timings: dict[str, float] = {}
    started = time.perf_counter()
    stage_recipes(ray.data, settings, timings)
    stage_translation_table(ray.data, settings, timings)
    stage_pairs(ray.data, settings, timings)
    stage_edit_pairs(ray.data, settings, timings)
    stage_step_pairs(ray.data, settings, timings)
    timings["total"] = round(time.perf_counter() - started, 2)
    stats = write_stats(settings, timings, resumed)
    duplicates = stats["rejects"].get("duplicate_id", 0)
    if duplicates:
        log(
            f"warning: {duplicates} {'recipes repeat' if duplicates > 1 else 'recipe repeats'} an "
            f"id read before (the first is kept; rejects.jsonl holds each, reason duplicate_id)"
        )
    if stats["unpaired_long_recipes"]:
        log(
            f"warning: {stats['unpaired_long_recipes']} recipes of more than {MAX_ALIGNED_STEPS} "
            "steps were not paired (stats.json unpaired_long_recipes; _long/ names them)"
        )
    print(format_table1(stats))
    unread = (
        f", {stats['inputs_unread']} input{'s' if stats['inputs_unread'] != 1 else ''} unread"
        if stats["inputs_unread"]
        else ""
    )
    print(
        f"{stats['recipes']} recipes, {stats['rejected']} rejected{unread}; outputs in "
        f"{settings.output}"
    )
    print(
        "method lines set aside as not instructions: "
        + ", ".join(f"{n} {kind}" for kind, n in stats["non_steps"].items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

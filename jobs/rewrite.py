"""Rewrite the test or dev recipes with one system, best of N per step, on a Ray Data actor pool.

    python jobs/rewrite.py --data out/demo/prepared --split test --system grounded_rule \\
        --model out/demo/grounded_rule/model --output out/demo/rewrites/grounded_rule
    python jobs/rewrite.py --data out/demo/prepared --system contextual_rule --model out/demo/contextual_rule/model \\
        --output out/demo/rewrites/contextual_rule --constrained
    python jobs/rewrite.py --data out/demo/prepared --system contextual_gpt2 --model out/demo/contextual_rule/model \\
        --ing-model out/demo/ing_predictor/model --output out/demo/rewrites/contextual_gpt2
    python jobs/rewrite.py --data out/demo/prepared --system rule_based --output out/demo/rewrites/rule_based
    python jobs/rewrite.py --data out/demo/prepared --system ctrl --model ctrl --output out/demo/rewrites/ctrl
    python jobs/rewrite.py --data out/demo/prepared --system pplm --model out/demo/no_source/model \\
        --output out/demo/rewrites/pplm
    python jobs/rewrite.py --data out/demo/prepared --system transformer --model out/demo/transformer/model \\
        --output out/demo/rewrites/transformer
    python jobs/rewrite.py --data out/demo/prepared --system seq2seq_copy --model out/demo/seq2seq_copy \\
        --output out/demo/rewrites/seq2seq_copy --constraint vegan
    ray job submit --working-dir . -- python jobs/rewrite.py --profile v100x64 --data … --model … --output …

Reads the split's recipe pairs and takes a fixed seeded sample of --num-recipes (source recipe,
constraint); --constraint rewrites the sampled sources for that constraint set instead
(`vegan,nut-free`). Actors load the model once and rewrite --batch-recipes recipes at a time,
the next joining as one finishes (continuous batching over rewrite.call_batches batches' worth of
recipes per call).
The sentence-level baselines rewrite each step on its own; seq2seq_copy's --model is its training
output, which holds a model per constraint (<constraint>/model), one for each constraint sampled.
Writes into --output: rewrites.jsonl (one line per recipe, in arrival order) and run.json
(settings, counts, tasks dropped for a missing source recipe, timings, and for the step-by-step
systems the engine's rounds, its seconds on prompts, sampling and selection, and its static caches
made, graph captures, caches evicted and batches too big for one). A rerun into the same
folder finishes the missing recipes only.
"""

from __future__ import annotations

# ray is imported where used: --help, and a bad argument, answer without it.
import argparse
import hashlib
import json
import os
import random
import shlex
import sys
import time

import pyarrow.compute as pc
import pyarrow.dataset as pads
from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jobs.rewrite_actor import (
    ACTOR_KEY,
    ControlledBatch,
    RewriteBatch,
    Seq2seqBatch,
    rewrite_baseline,
    task_table,
)
from rrt.baselines.controllable import CONTROLLABLE
from rrt.baselines.seq2seq import COPY, SEQ2SEQ, constraint_models
from rrt.config import ConfigError, RaySettings, RewriteSettings, load_settings
from rrt.corpus.bow import PAPER, load_bag
from rrt.corpus.pairing import valid_column
from rrt.evaluation.baselines import pick_retrieval
from rrt.modelling.editing import DECISIONS
from rrt.modelling.models import META_FILE, read_meta
from rrt.modelling.rewriter import SYSTEMS
from rrt.recipes.lexicon import CONSTRAINTS
from rrt.recipes.tagger import parse_constraints
from runtime.cluster import bundle, ensure_room, start_ray
from runtime.parquet import count_rows, parquet_files
from runtime.runs import JobError, claim_output, read_manifest, write_json_atomic

REWRITES = "rewrites.jsonl"
ALL_SYSTEMS = (*SYSTEMS, *CONTROLLABLE, *SEQ2SEQ)


class RewriteRun(RewriteSettings):
    """One run's checked settings: the `rewrite` block after the profile and flags, with its
    folders made absolute and its models found, and the `ray` block. Frozen and typed, the same
    object reaches the model actors."""

    ray: RaySettings


def build_parser() -> argparse.ArgumentParser:
    """Flags of the rewrite job; each overrides the matching `rewrite` value of ray_config.yaml."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--data", help="prepare_data output folder (default: rewrite.data)")
    parser.add_argument(
        "--split", choices=("test", "dev"), help="which recipes to rewrite (default: test)"
    )
    parser.add_argument("--system", choices=ALL_SYSTEMS, help="the rewriting system")
    parser.add_argument("--output", help="run folder (default: rewrite.output)")
    parser.add_argument(
        "--model",
        help="the system's trained model folder (<train output>/model); ctrl: a "
        "CTRL folder or Hugging Face name (ctrl); seq2seq_copy: the <train output> "
        "holding <constraint>/model",
    )
    parser.add_argument("--ing-model", help="contextual_gpt2: the next-ingredient model folder")
    parser.add_argument(
        "--num-recipes", type=int, help="(recipe, constraint) rewrites to make (default 1000)"
    )
    parser.add_argument(
        "--ids", help="comma list of source recipe ids of the split: sample only their rewrites"
    )
    parser.add_argument("--candidates", type=int, help="samples per step (default 10)")
    parser.add_argument(
        "--constraint", help="rewrite every sampled source for these constraints (vegan,nut-free)"
    )
    parser.add_argument(
        "--constrained",
        action="store_true",
        default=None,
        help="ban violating terms while sampling (adherence by construction)",
    )
    parser.add_argument(
        "--closed-foods",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --constrained, also refuse foods the recipe does not hold "
        "(default: rewrite.closed_foods; --no-closed-foods: the paper)",
    )
    parser.add_argument(
        "--selection",
        choices=("grounded", "paper"),
        help="best-of-N rules: grounded (beyond the paper) or paper (default: rewrite.selection)",
    )
    parser.add_argument(
        "--steps",
        choices=("affected", "every"),
        help="steps the model rewrites: affected (the product: the others are kept, the guide's "
        "version is the floor) or every (the paper) (default: rewrite.steps)",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        help="sampling temperature (default: rewrite.temperature; the paper's: 1.0)",
    )
    parser.add_argument("--seed", type=int, help="sampling and recipe-sample seed")
    parser.add_argument("--actors", type=int, help="rewriter actors (one GPU each with --use-gpu)")
    parser.add_argument("--use-gpu", action="store_true", default=None, help="one GPU per actor")
    parser.add_argument("--batch-recipes", type=int, help="recipes an actor rewrites together")
    parser.add_argument(
        "--call-batches",
        type=int,
        help="batches' worth of recipes an actor takes per call (the next joins as one finishes)",
    )
    parser.add_argument("--config", help="config file (default: ray_config.yaml)")
    parser.add_argument(
        "--profile",
        help="config profile: local, v100x64 (a V100 cluster) or hopper (one H100/H200)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier run of this job in --output (any other folder is refused)",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="Ray's own INFO lines on the console too"
    )
    return parser


def _model_folder(path: str | None, what: str, named: bool = False) -> str:
    """The model folder as an absolute path; with `named`, a Hugging Face name that is no local
    path passes as it is (a cluster can download it)."""
    if not path:
        raise JobError(f"this system needs {what}")
    if named and not os.path.exists(path) and not path.startswith((".", "/")):
        return path
    if not os.path.exists(path):
        raise JobError(f"{path} does not exist; pass <train output>/model")
    if not os.path.exists(os.path.join(path, "config.json")):
        raise JobError(f"{path} holds no exported model (config.json); pass <train output>/model")
    return os.path.abspath(path)


def settings_from(args: argparse.Namespace) -> RewriteRun:
    """Merge config and flags and check every value; problems are JobError lines."""
    flags = {
        key: getattr(args, key, None)
        for key in (
            "data",
            "split",
            "system",
            "output",
            "model",
            "ing_model",
            "num_recipes",
            "ids",
            "candidates",
            "constraint",
            "constrained",
            "closed_foods",
            "selection",
            "steps",
            "temperature",
            "seed",
            "actors",
            "use_gpu",
            "batch_recipes",
            "call_batches",
        )
    }
    try:
        config = load_settings(args.config, args.profile, {"rewrite": flags})
    except ConfigError as err:
        raise JobError(str(err)) from None
    rewrite = config.rewrite
    system, constraint, model, ing_model = (
        rewrite.system,
        rewrite.constraint,
        rewrite.model,
        rewrite.ing_model,
    )
    if system not in ALL_SYSTEMS:
        raise JobError(f"rewrite.system must be one of {', '.join(ALL_SYSTEMS)} (got {system!r})")
    if constraint:
        try:
            constraint = ",".join(parse_constraints(constraint))
        except ValueError as err:
            raise JobError(str(err)) from None
    data = rewrite.data
    for folder in ("recipe_pairs", "recipes"):
        if not data or not os.path.isdir(os.path.join(data, folder)):
            raise JobError(
                f"{data}/{folder} not found: pass a jobs/prepare_data.py output folder as --data"
            )
    if count_rows(os.path.join(data, "recipe_pairs")) == 0:
        raise JobError(f"{data} holds no recipe pairs to rewrite")
    pplm = rewrite.pplm
    if system == "ctrl":
        model = _model_folder(model, "--model (a CTRL folder or name)", named=True)
    elif system == "pplm":
        model = _model_folder(model, "--model (the No-Source LM folder PPLM steers)")
        bow = pplm.bow
        try:
            load_bag(bow, list(CONSTRAINTS))
        except FileNotFoundError as err:
            raise JobError(
                f"rewrite.pplm.bow: {err} (paper, or a folder written by `rrt bow`)"
            ) from None
        pplm = pplm.model_copy(update={"bow": bow if bow == PAPER else os.path.abspath(bow)})
    elif system == COPY:
        model = copy_models(model, constraint)
    elif system in SEQ2SEQ or SYSTEMS[system]:
        model = _model_folder(model, "--model (a trained model folder)")
        meta = os.path.join(model, META_FILE)
        trained = read_meta(model).get("variant") if os.path.exists(meta) else None
        variant = trained if system in SEQ2SEQ else system
        if variant != system:
            raise JobError(f"{model} holds a {variant} model, not a {system} one")
        if system not in SEQ2SEQ and trained and trained != SYSTEMS[system]:
            # Its prompts would be in another format than the model learned (grounded against the paper's).
            raise JobError(
                f"{model} holds a {trained} model; {system} rewrites with a {SYSTEMS[system]} one"
            )
        if system == "contextual_gpt2":
            ing_model = _model_folder(ing_model, "--ing-model (the next-ingredient model)")
    if count_rows(os.path.join(data, "recipes")) == 0:
        raise JobError(
            f"{data}/recipes holds no recipes: rerun jobs/prepare_data.py into that folder"
        )
    if not rewrite.output:
        raise JobError("no output folder given (--output or rewrite.output)")
    checked = rewrite.model_copy(
        update={
            "constraint": constraint,
            "model": model,
            "ing_model": ing_model,
            "pplm": pplm,
            "data": os.path.abspath(data),
            "output": os.path.abspath(rewrite.output),
        }
    )
    return RewriteRun(**dict(checked), ray=config.ray)


def copy_models(path: str | None, constraint: str | None) -> str:
    """Seq2seq Copy's training output as an absolute path, checked to hold a model for each
    constraint asked for (every task's first constraint picks its model)."""
    if not path:
        raise JobError(
            "this system needs --model (the jobs/train.py --variant seq2seq_copy output folder)"
        )
    found = constraint_models(path)
    if not found:
        raise JobError(
            f"{path} holds no seq2seq_copy model (<constraint>/model); pass the jobs/train.py "
            "--variant seq2seq_copy output folder"
        )
    if constraint:
        check_copy_models(path, [constraint], found)
    return os.path.abspath(path)


def check_copy_models(path: str, constraints, found: dict | None = None) -> None:
    """A JobError naming the constraints (comma lists: their first) that have no model under `path`."""
    found = constraint_models(path) if found is None else found
    missing = sorted({c.split(",")[0] for c in constraints} - set(found))
    if missing:
        raise JobError(
            f"{path} has no seq2seq_copy model for {', '.join(missing)} (it holds "
            f"{', '.join(found)}); train them with jobs/train.py --variant seq2seq_copy --constraint "
            f"{','.join(missing)}, or rewrite with --constraint {','.join(found)}"
        )


def fingerprint(settings: RewriteRun) -> str:
    """Hash of what makes two runs the same run; a rerun with another one is refused."""
    keep = {
        k: v
        for k, v in settings.model_dump().items()
        if k
        not in (
            "output",
            "ray",
            "actors",
            "use_gpu",
            "batch_recipes",
            "call_batches",
            "cpus_per_actor",
            "torch_threads",
        )
    }
    stats = os.path.join(settings.data, "stats.json")
    keep["data_id"] = os.path.getmtime(stats) if os.path.exists(stats) else None
    return hashlib.sha1(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _rows(folder: str, columns: list[str], key: str, values: set) -> list:
    """Rows of a Parquet folder whose `key` is in `values`: a filtered read on the driver, which
    skips the row groups the files' statistics rule out (every row ends on the driver anyway)."""
    wanted = pc.field(key).isin(sorted(values))
    return (
        pads.dataset(parquet_files(folder), format="parquet")
        .to_table(columns=columns, filter=wanted)
        .to_pylist()
    )


def rewrite_keys(rows: list[dict], forced: str | None = None) -> list[tuple[str, str]]:
    """(recipe id, constraint) for every recipe that breaks a constraint which another recipe of
    its dish obeys (a version of the dish exists, so Retrieval has one to find). With `forced`
    ("vegan" or "vegan,nut-free"), only that constraint: recipes breaking any part of it."""
    obeyed: dict[str, set[str]] = {}
    for row in rows:
        obeyed.setdefault(row["dish"], set()).update(c for c in CONSTRAINTS if row[valid_column(c)])
    keys = set()
    for row in rows:
        for constraint in [forced] if forced else CONSTRAINTS:
            parts = constraint.split(",")
            if not all(row[valid_column(c)] for c in parts) and set(parts) <= obeyed[row["dish"]]:
                keys.add((row["id"], constraint))
    return sorted(keys)


def build_tasks(
    keys: list[tuple[str, str]], recipes: dict[str, dict]
) -> tuple[list[dict], list[str]]:
    """Tasks for the sampled (id, constraints) keys, and the ids whose source recipe is missing."""
    tasks = [
        {"id": sid, "constraints": con.split(","), "source": recipes[sid], "retrieved": None}
        for sid, con in keys
        if sid in recipes
    ]
    return tasks, [sid for sid, _ in keys if sid not in recipes]


def dropped_warning(missing: list[str], shown: int = 5) -> str | None:
    """The stderr line for tasks dropped because their source recipe is missing; None when none are."""
    if not missing:
        return None
    return (
        f"rewrite: warning: {len(missing)} tasks dropped: source recipe missing "
        f"(first ids: {', '.join(missing[:shown])})"
    )


def plan_tasks(settings: RewriteSettings) -> tuple[list[dict], list[str]]:
    """The seeded sample of (source recipe, constraints) to rewrite, each with its source recipe
    (and, for Retrieval, the recipe it retrieves), and the sampled ids whose source is missing."""
    data, split = settings.data, settings.split
    flags = [valid_column(c) for c in CONSTRAINTS]
    rows = _rows(os.path.join(data, "recipes"), ["id", "dish", "split", *flags], "split", {split})
    keys = rewrite_keys(rows, settings.constraint)
    if not keys:
        raise JobError(
            f"the {split} split of {data} holds no recipe that breaks a constraint another version "
            "of its dish obeys"
        )
    if settings.ids:
        wanted = {i.strip() for i in settings.ids.split(",") if i.strip()}
        unknown = sorted(wanted - {k[0] for k in keys})
        if unknown:
            raise JobError(
                f"rewrite.ids: {len(unknown)} ids are no recipe of the {split} split that breaks a "
                f"constraint another version of its dish obeys (first: {', '.join(unknown[:5])})"
            )
        keys = [k for k in keys if k[0] in wanted]
    keys = sorted(random.Random(settings.seed).sample(keys, min(settings.num_recipes, len(keys))))
    columns = ["id", "title", "ingredients", "steps", "dish"]
    # Folders prepared before method lines were classified have no non_steps column.
    if (
        "non_steps"
        in pads.dataset(parquet_files(os.path.join(data, "recipes")), format="parquet").schema.names
    ):
        columns.append("non_steps")
    recipes = {
        r["id"]: r
        for r in _rows(os.path.join(data, "recipes"), columns, "id", {k[0] for k in keys})
    }
    tasks, missing = build_tasks(keys, recipes)
    if settings.system == "retrieval":
        attach_retrieved(data, tasks, settings.seed)
    return tasks, missing


def attach_retrieved(data: str, tasks: list[dict], seed: int) -> None:
    """Give each task a recipe of its dish that obeys all its constraints (any split)."""
    flags = [valid_column(c) for c in CONSTRAINTS]
    pool = _rows(
        os.path.join(data, "recipes"),
        ["id", "dish", *flags],
        "dish",
        {t["source"]["dish"] for t in tasks},
    )
    by_dish: dict[str, list[dict]] = {}
    for row in pool:
        by_dish.setdefault(row["dish"], []).append(row)
    picks = [
        pick_retrieval(
            task["id"],
            [
                r["id"]
                for r in by_dish.get(task["source"]["dish"], [])
                if all(r[valid_column(c)] for c in task["constraints"])
            ],
            seed,
        )
        for task in tasks
    ]
    found = {
        r["id"]: r
        for r in _rows(
            os.path.join(data, "recipes"),
            ["id", "title", "ingredients", "steps"],
            "id",
            {p for p in picks if p},
        )
    }
    for task, pick in zip(tasks, picks):
        task["retrieved"] = found.get(pick) if pick else None


def done_keys(path: str) -> set[tuple[str, str]]:
    """(id, constraint) of every complete line of an earlier rewrites.jsonl; a line cut by a
    kill is removed so the rerun writes that recipe once. Lines end at a newline only: JSON leaves
    U+2028 and other Unicode line breaks raw inside strings, where str.splitlines would cut."""
    if not os.path.exists(path):
        return set()
    with open(path, "rb") as handle:
        blob = handle.read()
    whole = blob[: blob.rfind(b"\n") + 1]
    if len(whole) != len(blob):
        # Cut in place: rewriting the file would risk the complete lines too.
        os.truncate(path, len(whole))
    keys = set()
    for number, line in enumerate(whole.decode("utf-8", errors="replace").split("\n")[:-1], 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise JobError(
                f"{path} line {number} is not JSON; move the file away to rewrite every recipe "
                "again"
            ) from None
        keys.add((row["id"], row["constraint"]))
    return keys


def record_counts(row: dict) -> dict[str, int]:
    """What one rewrite record holds that the run counts: guide fallbacks, empty steps, guard stops,
    and the chosen steps with a forbidden food inside a non-word (selection's `no_disguised_food`)."""
    notes = [e.get("note", "") for e in row["steps"]]
    # An empty step scores 0 on every rule, so only a written one can hide a food.
    chosen = [
        c.get("scores", {})
        for e in row["steps"]
        if "chosen" in e
        for c in [e["candidates"][e["chosen"]]]
        if c["text"].strip()
    ]
    return {
        "steps_fallback": sum("rule-based rewrite" in n for n in notes),
        "empty_steps": sum(n == "empty source step" for n in notes),
        "guard_stops": sum(
            c.get("ended") == "guard" for e in row["steps"] for c in e["candidates"]
        ),
        "disguised_food_steps": sum(s.get("no_disguised_food") == 0.0 for s in chosen),
        **{f"steps_{d}": sum(e.get("decision") == d for e in row["steps"]) for d in DECISIONS},
    }


def resume_command(argv: list[str] | None = None) -> str:
    """The command line that resumes this run: its flags (argv, or the process's) but --overwrite,
    which would clear what the run wrote."""
    flags = sys.argv[1:] if argv is None else argv
    kept = [f for f in flags if not (len(f) > 3 and "--overwrite".startswith(f))]
    return shlex.join(["python", "jobs/rewrite.py", *kept])


def run(
    settings: RewriteRun, overwrite: bool, verbose: bool = False, command: str | None = None
) -> dict:
    """Claim the run folder, plan the tasks, rewrite the missing ones, record the run (and the
    command that resumes it, when given)."""
    import ray.data

    start_ray(settings.ray, verbose)
    ray.data.DataContext.get_current().enable_progress_bars = False
    started = time.perf_counter()
    tasks, missing = plan_tasks(settings)
    if settings.system == COPY:
        # Before the folder is claimed, so a corrected rerun just works.
        check_copy_models(settings.model, [t["constraints"][0] for t in tasks])
    # The baselines (SYSTEMS None) rewrite in plain tasks; the rest on a pool of model actors.
    baseline = SYSTEMS.get(settings.system, "model") is None
    if not baseline and tasks:
        # The actor pool runs on the actors that fit, so one is enough to start.
        ensure_room(
            "rewriter actor",
            "rewrite.actors, rewrite.cpus_per_actor, rewrite.use_gpu",
            min(settings.actors, len(tasks)),
            bundle(settings.cpus_per_actor, settings.use_gpu),
            needed=1,
        )
    resumed = claim_output(
        settings.output, "rewrite", fingerprint(settings), settings.model_dump(), overwrite
    )
    if command and not resumed:
        # Before any record: a reader of the line a stopped run cut names the command that repairs it.
        manifest = {**read_manifest(settings.output), "command": command}
        write_json_atomic(os.path.join(settings.output, "run.json"), manifest)
    planned = time.perf_counter()
    warning = dropped_warning(missing)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    path = os.path.join(settings.output, REWRITES)
    done = done_keys(path)
    todo = [t for t in tasks if (t["id"], ",".join(t["constraints"])) not in done]
    print(
        f"rewrite: {settings.system}{' (constrained)' if settings.constrained else ''}: "
        f"{len(tasks)} recipes, {len(tasks) - len(todo)} done earlier, {len(todo)} to go",
        flush=True,
    )
    counts = {
        "recipes": len(tasks),
        "done_earlier": len(tasks) - len(todo),
        "written": 0,
        "steps": 0,
        "steps_fallback": 0,
        "empty_steps": 0,
        "recipes_without_steps": 0,
        "guard_stops": 0,
        "disguised_food_steps": 0,
        "retrieval_fallbacks": 0,
        **{f"steps_{d}": 0 for d in DECISIONS},
    }
    engine: dict = {}  # the model actors' rounds, seconds and static-cache counts (ENGINE_COUNTS), summed
    actors: set = set()  # the model actors that rewrote (a run that left one idle wasted its share)
    if todo:
        table = task_table(todo)
        # An actor call takes call_batches batches' worth (it keeps batch_recipes in flight); small
        # runs still give every actor a share; a block per call.
        batch = max(
            1,
            min(
                settings.batch_recipes * settings.call_batches,
                -(-len(todo) // settings.actors),
            ),
        )
        ds = ray.data.from_arrow([table.slice(i, batch) for i in range(0, table.num_rows, batch)])
        if baseline:
            ds = ds.map_batches(
                rewrite_baseline,
                batch_size=batch,
                batch_format="pyarrow",
                fn_kwargs={"system": settings.system},
                udf_modifying_row_count=False,
            )
        else:
            actor = (
                ControlledBatch
                if settings.system in CONTROLLABLE
                else Seq2seqBatch
                if settings.system in SEQ2SEQ
                else RewriteBatch
            )
            ds = ds.map_batches(
                actor,
                fn_constructor_kwargs={"settings": settings},
                batch_size=batch,
                batch_format="pyarrow",
                udf_modifying_row_count=False,
                # One call at a time per actor: with more in flight, the first actor
                # ready took every block of a small run while the others idled.
                compute=ray.data.ActorPoolStrategy(
                    size=min(settings.actors, len(todo)), max_tasks_in_flight_per_actor=1
                ),
                num_gpus=1 if settings.use_gpu else 0,
                num_cpus=settings.cpus_per_actor,
            )
        with (
            open(path, "a", encoding="utf-8") as out,
            tqdm(total=len(todo), desc="recipes", unit="recipe") as bar,
        ):
            for batch in ds.iter_batches(batch_format="pyarrow", batch_size=None):
                for counted in filter(None, batch.column("engine").to_pylist()):
                    call = json.loads(counted)
                    actors.add(call.pop(ACTOR_KEY, None))
                    for key, value in call.items():
                        engine[key] = engine.get(key, 0) + value
                for line in batch.column("record").to_pylist():
                    out.write(line + "\n")
                    row = json.loads(line)
                    counts["written"] += 1
                    counts["steps"] += len(row["rewrite"]["steps"])
                    for key, value in record_counts(row).items():
                        counts[key] += value
                    counts["recipes_without_steps"] += (
                        "the source recipe has no steps" in row["notes"]
                    )
                    counts["retrieval_fallbacks"] += any(
                        "no recipe of this dish" in n for n in row["notes"]
                    )
                out.flush()
                bar.update(batch.num_rows)
    seconds = time.perf_counter() - started
    manifest = read_manifest(settings.output)
    rewriting = time.perf_counter() - planned
    manifest.update(
        {
            "resumed": resumed,
            "counts": counts,
            "dropped": {"source_recipe_missing": len(missing)},
            "engine": {k: round(v, 2) if isinstance(v, float) else v for k, v in engine.items()},
            "actors_used": len(actors - {None}),
            "seconds": round(seconds, 1),
            "seconds_per_stage": {
                "plan": round(planned - started, 1),
                "rewrite": round(rewriting, 1),
            },
            "steps_per_s": round(counts["steps"] / rewriting, 3) if counts["steps"] else None,
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
    )
    write_json_atomic(os.path.join(settings.output, "run.json"), manifest)
    return manifest


def summary(manifest: dict, constrained: bool, output: str) -> str:
    """The run's one-line summary; a run with nothing left to rewrite gives no rate."""
    counts = manifest["counts"]
    rate = f", {manifest['steps_per_s']} steps/s" if manifest["steps_per_s"] is not None else ""
    actors = f" on {manifest['actors_used']} actors" if manifest["actors_used"] and rate else ""
    taken_back = (
        f", {manifest['engine'].get('words_taken_back', 0)} forbidden words taken back while sampling"
        if constrained
        else ""
    )
    # A run.json written before decisions were counted has none.
    decisions = {d: counts.get(f"steps_{d}", 0) for d in DECISIONS}
    decided = (
        f"; steps kept {decisions['kept']}, the guide's {decisions['guide']}, "
        f"the model's {decisions['model']}"
        if any(decisions.values())
        else ""
    )
    return (
        f"rewrite: {counts['written']} recipes written ({counts['done_earlier']} done earlier), "
        f"{counts['steps']} steps{rate}{actors}; {counts['steps_fallback']} steps by the guide (too long), "
        f"{counts['empty_steps']} empty steps, {counts['disguised_food_steps']} with a forbidden food inside a "
        f"non-word{taken_back}{decided}; {output}/{REWRITES}"
    )


def main(argv: list[str] | None = None) -> int:
    """Parse flags, check settings before any actor starts, rewrite, print a summary."""
    args = build_parser().parse_args(argv)
    try:
        settings = settings_from(args)
        manifest = run(settings, args.overwrite, args.verbose, resume_command(argv))
    except JobError as err:
        print(f"rewrite: error: {err}", file=sys.stderr)
        return 2
    print(summary(manifest, settings.constrained, settings.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())

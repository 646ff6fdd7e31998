"""Measure rewrites the way the paper did, every system side by side (Hegel et al. 2020, Table 2).

    python jobs/evaluate.py --rewrites out/demo/rewrites/rule_based,out/demo/rewrites/grounded_rule \\
        --lm out/demo/no_source/model --output out/demo/evaluation
    python jobs/evaluate.py --rewrites out/demo/rewrites/grounded_rule --lm out/demo/no_source/model \\
        --output out/demo/evaluation-foodb \\
        --foods foodb/food.csv --scorers 4 --use-gpu
    ray job submit --working-dir . -- python jobs/evaluate.py --rewrites … --lm … --output …

Each --rewrites folder comes from jobs/rewrite.py (rewrites.jsonl and run.json); its label is
the run's system, with "+constrained" for constrained decoding. --lm is a No-Source language
model exported by jobs/train.py (--variant no_source). Metrics:
  perplexity          of the rewritten steps under that LM (lower is better)
  adherence           percent of food mentions in the rewritten ingredients and steps that obey
                      the constraint; foods are the corpus's ingredient names (the recipes/ of
                      --data or of the run's settings.data, else the source recipes' lines), or
                      FooDB's food.csv names with --foods
  rouge_l_recall      ROUGE-L recall x100 of the rewritten steps against the source steps
  trigram_diversity   unique word trigrams over all word trigrams of a system's steps
and, apart from the paper's measures, each system's rewritten steps that hide a forbidden food
inside a non-word ("chickenocks", which adherence's whole-word mentions do not see; needs the
en_US dictionary, else not counted). The LM scores recipes in a pool of Ray Data actors that
load it once. --study DIR (a study folder after `rrt judge report`) adds the readers' marks beside
the automatic measures. Writes into --output:
metrics.json, eval_stats.json, table.md, per_constraint.md, metrics.png and report.html.
"""

from __future__ import annotations

# transformers, torch, ray and rrt.modelling.loading (the rewriter, a tenth of --help's time) are
# imported where used: --help, and a bad argument, answer without them.
import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa

from rrt.config import ConfigError, EvaluateSettings, RaySettings, load_settings
from rrt.evaluation.metrics import (
    GROUNDING_KEYS,
    decision_counts,
    names_from_lines,
    read_foods,
    recipe_measures,
    step_nll,
    summarise,
)
from rrt.evaluation.report import (
    metrics_markdown,
    per_constraint_markdown,
    plot_metrics,
    reader_measures,
    render_report,
    tables_markdown,
)
from rrt.evaluation.rewrite_records import read_records, system_label
from rrt.modelling.models import META_FILE, lm_block_size, read_meta
from rrt.modelling.selection import dictionary_missing
from rrt.recipes.foods import food_vocabulary
from rrt.recipes.paper_format import END_INGS
from runtime.cluster import bundle, ensure_room, start_ray
from runtime.parquet import parquet_files
from runtime.runs import JobError, write_json_atomic

MEASURE_KEYS = (
    "obeying",
    "mentions",
    "empty",
    "rouge_l_recall",
    "hidden_food_steps",
    *GROUNDING_KEYS,
)
SOURCE_KEYS = (
    "source_title",
    "source_ingredients",
    "source_steps",
    "step_sources",
)  # what measure_batch reads and drops


@dataclass(frozen=True)
class EvaluateRun:
    """One evaluation's checked settings and inputs: the `evaluate` and `ray` blocks after the
    profile and flags, the rewrite runs read, the scoring LM and where the outputs go."""

    evaluate: EvaluateSettings
    ray: RaySettings
    systems: dict[str, dict]  # system label: its folder, run.json and records
    lm: str  # the scoring LM's folder (absolute)
    block: int  # the scoring LM's context in tokens
    output: str
    foods: list[str] | None = None  # FooDB's names, when --foods is given
    foods_file: str | None = None
    data: str | None = None  # the prepared folder whose recipes give the food vocabulary
    study: dict | None = None  # the study's report.json, when evaluate.study is set


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line flags; each overrides the matching `evaluate` value of ray_config.yaml."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--rewrites", required=True, help="comma list of jobs/rewrite.py output folders"
    )
    parser.add_argument(
        "--lm", required=True, help="exported No-Source LM folder (the perplexity reference)"
    )
    parser.add_argument(
        "--output", required=True, help="folder for metrics, tables, plot and report"
    )
    parser.add_argument("--foods", help="FooDB food.csv: its `name` column is the food vocabulary")
    parser.add_argument(
        "--data",
        help="prepared data folder whose recipes/ give the food vocabulary "
        "(default: the runs' settings.data)",
    )
    parser.add_argument("--config", help="config file (default: ray_config.yaml)")
    parser.add_argument(
        "--profile",
        help="config profile: local, v100x64 (a V100 cluster) or hopper (one H100/H200)",
    )
    parser.add_argument(
        "--batch-size", type=int, help="recipes per LM forward pass (default: evaluate.batch_size)"
    )
    parser.add_argument("--scorers", type=int, help="LM actors (default: evaluate.scorers)")
    parser.add_argument("--use-gpu", action="store_true", default=None, help="one GPU per LM actor")
    parser.add_argument(
        "--report-recipes",
        type=int,
        help="rewrites per system shown in report.html (default: evaluate.report_recipes)",
    )
    parser.add_argument(
        "--study",
        help="a study folder with report/report.json (rrt judge report): readers' columns in the "
        "tables (default: evaluate.study)",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="Ray's own INFO lines on the console too"
    )
    return parser.parse_args(argv)


def log(message: str) -> None:
    """One progress line on stderr."""
    print(f"[evaluate] {message}", file=sys.stderr, flush=True)


def read_run(folder: str) -> tuple[dict, list[dict]]:
    """A rewrite folder's run.json (empty when absent) and its records; bad input is a JobError."""
    if not os.path.isdir(folder):
        raise JobError(f"rewrites folder not found: {folder}")
    path = os.path.join(folder, "rewrites.jsonl")
    if not os.path.isfile(path):
        raise JobError(f"{folder} holds no rewrites.jsonl (run jobs/rewrite.py first)")
    run: dict = {}
    if os.path.isfile(os.path.join(folder, "run.json")):
        try:
            with open(os.path.join(folder, "run.json"), encoding="utf-8") as handle:
                run = json.load(handle)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise JobError(f"{folder}/run.json is not valid JSON: {err}") from None
    try:
        records = read_records(path)
    except ValueError as err:
        raise JobError(str(err)) from None
    return run, records


def check_lm(folder: str) -> int:
    """The LM's block size; a folder that is not an exported causal LM is a JobError."""
    from transformers import AutoConfig, AutoTokenizer

    if not os.path.isdir(folder) or not os.path.isfile(os.path.join(folder, "config.json")):
        raise JobError(f"LM folder not found or not a model export (no config.json): {folder}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        config = AutoConfig.from_pretrained(folder)
    except (OSError, ValueError) as err:
        raise JobError(f"cannot load the LM in {folder}: {str(err).splitlines()[0]}") from None
    if END_INGS not in tokenizer.get_vocab():
        raise JobError(f"the LM in {folder} has no {END_INGS} token: not a No-Source recipe LM")
    meta = read_meta(folder) if os.path.isfile(os.path.join(folder, META_FILE)) else {}
    if meta.get("variant") not in (None, "no_source"):
        log(
            f"warning: {folder} is a {meta['variant']} model; the paper's reference is a no_source LM"
        )
    try:
        return lm_block_size(config, meta)
    except ValueError as err:
        raise JobError(str(err)) from None


def settings_from(args: argparse.Namespace) -> EvaluateRun:
    """Merge config and flags, read every rewrite folder and check the LM and foods file."""
    flags = {
        flag: getattr(args, flag)
        for flag in ("batch_size", "scorers", "use_gpu", "report_recipes", "study")
    }
    try:
        config = load_settings(args.config, args.profile, {"evaluate": flags})
    except ConfigError as err:
        raise JobError(str(err)) from None
    systems: dict[str, dict] = {}
    for folder in [f.strip() for f in args.rewrites.split(",") if f.strip()]:
        run, records = read_run(folder)
        label = system_label(records, run)
        if label in systems:
            raise JobError(
                f"{folder} and {systems[label]['folder']} are both {label}; evaluate one run per system"
            )
        systems[label] = {"folder": os.path.abspath(folder), "run": run, "records": records}
    if not systems:
        raise JobError("no rewrites folder given")
    block = check_lm(args.lm)
    foods = None
    if args.foods:
        try:
            foods = read_foods(args.foods)
        except FileNotFoundError:
            raise JobError(f"foods file not found: {args.foods}") from None
        except (ValueError, UnicodeDecodeError, OSError) as err:
            raise JobError(f"bad foods file {args.foods}: {err}") from None
    if args.data and not os.path.isdir(os.path.join(args.data, "recipes")):
        raise JobError(f"{args.data} holds no recipes/ folder (a jobs/prepare_data.py output)")
    data = args.data or next(
        (
            s["run"].get("settings", {}).get("data")
            for s in systems.values()
            if os.path.isdir(os.path.join(str(s["run"].get("settings", {}).get("data")), "recipes"))
        ),
        None,
    )
    study = read_study(config.evaluate.study) if config.evaluate.study else None
    return EvaluateRun(
        config.evaluate,
        config.ray,
        systems,
        os.path.abspath(args.lm),
        block,
        os.path.abspath(args.output),
        foods,
        args.foods,
        data,
        study,
    )


def read_study(folder: str) -> dict:
    """A study's report.json (in <folder>/report/, or the folder or file itself); a missing or
    unreadable one is a JobError, a key it lacks only a blank cell later."""
    candidates = [
        os.path.join(folder, "report", "report.json"),
        os.path.join(folder, "report.json"),
    ]
    path = (
        folder
        if os.path.isfile(folder)
        else next((p for p in candidates if os.path.isfile(p)), None)
    )
    if path is None:
        raise JobError(
            f"no report/report.json in study folder {folder} (run rrt judge report first)"
        )
    try:
        with open(path, encoding="utf-8") as handle:
            report = json.load(handle)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise JobError(f"cannot read the study report {path}: {str(err).splitlines()[0]}") from None
    if not isinstance(report, dict):
        raise JobError(f"{path} is not a study report (rrt judge report writes one object)")
    return {"path": os.path.abspath(path), "report": report}


def corpus_names(batch: pa.Table) -> pa.Table:
    """Ray Data task: the distinct ingredient names of a batch of recipes' ingredient lines."""
    lines = [line for items in batch.column("ingredients").to_pylist() for line in items or []]
    return pa.table({"name": sorted(names_from_lines(lines))})


def build_vocabulary(ray_data, settings: EvaluateRun):
    """(food vocabulary, where it came from): FooDB names, the corpus's names, or the sources'."""
    if settings.foods:
        return food_vocabulary(settings.foods), f"FooDB {settings.foods_file}"
    if settings.data:
        recipes = os.path.join(settings.data, "recipes")
        names = (
            ray_data.read_parquet(parquet_files(recipes))
            .select_columns(["ingredients"])
            .map_batches(corpus_names, batch_format="pyarrow", batch_size=2000)
            .take_all()
        )
        return food_vocabulary({row["name"] for row in names}), f"corpus {recipes}"
    lines = [
        line
        for s in settings.systems.values()
        for r in s["records"]
        for line in r["source"].get("ingredients") or []
    ]
    return food_vocabulary(names_from_lines(lines)), "the source recipes' ingredient lines"


def rewrite_items(systems: dict) -> list[dict]:
    """One row per rewrite of every system (its position in the system's records), as
    measure_batch and the scorers read them."""
    return [
        {
            "system": label,
            "position": i,
            "constraint": r.get("constraint") or "",
            "title": str(r["rewrite"].get("title") or ""),
            "ingredients": list(r["rewrite"].get("ingredients") or []),
            "steps": list(r["rewrite"].get("steps") or []),
            "source_title": str(r["source"].get("title") or ""),
            "source_ingredients": list(r["source"].get("ingredients") or []),
            "source_steps": list(r["source"].get("steps") or []),
            "step_sources": [
                e.get("source_step") if isinstance(e.get("source_step"), int) else -1
                for e in r.get("steps") or []
                if isinstance(e, dict)
            ],
        }
        for label, s in systems.items()
        for i, r in enumerate(s["records"])
    ]


def measure_batch(batch: pa.Table, vocabulary, count_hidden: bool) -> pa.Table:
    """Ray Data task: adherence counts, ROUGE-L recall and (with `count_hidden`) the steps hiding a
    forbidden food of each rewrite in a batch."""
    rows = batch.to_pylist()
    measures = [
        recipe_measures(
            {
                "constraint": r["constraint"],
                "source": {
                    "title": r["source_title"],
                    "ingredients": r["source_ingredients"],
                    "steps": r["source_steps"],
                },
                "rewrite": {
                    "title": r["title"],
                    "ingredients": r["ingredients"],
                    "steps": r["steps"],
                },
                "steps": [{"source_step": None if n < 0 else n} for n in r["step_sources"]],
            },
            vocabulary,
            count_hidden,
        )
        for r in rows
    ]
    # A measure not taken travels as NaN (a list of floats holds no None).
    return batch.drop_columns(list(SOURCE_KEYS)).append_column(
        "measures",
        pa.array(
            [
                [float("nan") if m[k] is None else float(m[k]) for k in MEASURE_KEYS]
                for m in measures
            ],
            pa.list_(pa.float64()),
        ),
    )


def row_measures(row: dict) -> dict:
    """A scored row's measures as `summarise` takes them."""
    measures = dict(zip(MEASURE_KEYS, row["measures"]))
    hidden = measures["hidden_food_steps"]
    measures.update({key: int(measures[key]) for key in GROUNDING_KEYS})
    measures.update(
        obeying=int(measures["obeying"]),
        mentions=int(measures["mentions"]),
        empty=bool(measures["empty"]),
        hidden_food_steps=None if math.isnan(hidden) else int(hidden),
        nll=row["nll"],
        tokens=row["tokens"],
        dropped_tokens=row["dropped_tokens"],
    )
    return measures


class StepScorer:
    """Ray Data actor: loads the LM once, then sums each recipe's step-token NLL."""

    def __init__(self, lm_dir: str, block: int, batch_size: int, use_gpu: bool, threads: int):
        import torch

        from rrt.modelling.loading import load_model

        torch.set_num_threads(max(1, threads))
        self.device = "cuda" if use_gpu and torch.cuda.is_available() else "cpu"
        loaded = load_model(lm_dir, self.device, half_on_gpu=False)  # perplexity in fp32
        self.tokenizer, self.lm = loaded.tokenizer, loaded.lm
        self.block, self.batch_size = block, batch_size

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows = batch.to_pylist()
        scores = step_nll(self.lm, self.tokenizer, rows, self.block, self.batch_size, self.device)
        return pa.table(
            {
                "system": batch.column("system"),
                "position": batch.column("position"),
                "measures": batch.column("measures"),
                "nll": pa.array([s["nll"] for s in scores], pa.float64()),
                "tokens": pa.array([s["tokens"] for s in scores], pa.int64()),
                "dropped_tokens": pa.array([s["dropped_tokens"] for s in scores], pa.int64()),
            }
        )


def score_rewrites(
    ray_data, settings: EvaluateRun, vocabulary, count_hidden: bool
) -> dict[str, list[dict]]:
    """Per-recipe measures and step NLL of every rewrite, computed on Ray Data; per system, in order."""
    cpus = settings.evaluate.cpus_per_scorer
    rows = (
        ray_data.from_items(rewrite_items(settings.systems))
        .map_batches(
            measure_batch,
            batch_format="pyarrow",
            batch_size=64,
            fn_kwargs={"vocabulary": vocabulary, "count_hidden": count_hidden},
        )
        .map_batches(
            StepScorer,
            batch_format="pyarrow",
            batch_size=max(16, settings.evaluate.batch_size * 4),
            compute=ray_data.ActorPoolStrategy(size=settings.evaluate.scorers),
            num_cpus=cpus,
            num_gpus=1 if settings.evaluate.use_gpu else 0,
            fn_constructor_kwargs={
                "lm_dir": settings.lm,
                "block": settings.block,
                "batch_size": settings.evaluate.batch_size,
                "use_gpu": settings.evaluate.use_gpu,
                "threads": int(max(1, cpus)),
            },
        )
        .take_all()
    )
    out: dict[str, list[dict]] = {
        label: [None] * len(s["records"]) for label, s in settings.systems.items()
    }
    for row in rows:
        out[row["system"]][row["position"]] = row_measures(row)
    return out


def write_outputs(settings: EvaluateRun, measures: dict[str, list[dict]], stats: dict) -> dict:
    """metrics.json, table.md, per_constraint.md, metrics.png and report.html; adds counts to stats."""
    metrics: dict = {
        "systems": {},
        "per_constraint": {},
        "grounding_per_constraint": {},
        "decisions": {},
    }
    stats["systems"] = {}
    for label, system in settings.systems.items():
        summary, per_constraint, grounding, counts = summarise(system["records"], measures[label])
        metrics["systems"][label] = summary
        metrics["per_constraint"][label] = per_constraint
        metrics["grounding_per_constraint"][label] = grounding
        metrics["decisions"][label] = decision_counts(system["records"])
        stats["systems"][label] = {"folder": system["folder"], **counts}
    if settings.study is not None:
        readers = reader_measures(settings.study["report"])
        metrics["study"] = settings.study["path"]
        metrics["readers"] = {label: readers.get(label, {}) for label in settings.systems}
    out = settings.output
    os.makedirs(out, exist_ok=True)
    write_json_atomic(os.path.join(out, "metrics.json"), metrics)
    with open(os.path.join(out, "table.md"), "w", encoding="utf-8") as handle:
        handle.write(metrics_markdown(metrics))
    with open(os.path.join(out, "per_constraint.md"), "w", encoding="utf-8") as handle:
        handle.write(per_constraint_markdown(metrics))
    plot_metrics(metrics, os.path.join(out, "metrics.png"))
    page = render_report(
        {label: s["records"] for label, s in settings.systems.items()},
        metrics,
        settings.evaluate.report_recipes,
    )
    with open(os.path.join(out, "report.html"), "w", encoding="utf-8") as handle:
        handle.write(page)
    return metrics


def main(argv: list[str] | None = None) -> int:
    """Check inputs before Ray starts, score on Ray Data, then write tables, plot and report."""
    args = parse_args(argv)
    try:
        settings = settings_from(args)
    except JobError as err:
        print(f"evaluate: error: {err}", file=sys.stderr)
        return 2
    import ray.data

    started = time.perf_counter()
    count = sum(len(s["records"]) for s in settings.systems.values())
    log(f"{len(settings.systems)} system(s), {count} rewrites: {', '.join(settings.systems)}")
    try:
        start_ray(settings.ray, args.verbose)
    except Exception as err:  # noqa: BLE001 - Ray's own start-up failures (e.g. timeouts) as one line
        print(
            f"evaluate: error: could not start or join Ray: {str(err).splitlines()[0]}",
            file=sys.stderr,
        )
        return 1
    try:
        # The scoring pool runs on the actors that fit, so one is enough to start.
        ensure_room(
            "scoring actor",
            "evaluate.scorers, evaluate.cpus_per_scorer, evaluate.use_gpu",
            settings.evaluate.scorers,
            bundle(settings.evaluate.cpus_per_scorer, settings.evaluate.use_gpu),
            needed=1,
        )
    except JobError as err:
        print(f"evaluate: error: {err}", file=sys.stderr)
        return 2
    ray_s = time.perf_counter() - started
    vocabulary, origin = build_vocabulary(ray.data, settings)
    vocab_s = time.perf_counter() - started - ray_s
    log(f"food vocabulary: {len(vocabulary)} names from {origin}")
    log(
        f"scoring with {settings.evaluate.scorers} LM actor(s), block {settings.block}, batch {settings.evaluate.batch_size}"
    )
    missing = dictionary_missing()
    if missing:
        log(f"steps hiding a forbidden food in a non-word: not counted ({missing})")
    try:
        measures = score_rewrites(ray.data, settings, vocabulary, count_hidden=not missing)
    except Exception as err:
        if type(err).__module__.startswith("ray"):
            print(f"evaluate: error: scoring failed: {str(err).splitlines()[0]}", file=sys.stderr)
            return 1
        raise
    score_s = time.perf_counter() - started - ray_s - vocab_s
    stats = {
        "lm": settings.lm,
        "block_size": settings.block,
        "vocabulary": origin,
        "vocabulary_names": len(vocabulary),
        "rewrites": count,
        "ray_start_s": round(ray_s, 2),
        "vocabulary_s": round(vocab_s, 2),
        "score_s": round(score_s, 2),
        "rewrites_per_s": round(count / score_s, 2) if score_s else None,
    }
    metrics = write_outputs(settings, measures, stats)
    stats["total_s"] = round(time.perf_counter() - started, 2)
    write_json_atomic(os.path.join(settings.output, "eval_stats.json"), stats)
    print(tables_markdown(metrics).rstrip())
    print()
    print(per_constraint_markdown(metrics).rstrip())
    if not missing:
        print(
            "\nsteps hiding a forbidden food inside a non-word (adherence does not see them): "
            + ", ".join(
                f"{label} {s['hidden_food_steps']} of {s['rewritten_steps']}"
                for label, s in stats["systems"].items()
            )
        )
    report = os.path.join(settings.output, "report.html")
    print(f"\nevaluate: {count} rewrites in {stats['total_s']}s; report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

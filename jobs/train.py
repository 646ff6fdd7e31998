"""Fine-tune a rewriter variant on Ray Train + DeepSpeed from prepared step pairs.

    python jobs/train.py --variant no_source --data out/demo/prepared --output out/demo/no_source
    python jobs/train.py --variant no_context --data out/demo/prepared --output out/demo/no_context --max-steps 200
    python jobs/train.py --variant end_to_end --data /mnt/cluster_storage/prepared \\
        --output /mnt/cluster_storage/runs/e2e --profile v100x64
    python jobs/train.py --variant transformer --data out/demo/prepared --output out/demo/transformer
    python jobs/train.py --variant seq2seq_copy --data out/demo/prepared --output out/demo/seq2seq_copy \\
        --constraint vegan,nut-free
    ray job submit --working-dir . -- python jobs/train.py --variant contextual --data … --output …

Reads --data/step_pairs/<variant>/{train,dev}/ (from jobs/prepare_data.py), tokenizes in Ray
Data tasks while training runs, and writes into --output: model/ (Hugging Face export with
rrt_meta.json), tokenizer/, metrics.jsonl, loss.png, train_stats.json and ray/ (checkpoints).
A stopped run continues with --resume; a worker that fails restarts from the last checkpoint.
On a cluster, --data and --output must be on storage every node sees.

The sentence-level baselines train a BART encoder-decoder from scratch (shape: train.seq2seq)
with its own byte-pair tokenizer on step_pairs/no_context/: `transformer` one model for every
constraint (the target tag starts the decoder), `seq2seq_copy` with a copy head and one model per
constraint, as in the paper: each a run folder of its own, <output>/<constraint>/, holding the
outputs above (--constraint picks them; default: every constraint with training pairs), and
<output>/train_stats.json sums them up.
"""

from __future__ import annotations

# transformers, matplotlib, ray and the training worker (torch) are imported where used: --help, and
# a bad argument, answer without them.
import argparse
import dataclasses
import hashlib
import json
import os
import random
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from jobs.train_plan import BatchPlan, TrainRun, WorkerPlan
from rrt.baselines.seq2seq import COPY, PAIRS, SEQ2SEQ
from rrt.config import ConfigError, load_settings
from rrt.corpus.formats import VARIANTS
from rrt.modelling.batching import tokenize_table
from rrt.modelling.models import TINY, load_tokenizer, train_tiny_tokenizer
from rrt.modelling.pretrained import PresetError
from rrt.recipes.lexicon import CONSTRAINTS
from rrt.recipes.paper_format import constraint_tag
from rrt.recipes.tagger import parse_constraints
from rrt.training import finetune
from rrt.training.speed import estimate_mfu, gpu_peak_flops, measure_cpu_peak_flops
from runtime.checkpoints import check_resumable, remove_unregistered
from runtime.cluster import allocator_env, bundle, ensure_room, start_ray
from runtime.parquet import count_rows, parquet_files
from runtime.runs import JobError, check_claim, claim_output, read_jsonl, write_json_atomic

TOKENIZER_TEXTS = 50_000  # training texts the tiny tokenizer learns from
TOKENIZE_BATCH = 512  # texts per tokenizer call in the Ray Data tasks


def build_parser(description: str = __doc__) -> argparse.ArgumentParser:
    """Flags of the training job; each overrides the matching `train` value of ray_config.yaml."""
    parser = argparse.ArgumentParser(
        description=description.split("\n\n")[0],
        epilog=description.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--variant", choices=(*VARIANTS, *SEQ2SEQ), help="model variant (default: train.variant)"
    )
    parser.add_argument("--data", help="prepare_data output folder (default: train.data)")
    parser.add_argument("--output", help="run folder (default: train.output)")
    parser.add_argument("--config", help="config file (default: ray_config.yaml)")
    parser.add_argument(
        "--profile",
        help="config profile: local, v100x64 (a V100 cluster) or hopper (one H100/H200)",
    )
    parser.add_argument(
        "--model",
        help="smollm2-135m (pretrained, offline), tiny (from scratch, tests), "
        "a Hugging Face name (gpt2-medium) or a local path",
    )
    parser.add_argument(
        "--num-workers", type=int, help="Ray Train workers (one per GPU on a cluster)"
    )
    parser.add_argument("--use-gpu", action="store_true", default=None, help="one GPU per worker")
    parser.add_argument("--epochs", type=int, help="passes over the training split")
    parser.add_argument("--max-steps", type=int, help="optimizer steps to run (overrides --epochs)")
    parser.add_argument(
        "--finetune",
        choices=finetune.METHODS,
        help="which weights train: all, the top --trainable-layers blocks, or LoRA adapters",
    )
    parser.add_argument(
        "--trainable-layers", type=int, help="freeze: transformer blocks trained, from the top"
    )
    parser.add_argument("--micro-batch", type=int, help="examples per worker per forward pass")
    parser.add_argument("--lr", type=float, help="peak learning rate")
    parser.add_argument("--eval-examples", type=int, help="dev examples per evaluation")
    parser.add_argument(
        "--loss-on",
        choices=("step", "target", "all"),
        help="loss on the learned step only, the whole target, or every token (default: train.loss_on)",
    )
    parser.add_argument(
        "--constraint",
        help="seq2seq_copy: the constraints to train a model for (vegan,nut-free; "
        "default: every constraint with training pairs)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --output from its last checkpoint",
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


def _split_dir(data: str, variant: str, split: str) -> str:
    return os.path.join(data, "step_pairs", variant, split)


def train_texts(run: TrainRun, split: str = "train") -> pads.Dataset:
    """A split's Parquet files (the training split's unless told) as one pyarrow dataset, in file
    order (one constraint's pairs when the run has one)."""
    dataset = pads.dataset(parquet_files(_split_dir(run.data, run.pairs, split)), format="parquet")
    return dataset.filter(constraint_filter(run.constraint)) if run.constraint else dataset


def constraint_filter(constraint: str):
    """A pyarrow expression keeping the step pairs whose target obeys `constraint` (its tag)."""
    return pc.match_substring(pc.field("text"), constraint_tag("tgt", constraint, True))


def split_rows(run: TrainRun, split: str) -> int:
    """Rows of a split the run trains on (one constraint's when it has one)."""
    folder = _split_dir(run.data, run.pairs, split)
    if not run.constraint:
        return count_rows(folder)
    files = parquet_files(folder)
    return (
        pads.dataset(files, format="parquet").count_rows(filter=constraint_filter(run.constraint))
        if files
        else 0
    )


def trained_constraints(data: str, pairs: str) -> list[str]:
    """The constraints whose target tag the training pairs hold, in the lexicon's order."""
    dataset = pads.dataset(parquet_files(_split_dir(data, pairs, "train")), format="parquet")
    return [c for c in CONSTRAINTS if dataset.count_rows(filter=constraint_filter(c))]


def settings_from(args: argparse.Namespace) -> TrainRun:
    """Merge config and flags and check every value; problems are JobError lines."""
    flags = {
        key: getattr(args, key, None)
        for key in (
            "variant",
            "data",
            "output",
            "model",
            "num_workers",
            "use_gpu",
            "epochs",
            "max_steps",
            "loss_on",
            "eval_examples",
            "finetune",
            "trainable_layers",
            "constraint",
        )
    }
    try:
        config = load_settings(
            args.config,
            args.profile,
            {"train": {**flags, "deepspeed": {"micro_batch": args.micro_batch, "lr": args.lr}}},
        )
    except ConfigError as err:
        raise JobError(str(err)) from None
    train = config.train
    variant = train.variant
    changes: dict[str, Any] = {}
    if variant in SEQ2SEQ:
        if args.model:
            raise JobError(
                f"--model does not apply to {variant}: it trains from scratch (shape: train.seq2seq)"
            )
        # Always from scratch, with a tokenizer of its own: no preset applies.
        changes["model"] = f"{variant} (BART from scratch)"
    if train.model == TINY or variant in SEQ2SEQ:
        # A model trained from scratch trains every weight, at its own rate.
        changes["finetune"] = "full"
        if args.lr is None:
            lr = train.seq2seq.lr if variant in SEQ2SEQ else train.tiny.lr
            changes["deepspeed"] = train.deepspeed.model_copy(update={"lr": lr})
    pairs = PAIRS if variant in SEQ2SEQ else variant
    block = train.block_size[pairs]
    if train.pack_width and train.pack_width < block:
        raise JobError(
            f"train.pack_width {train.pack_width} is narrower than the block ({block}): a packed row "
            "must hold the longest example (0: the block)"
        )
    if train.attention == "varlen" and (variant in SEQ2SEQ or train.batching != "packed"):
        raise JobError(
            "train.attention varlen is for packed rows of a causal LM: set train.batching: packed "
            "(the seq2seq baselines keep sdpa)"
        )
    constraints = None
    if variant == COPY and train.constraint:
        try:
            constraints = parse_constraints(train.constraint)
        except ValueError as err:
            raise JobError(f"train.constraint: {err}") from None
    elif train.constraint:
        raise JobError(
            "train.constraint (--constraint) is for seq2seq_copy, which trains one model per constraint"
        )
    data, output = train.data, train.output
    if not data or not os.path.isdir(data):
        raise JobError(f"data folder not found: {data} (run jobs/prepare_data.py first)")
    if not output:
        raise JobError("no output folder given (--output or train.output)")
    for split in ("train", "dev"):
        folder = _split_dir(data, pairs, split)
        if not os.path.isdir(folder):
            raise JobError(f"{folder} not found: {data} holds no {pairs} step pairs")
        if count_rows(folder) == 0:
            raise JobError(f"the {split} split of {pairs} in {data} is empty")
    # The run's constraint is TrainRun.constraint (one per Seq2seq Copy run), not the flag's list.
    changes.update(data=os.path.abspath(data), output=os.path.abspath(output), constraint=None)
    run = TrainRun(train=train.model_copy(update=changes), ray=config.ray, pairs=pairs, block=block)
    if variant != COPY:
        return run
    found = trained_constraints(run.data, pairs)
    missing = [c for c in constraints or [] if c not in found]
    if missing:
        raise JobError(
            f"the train split of {pairs} in {data} holds no pairs for {', '.join(missing)}"
        )
    chosen = constraints or found
    if not chosen:
        raise JobError(f"the train split of {pairs} in {data} holds no constraint tag")
    return dataclasses.replace(
        run, constraints=tuple(chosen), constraints_given=constraints is not None
    )


def fingerprint(run: TrainRun) -> str:
    """Hash of what makes two runs the same run (data folder state, variant, model, shapes)."""
    settings = run.record()
    stats = os.path.join(run.data, "stats.json")
    data_id = os.path.getmtime(stats) if os.path.exists(stats) else None
    keep = {
        k: settings[k]
        for k in (
            "variant",
            "model",
            "tiny",
            "block",
            "loss_on",
            "deepspeed",
            "engine",
            "seed",
            "num_workers",
            "finetune",
            "trainable_layers",
            "lora",
            "seq2seq",
            "constraint",
        )
    }
    blob = json.dumps(
        {"data": settings["data"], "data_id": data_id, **keep}, sort_keys=True, default=str
    )
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def prepare_tokenizer(run: TrainRun):
    """The run's tokenizer: the one saved in the run folder, else trained (tiny) or loaded."""
    from transformers import PreTrainedTokenizerFast

    train = run.train
    folder = os.path.join(run.output, "tokenizer")
    if os.path.exists(os.path.join(folder, "tokenizer.json")):
        return PreTrainedTokenizerFast.from_pretrained(folder)
    texts = None
    if train.model == TINY or train.variant in SEQ2SEQ:
        dataset = train_texts(run)
        # Unthreaded: the threaded scanner reads ahead of a slow consumer (the tokenizer's
        # trainer) without bound, up to the whole split, though only the first texts are used.
        texts = (
            t
            for batch in dataset.to_batches(columns=["text"], use_threads=False)
            for t in batch.column(0).to_pylist()
        )
        texts = (t for _, t in zip(range(TOKENIZER_TEXTS), texts))
    if train.variant in SEQ2SEQ:
        return train_tiny_tokenizer(texts, train.seq2seq.vocab_size)
    try:
        tokenizer = load_tokenizer(train.model, texts, train.tiny.vocab_size)
    except (OSError, PresetError) as err:
        raise JobError(f"cannot load model {train.model!r}: {str(err).splitlines()[0]}") from None
    return tokenizer


def keep_constraint(batch, constraint: str):
    """Ray Data task: the rows of a batch whose target obeys `constraint` (constraint_filter)."""
    return batch.filter(constraint_filter(constraint))


def first_rows(run: TrainRun, split: str, limit: int) -> pa.Table:
    """The first `limit` texts of a split in file order (of the run's constraint when it has one)."""
    # The same rows every run, so runs' dev losses compare; a streamed limit keeps whichever blocks
    # finish first.
    return train_texts(run, split).head(limit, columns=["text"])


def file_order(files: list[str], seed: int | None) -> list[str]:
    """The order a split's files are read in: shuffled by `seed`, or as listed when None."""
    files = list(files)
    if seed is not None:
        random.Random(seed).shuffle(files)
    return files


def tokenize_files(
    batch: pa.Table, tokenizer_json: str, variant: str, block: int, constraint: str | None = None
):
    """Ray Data task: token rows of Parquet files of training texts (one constraint's pairs when given)."""
    for path in batch.column("path").to_pylist():
        for part in pq.ParquetFile(path).iter_batches(batch_size=TOKENIZE_BATCH, columns=["text"]):
            texts = pa.Table.from_batches([part])
            yield tokenize_table(
                keep_constraint(texts, constraint) if constraint else texts,
                tokenizer_json,
                variant,
                block,
            )


def token_dataset(
    ray_data, run: TrainRun, split: str, tokenizer_json: str, limit: int | None = None
):
    """A Ray Dataset of token rows for one split, tokenized by streaming CPU tasks."""
    train = run.train
    shape = {"tokenizer_json": tokenizer_json, "variant": run.pairs, "block": run.block}
    if limit:
        return ray_data.from_arrow(first_rows(run, split, limit)).map_batches(
            tokenize_table,
            batch_format="pyarrow",
            batch_size=TOKENIZE_BATCH,
            num_cpus=train.tokenize_cpus,
            fn_kwargs=shape,
        )
    files = file_order(
        parquet_files(_split_dir(run.data, run.pairs, split)),
        train.seed if train.shuffle_rows else None,
    )
    # One task per file, files in a shuffled order, so the first rows stream out of the first file
    # at any size. randomize_block_order waits for the whole split to be read (and spills it)
    # before its first block moves on; read_parquet starts a pool of footer-reading actors per
    # read; and a separate tokenizing map would fuse with the file list and bundle as many files
    # into one task as it wants rows in a batch.
    return ray_data.from_items(
        [{"path": f} for f in files], override_num_blocks=max(1, len(files))
    ).map_batches(
        tokenize_files,
        batch_format="pyarrow",
        batch_size=1,
        num_cpus=train.tokenize_cpus,
        fn_kwargs={**shape, "constraint": run.constraint},
    )


def mean_tokens(run: TrainRun, tokenizer, sample: int = 2000) -> float:
    """Mean tokens per training example (capped at the block), from a sample of the split."""
    texts = train_texts(run).head(sample, columns=["text"]).column("text").to_pylist()
    lengths = [min(run.block, len(ids)) for ids in tokenizer(texts)["input_ids"]]
    return sum(lengths) / max(1, len(lengths))


def plan_steps(
    run: TrainRun, train_rows: int, tokens_per_row: float | None = None
) -> tuple[int, int]:
    """Optimizer steps per epoch and in all; too little data for one step is an error.
    Token batches hold about micro_batch x block / (tokens per row) rows each, packed ones
    micro_batch x row width / (tokens per row)."""
    train = run.train
    ds = train.deepspeed
    micro, accum, world = ds.micro_batch, ds.grad_accum, train.num_workers
    rows_per_batch = micro
    if train.batching in ("tokens", "packed") and tokens_per_row:
        width = run.block
        if train.batching == "packed":
            width = train.pack_width or width
        rows_per_batch = max(micro, micro * width / tokens_per_row)
    per_epoch = int(train_rows // (rows_per_batch * accum * world))
    if per_epoch == 0:
        raise JobError(
            f"{train_rows} training examples are too few for {world} workers x micro-batch {micro} "
            f"x accumulation {accum}"
        )
    return per_epoch, train.max_steps or per_epoch * train.epochs


def worker_plan(run: TrainRun, tokenizer, train_rows: int, fingerprint_id: str) -> WorkerPlan:
    """Everything a worker needs, typed and frozen (it pickles as it is)."""
    train = run.train
    batching = train.batching
    per_epoch, total = plan_steps(
        run, train_rows, mean_tokens(run, tokenizer) if batching != "examples" else None
    )
    batches = BatchPlan(
        variant=train.variant,
        micro_batch=train.deepspeed.micro_batch,
        bucket_window=train.bucket_window,
        batching=batching,
        pad_id=tokenizer.pad_token_id,
        loss_on=train.loss_on,
        token_budget=train.deepspeed.micro_batch * run.block if batching == "tokens" else None,
        pack_width=train.pack_width or run.block,
        varlen=train.attention == "varlen",
    )
    return WorkerPlan(
        run=run,
        batches=batches,
        tokenizer_dir=os.path.join(run.output, "tokenizer"),
        total_steps=total,
        steps_per_epoch=per_epoch,
        torch_threads=train.torch_threads or max(1, (os.cpu_count() or 1) // train.num_workers),
        meta={
            "variant": train.variant,
            "block_size": run.block,
            "model": train.model,
            "constraint": run.constraint,
            "loss_on": train.loss_on,
            "data": run.data,
            "data_fingerprint": fingerprint_id,
            "constraint_tokens": [
                t for t in tokenizer.all_special_tokens if t.startswith(("<src:", "<tgt:"))
            ],
        },
    )


def plot_loss(output: str) -> None:
    """loss.png: train and eval loss against optimizer steps, from metrics.jsonl."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_jsonl(os.path.join(output, "metrics.jsonl"))
    train = [(r["step"], r["train_loss"]) for r in rows if r["train_loss"] is not None]
    evals = [(r["step"], r["eval_loss"]) for r in rows if r["eval_loss"] is not None]
    figure, axis = plt.subplots(figsize=(7, 4))
    if train:
        axis.plot(*zip(*train), label="train loss")
    if evals:
        axis.plot(*zip(*evals), marker="o", label="eval loss (dev)")
    axis.set_xlabel("optimizer step")
    axis.set_ylabel("cross-entropy")
    axis.legend()
    figure.tight_layout()
    figure.savefig(os.path.join(output, "loss.png"), dpi=100)
    plt.close(figure)


def steady_mean(values: list[float]) -> float | None:
    """Mean over the logged intervals: the first includes start-up work and is left out
    when there are others; None when nothing was logged."""
    kept = values[1:] or values
    return sum(kept) / len(kept) if kept else None


def write_stats(plan: WorkerPlan, seconds: float, train_rows: int, removed: list[str]) -> dict:
    """train_stats.json: steps, examples kept/cut/too long, speed, padding and MFU of this run, and the
    unregistered checkpoint folders it removed."""
    run, train = plan.run, plan.run.train
    output = run.output
    with open(os.path.join(output, "worker_stats.json"), encoding="utf-8") as handle:
        worker = json.load(handle)
    rows = read_jsonl(os.path.join(output, "metrics.jsonl"))
    speeds = [r["tokens_per_s"] for r in rows if r.get("tokens_per_s")]
    padding = [r["padding_fraction"] for r in rows if r.get("padding_fraction") is not None]
    waits = [r["data_wait_fraction"] for r in rows if r.get("data_wait_fraction") is not None]
    evals = [r["eval_loss"] for r in rows if r["eval_loss"] is not None]
    speed = steady_mean(speeds) or 0.0
    if worker["device"] == "cpu":
        peak = measure_cpu_peak_flops(plan.torch_threads) * worker["world_size"]
    else:
        peak = (gpu_peak_flops(worker["device"]) or 0.0) * worker["world_size"]
    stats = {
        **worker,
        "variant": train.variant,
        "model": train.model,
        "constraint": run.constraint,
        "train_rows": train_rows,
        "batching": train.batching,
        "attention": train.attention,
        "engine": train.engine,
        "compile": train.compile,
        "row_width": plan.batches.pack_width if train.batching == "packed" else None,
        "planned_steps": plan.total_steps,
        "wall_s": round(seconds, 1),
        "tokens_per_s": round(speed, 1),
        "padding_fraction": round(sum(padding) / len(padding), 4) if padding else None,
        "data_wait_fraction": round(steady_mean(waits), 4) if waits else None,
        "eval_loss_first": evals[0] if evals else None,
        "eval_loss_last": evals[-1] if evals else None,
        "unregistered_checkpoints_removed": removed,
        "peak_flops": peak,
        "mfu": round(
            estimate_mfu(
                worker["parameters"],
                speed,
                peak,
                worker.get("trainable_parameters"),
                worker.get("finetune", "full"),
            ),
            5,
        ),
    }
    write_json_atomic(os.path.join(output, "train_stats.json"), stats)
    return stats


def worker_env(allocator: str) -> dict | None:
    """The training workers' runtime env: the configured malloc preloaded, or a note when it is missing."""
    env = allocator_env(allocator)
    if allocator != "system" and not env:
        print(
            f"train: note: {allocator} is not installed (Debian: apt install libtcmalloc-minimal4); "
            "the workers use the system malloc",
            file=sys.stderr,
        )
    return {"env_vars": env} if env else None


def run(one: TrainRun, resume: bool, overwrite: bool, verbose: bool = False) -> dict:
    """Claim the run folder, start or join Ray, fit, then report."""
    import ray

    train = one.train
    run_id = fingerprint(one)
    train_rows = split_rows(one, "train")
    plan_steps(one, train_rows)
    # A bad model name is reported before the run folder is claimed.
    tokenizer = prepare_tokenizer(one) if not overwrite else None
    # A folder that would be refused is told before Ray starts (claim_output judges again below).
    check_claim(one.output, "train", run_id, overwrite, resume)
    if resume and not overwrite:
        # A checkpoint the run did not write is refused before Ray starts (loading one unpickles it).
        check_resumable(os.path.join(one.output, "ray"))
    started_ray = start_ray(one.ray, verbose)
    try:
        # Ray Train starts only with every worker placed; a shortfall is told before the folder is claimed.
        ensure_room(
            "training worker",
            "train.num_workers, train.cpus_per_worker, train.use_gpu",
            train.num_workers,
            bundle(train.cpus_per_worker, train.use_gpu),
        )
        claim_output(one.output, "train", run_id, one.record(), overwrite, resume)
        tokenizer = tokenizer or prepare_tokenizer(one)
        tokenizer.save_pretrained(os.path.join(one.output, "tokenizer"))
        plan = worker_plan(one, tokenizer, train_rows, run_id)
        return fit(plan, train_rows, tokenizer.backend_tokenizer.to_str())
    finally:
        if started_ray:
            ray.shutdown()


def fit(plan: WorkerPlan, train_rows: int, tokenizer_json: str) -> dict:
    """Build the datasets and the trainer on a running Ray, fit, then plot and write the stats."""
    import ray.data
    from ray.train import CheckpointConfig, DataConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from jobs.train_worker import train_func

    # Workers show one step bar of their own; Ray Data's per-dataset bars would drown it.
    ray.data.DataContext.get_current().enable_progress_bars = False
    run, train = plan.run, plan.run.train
    datasets = {
        "train": token_dataset(ray.data, run, "train", tokenizer_json),
        # Every worker reads the whole (small, capped) dev set; evaluation splits the work.
        "dev": token_dataset(
            ray.data, run, "dev", tokenizer_json, train.eval_examples
        ).materialize(),
    }
    trainer = TorchTrainer(
        train_func,
        train_loop_config=plan,
        datasets=datasets,
        dataset_config=DataConfig(datasets_to_split=["train"]),
        scaling_config=ScalingConfig(
            num_workers=train.num_workers,
            use_gpu=train.use_gpu,
            resources_per_worker={"CPU": train.cpus_per_worker},
        ),
        run_config=RunConfig(
            name="ray",
            storage_path=run.output,
            failure_config=FailureConfig(max_failures=train.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=train.keep_checkpoints),
            worker_runtime_env=worker_env(train.allocator),
        ),
    )
    started = time.perf_counter()
    trainer.fit()
    seconds = time.perf_counter() - started
    removed = remove_unregistered(os.path.join(run.output, "ray"))
    if removed:
        print(
            f"train: removed {len(removed)} checkpoint folder(s) that no checkpoint list holds (written as a worker "
            f"failed, so no resume could use them): {', '.join(removed)}",
            flush=True,
        )
    plot_loss(run.output)
    return write_stats(plan, seconds, train_rows, removed)


def constraint_runs(job: TrainRun) -> list[TrainRun]:
    """Seq2seq Copy's runs, one per constraint, each in <output>/<constraint>/."""
    out = job.output
    if os.path.isfile(out):
        raise JobError(f"{out} is a file, not a folder")
    strangers = [
        e
        for e in (os.listdir(out) if os.path.isdir(out) else [])
        if e not in CONSTRAINTS and e != "train_stats.json"
    ]
    if strangers:
        raise JobError(
            f"{out} holds {', '.join(sorted(strangers)[:3])}, not only per-constraint runs; "
            "choose an empty or new folder"
        )
    runs = []
    for constraint in job.constraints:
        one = job.for_constraint(constraint)
        if not split_rows(one, "dev"):
            print(
                f"train: note: the dev split holds no {constraint} pairs: its model trains without a dev loss",
                file=sys.stderr,
                flush=True,
            )
        runs.append(one)
    return runs


def run_all(job: TrainRun, resume: bool, overwrite: bool, verbose: bool = False) -> dict:
    """Train the run, or Seq2seq Copy's model of each constraint one after another; a resumed
    job skips the constraints already finished. Returns the (last) run's stats."""
    import ray

    variant = job.train.variant
    if variant != COPY:
        return run(job, resume, overwrite, verbose)
    runs = constraint_runs(job)
    kept, skipped = [], {}
    for one in runs:
        # Checked before any training, so a bad later constraint does not stop the job half-way.
        try:
            plan_steps(one, split_rows(one, "train"))
            kept.append(one)
        except JobError as err:
            if job.constraints_given:
                raise JobError(f"{one.constraint}: {err}") from None
            # Asked for every constraint: one with too few pairs is left out, not the whole job.
            print(f"train: note: {one.constraint} left out: {err}", file=sys.stderr, flush=True)
            skipped[one.constraint] = str(err)
    if not kept:
        raise JobError(f"no constraint has pairs enough to train: {'; '.join(skipped.values())}")
    runs = kept
    summary = {}
    # One Ray for every constraint's run.
    started_ray = start_ray(job.ray, verbose)
    try:
        for one in runs:
            summary[one.constraint] = train_constraint(one, resume, overwrite)
    finally:
        if started_ray:
            ray.shutdown()
    write_json_atomic(
        os.path.join(job.output, "train_stats.json"),
        {"variant": variant, "constraints": summary, "skipped": skipped},
    )
    last = summary[runs[-1].constraint]
    return {
        **last,
        "steps": sum(s["steps"] for s in summary.values()),
        "wall_s": round(sum(s["wall_s"] for s in summary.values()), 1),
        "variant": f"{variant} ({len(summary)} constraint{'s' if len(summary) != 1 else ''})",
    }


def train_constraint(one: TrainRun, resume: bool, overwrite: bool) -> dict:
    """One constraint's run: skipped when a resumed job finds it finished; its stats."""
    finished = os.path.exists(os.path.join(one.output, "model", "rrt_meta.json"))
    stats_path = os.path.join(one.output, "train_stats.json")
    if resume and finished and os.path.exists(stats_path):
        print(f"train: {one.constraint}: finished earlier, skipped", flush=True)
        with open(stats_path, encoding="utf-8") as handle:
            return json.load(handle)
    # A constraint not begun yet starts fresh in a resumed job.
    again = resume and os.path.exists(os.path.join(one.output, "run.json"))
    print(f"train: {one.train.variant} for {one.constraint} -> {one.output}", flush=True)
    return run(one, again, overwrite)


def main(
    argv: list[str] | None = None,
    parser: argparse.ArgumentParser | None = None,
    name: str = "train",
) -> int:
    """Parse flags, check settings before any worker starts, train, print a summary."""
    args = (parser or build_parser()).parse_args(argv)
    try:
        job = settings_from(args)
        stats = run_all(job, args.resume, args.overwrite, args.verbose)
    except JobError as err:
        print(f"{name}: error: {err}", file=sys.stderr)
        return 2
    except Exception as err:
        if type(err).__module__.startswith("ray"):
            print(f"{name}: error: training failed: {str(err).splitlines()[0]}", file=sys.stderr)
            return 1
        raise
    first, last = (
        f"{value:.3f}" if value is not None else "none"
        for value in (stats["eval_loss_first"], stats["eval_loss_last"])
    )
    print(
        f"{name}: {stats['steps']} steps of {stats['variant']} in {stats['wall_s']}s; eval loss "
        f"{first} -> {last}; {stats['tokens_per_s']} tokens/s, "
        f"padding {stats['padding_fraction']}, MFU {stats['mfu']}; model in {job.output}/"
        f"{'<constraint>/' if job.train.variant == COPY else ''}model"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

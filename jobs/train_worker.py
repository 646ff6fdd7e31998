"""The function every Ray Train worker runs (see jobs/train.py, which starts them).

Each worker builds the model, wraps it with `deepspeed.initialize`, reads token rows from
its shard of the training set, groups them into low-padding micro-batches, evaluates on the
dev set at an interval, and reports a checkpoint of its own ZeRO shard with
`ray.train.report`. Rank 0 writes metrics.jsonl and, at the end, the Hugging Face export.
"""

from __future__ import annotations

# deepspeed is imported where used: only the DeepSpeed engine needs it (a second to import), and
# only after own_tools_first() has put our ninja first on PATH.
import json
import os
import random
import tempfile
import time

import numpy as np
import ray.train
import ray.train.torch
import torch
import torch.distributed as dist
from tqdm import tqdm
from transformers import PreTrainedTokenizerFast

from jobs.train_plan import BatchPlan, WorkerPlan
from rrt.baselines.seq2seq import seq2seq_batches
from rrt.config import DeepSpeedSettings
from rrt.modelling.batching import bucket_batches
from rrt.modelling.packing import packed_batches
from rrt.training import finetune
from rrt.training.engine import TorchEngine
from rrt.training.optim import deepspeed_config, lr_factor, resolve_precision
from rrt.training.speed import loaded_allocator
from rrt.training.step_window import StepWindow
from rrt.training.training_model import export, prepare_for_training
from runtime.checkpoints import check_manifest, write_manifest
from runtime.cluster import own_tools_first
from runtime.runs import read_jsonl, write_atomic, write_json_atomic

STATE_FILE = "train_state.{rank}.json"  # one per worker: each keeps its own example counts


def _rows(
    shard, counts: dict | None, shuffle: int = 0, seed: int = 0, starts: str = "target_start"
):
    """(token ids, loss start: the `starts` column) of every usable row; rows too long for the block are counted.
    `shuffle` rows are mixed in a buffer: prepared step pairs come a dish at a time, and a run
    shorter than an epoch would otherwise learn from a few dishes only."""
    shuffled = {"local_shuffle_buffer_size": shuffle, "local_shuffle_seed": seed} if shuffle else {}
    for part in shard.iter_batches(batch_size=1024, batch_format="numpy", **shuffled):
        for ids, start, length, cut in zip(
            part["input_ids"], part[starts], part["length"], part["truncated"]
        ):
            if counts is not None:
                counts["too_long" if length == 0 else "truncated" if cut else "whole"] += 1
            if length:
                yield np.asarray(ids), int(start)


def _window_batches(window: list, plan: BatchPlan, rng: random.Random):
    """One window's micro-batches: packed rows, or length-sorted padded batches (an encoder-decoder's
    split at the target tag into source and target)."""
    if plan.seq2seq:
        return seq2seq_batches(window, plan.micro_batch, plan.pad_id, rng, plan.token_budget)
    if plan.batching == "packed":
        return packed_batches(
            window,
            plan.micro_batch,
            plan.pack_width,
            plan.pad_id,
            plan.loss_on,
            rng,
            boundaries=plan.varlen,
        )
    return bucket_batches(
        window, plan.micro_batch, plan.pad_id, plan.loss_on, rng, plan.token_budget
    )


def micro_batches(shard, plan: BatchPlan, seed: int, counts: dict | None, shuffle: int = 0):
    """Low-padding micro-batches from a shard: windows of rows sorted by length (or packed), shuffled."""
    rng = random.Random(seed)
    size = plan.micro_batch * plan.bucket_window
    window: list = []
    # An encoder-decoder splits its rows at the target tag, whatever the loss covers.
    starts = "step_start" if plan.loss_on == "step" and not plan.seq2seq else "target_start"
    for row in _rows(shard, counts, shuffle, seed, starts):
        window.append(row)
        if len(window) == size:
            yield from _window_batches(window, plan, rng)
            window = []
    if window:
        yield from _window_batches(window, plan, rng)


def _sum(values: list[float], device) -> list[float]:
    """Element-wise sum over all workers."""
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def _agreement(world: int):
    """A function of a worker's flag that is true when every worker still has a batch, so no worker
    waits on a collective alone. Asked over the host (gloo), so reading it waits for no GPU work;
    one worker asks no one."""
    if world == 1:
        return lambda flag: flag
    group = dist.new_group(
        backend="gloo"
    )  # on CPU workers too, so the tests run the GPU workers' path

    def all_have(flag: bool) -> bool:
        tensor = torch.tensor([1 if flag else 0])
        dist.all_reduce(tensor, op=dist.ReduceOp.MIN, group=group)
        return bool(tensor.item())

    return all_have


def _timed_next(batches, window: StepWindow):
    """The next micro-batch (None at the end), its wait added to the window."""
    started = time.perf_counter()
    batch = next(batches, None)
    window.waited(time.perf_counter() - started)
    return batch


def evaluate(engine, dev_shard, plan: BatchPlan, rank: int, world: int, device) -> float | None:
    """Token-weighted mean loss on the dev rows; workers take turns over micro-batches. None when
    the dev rows are none (a constraint of Seq2seq Copy without dev pairs)."""
    engine.module.eval()
    loss_sum, tokens = 0.0, 0
    with torch.no_grad():
        for index, batch in enumerate(micro_batches(dev_shard, plan, 0, None)):
            if index % world != rank:
                continue
            counted = batch.predicted_tokens
            # Summed on the device: read once, after the last batch (StepWindow says why).
            loss_sum = loss_sum + engine.module(**batch.inputs(device)).loss.float() * counted
            tokens += counted
    engine.module.train()
    total_loss, total_tokens = _sum([float(loss_sum), float(tokens)], device)
    return total_loss / total_tokens if total_tokens else None


def trim_metrics(output: str, step: int) -> None:
    """Keep the metrics.jsonl rows up to `step`, dropping a line cut by a kill; the file is
    replaced atomically, so a second kill cannot lose the rows kept."""
    path = os.path.join(output, "metrics.jsonl")
    if os.path.exists(path):
        kept = [row for row in read_jsonl(path) if row["step"] <= step]
        write_atomic(path, "".join(json.dumps(row) + "\n" for row in kept))


def _restore(engine, output: str, rank: int) -> dict:
    """Load the last reported checkpoint, if any, and cut metrics.jsonl back to its step."""
    checkpoint = ray.train.get_checkpoint()
    state = {
        "step": 0,
        "epoch": 0,
        "micro_in_epoch": 0,
        "counts": {"whole": 0, "truncated": 0, "too_long": 0},
    }
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            # Loading unpickles the shards: only files this run wrote, as it wrote them.
            check_manifest(folder)
            engine.load_checkpoint(folder, tag="ds")
            with open(
                os.path.join(folder, STATE_FILE.format(rank=rank)), encoding="utf-8"
            ) as handle:
                state = json.load(handle)
    if rank == 0:
        if checkpoint is not None:
            print(f"train: resumed from the checkpoint of step {state['step']}", flush=True)
        # Without a checkpoint the run starts over and logs step 0 again, so no earlier row is kept.
        trim_metrics(output, state["step"] if checkpoint is not None else -1)
    return state


def _checkpoint(engine, state: dict, metrics: dict, rank: int) -> None:
    """Every worker saves its ZeRO shard and a manifest of its files' hashes; Ray merges the
    folders into one checkpoint."""
    with tempfile.TemporaryDirectory() as folder:
        engine.save_checkpoint(folder, tag="ds")
        with open(
            os.path.join(folder, STATE_FILE.format(rank=rank)), "w", encoding="utf-8"
        ) as handle:
            json.dump(state, handle)
        write_manifest(folder, rank)
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))


def build_engine(
    lm, ds: DeepSpeedSettings, precision: str, total_steps: int, device, kind: str = "deepspeed"
):
    """The engine and LR schedule of a run: AdamW (no decay on biases and norms) with warmup and
    decay, wrapped by `deepspeed.initialize` with the config block's ZeRO settings, or by our
    plain PyTorch engine (`kind` torch)."""
    groups = finetune.optimizer_groups(lm, ds.weight_decay)
    optimizer = torch.optim.AdamW(
        groups,
        lr=ds.lr,
        # torch's fused AdamW runs on CPU too, faster there than the per-tensor loop.
        betas=(0.9, 0.95),
        fused=device.type in ("cuda", "cpu"),
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: lr_factor(s, ds.warmup_steps, total_steps, ds.schedule, ds.min_lr_ratio),
    )
    if kind == "torch":
        return TorchEngine(
            lm.to(device),
            optimizer,
            schedule,
            precision,
            ds.grad_accum,
            ds.gradient_clipping,
            device,
        ), schedule
    own_tools_first()  # DeepSpeed JIT-builds its CPU comm op with the first ninja on PATH
    import deepspeed

    engine, _, _, _ = deepspeed.initialize(
        model=lm.to(device),
        optimizer=optimizer,
        lr_scheduler=schedule,
        config=deepspeed_config(ds.model_dump(), precision),
    )
    return engine, schedule


def train_func(plan: WorkerPlan) -> None:
    """One worker's training run (the `train_loop_per_worker` of the TorchTrainer)."""
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    run, train, batching = plan.run, plan.run.train, plan.batches
    torch.set_num_threads(plan.torch_threads)
    device = ray.train.torch.get_device()
    tokenizer = PreTrainedTokenizerFast.from_pretrained(plan.tokenizer_dir)
    model = prepare_for_training(train, tokenizer, run.block, device.type)
    cuda = device.type == "cuda"
    precision = resolve_precision(
        train.deepspeed.precision, cuda, cuda and torch.cuda.is_bf16_supported()
    )
    total = plan.total_steps
    engine, schedule = build_engine(
        model.lm, train.deepspeed, precision, total, device, train.engine
    )
    state = _restore(engine, run.output, rank)
    train_shard, dev_shard = (
        ray.train.get_dataset_shard("train"),
        ray.train.get_dataset_shard("dev"),
    )
    metrics_path = os.path.join(run.output, "metrics.jsonl")

    def log(entry: dict) -> None:
        """One metrics.jsonl line, written by rank 0 only."""
        if rank == 0:
            with open(metrics_path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(entry) + "\n")

    if state["step"] == 0:
        log(
            {
                "step": 0,
                "epoch": 0,
                "train_loss": None,
                "eval_loss": evaluate(engine, dev_shard, batching, rank, world, device),
                "lr": schedule.get_last_lr()[0],
                "tokens_per_s": None,
                "padding_fraction": None,
                "data_wait_fraction": None,
            }
        )
    window, all_have = StepWindow(), _agreement(world)
    progress, first_step_at = None, None
    if rank == 0:
        progress = tqdm(
            total=total, initial=state["step"], desc="train steps", unit="step", mininterval=5
        )
    while state["step"] < total and (train.max_steps or state["epoch"] < train.epochs):
        counts = state["counts"] if state["epoch"] == 0 else None
        batches = micro_batches(
            train_shard,
            batching,
            train.seed + 1000 * state["epoch"] + rank,
            counts,
            train.shuffle_rows,
        )
        for _ in range(state["micro_in_epoch"]):
            next(batches, None)
        ran = 0
        window.start()  # the wait for an epoch's first batch is the window's time too
        batch = _timed_next(batches, window)
        while state["step"] < total:
            if not all_have(batch is not None):
                break
            window.start()
            loss = engine(**batch.inputs(device)).loss
            engine.backward(loss)
            engine.step()
            ran += 1
            state["micro_in_epoch"] += 1
            window.add(loss, batch)
            if engine.global_steps < total:
                # Read and built while the device runs the step just queued: no step waits on the
                # device between metrics lines (rrt.training.step_window).
                batch = _timed_next(batches, window)
            if engine.global_steps == state["step"]:
                continue  # inside a gradient accumulation
            state["step"] = engine.global_steps
            # Wall-clock time, so a caller can measure from its own start (the job's start-up included).
            first_step_at = first_step_at or time.time()
            if progress:
                progress.update(1)
            step, last = state["step"], state["step"] >= total
            if step % train.log_interval == 0 or last or step % train.eval_interval == 0:
                loss_sum, micro, real, padded, seconds, wait = _sum(window.totals(device), device)
                eval_loss = None
                if step % train.eval_interval == 0 or last:
                    eval_loss = evaluate(engine, dev_shard, batching, rank, world, device)
                speed = real / (seconds / world) if seconds else 0.0
                entry = {
                    "step": step,
                    "epoch": state["epoch"],
                    "train_loss": loss_sum / max(1, micro),
                    "eval_loss": eval_loss,
                    "lr": schedule.get_last_lr()[0],
                    "tokens_per_s": speed,
                    "padding_fraction": 1 - real / padded if padded else 0.0,
                    # Share of the window's time the host waited for the next batch (the
                    # device may still run queued steps meanwhile): above a few per cent
                    # the input pipeline, not the model, may set the pace.
                    "data_wait_fraction": wait / seconds if seconds else 0.0,
                }
                log(entry)
                window = StepWindow()
            if step % train.checkpoint_interval == 0 and not last:
                _checkpoint(engine, state, {"step": step}, rank)
        if ran == 0:
            raise RuntimeError(f"worker {rank} got no training batch in epoch {state['epoch']}")
        if state["step"] < total:
            state["epoch"] += 1
            state["micro_in_epoch"] = 0
    if progress:
        progress.close()
    whole, cut, too_long = _sum(
        [state["counts"][k] for k in ("whole", "truncated", "too_long")], device
    )
    state["counts"] = {"whole": int(whole), "truncated": int(cut), "too_long": int(too_long)}
    _checkpoint(engine, state, {"step": state["step"], "done": True}, rank)
    if rank == 0:
        # After the last checkpoint, so casting the weights to fp32 cannot disturb the engine.
        export(
            engine.module,
            model,
            tokenizer,
            os.path.join(run.output, "model"),
            {
                **plan.meta,
                "steps": state["step"],
                "precision": precision,
                "parameters": model.sizes["parameters"],
                "finetune": train.finetune,
            },
        )
        write_json_atomic(
            os.path.join(run.output, "worker_stats.json"),
            {
                "steps": state["step"],
                "epochs_started": state["epoch"] + 1,
                "examples": state["counts"],
                "first_step_at": first_step_at,
                **model.sizes,
                "finetune": train.finetune,
                "precision": precision,
                "world_size": world,
                "torch_threads": torch.get_num_threads(),
                "allocator": loaded_allocator(),
                "vocab": model.live_vocab,
                "vocab_padded_to": model.padded_vocab,
                "lm_head": model.head,
                "device": torch.cuda.get_device_name() if cuda else "cpu",
            },
        )

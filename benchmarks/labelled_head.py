"""Training steps with the LM head on the labelled positions only (rrt/modelling/labelled_head.py,
what the training job does for `train.loss_on: target`) against the library's forward, which takes
logits at every position (the baseline): same model, weights, batches and optimizer, in one process.

    python benchmarks/labelled_head.py                                     # smollm2-135m, freeze, the real pairs
    python benchmarks/labelled_head.py --data out/demo/prepared --model tiny --finetune full
    python benchmarks/labelled_head.py --device cuda --model gpt2-medium --data out/prepared   # on one GPU

The data are a prepare_data folder's training step pairs (default: one made from ../shared/data, as
train_throughput.py makes it), tokenized and batched as the job does (`train.batching` tokens, the
micro-batch of ray_config.yaml unless given). The model is built, its vocabulary padded and
prepared for `--finetune` as a training worker does, and stepped by the job's torch engine (fused
AdamW, clipping, the schedule; on a GPU bf16 autocast). The two ways take turns for `--rounds`
rounds over the same batches, after untimed warm-up steps; each line printed is JSON, the last the
median ratio ours / the library's (examples a second).
"""

from __future__ import annotations

import argparse
import copy
import functools
import glob
import json
import os
import random
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import pyarrow.dataset as pads
from train_throughput import prepared_data

from rrt.config import load_settings
from rrt.modelling.batching import bucket_batches, tokenize_table
from rrt.modelling.labelled_head import head_on_labels
from rrt.modelling.models import TINY, build_model, load_tokenizer, pad_vocabulary
from rrt.training import finetune
from rrt.training.optim import resolve_precision
from testing.timing import example_rows, sync

WARMUP_STEPS = 2


@functools.lru_cache(maxsize=1)
def train_settings() -> dict:
    """ray_config.yaml's train block, as the job reads it (read once; nothing here changes it)."""
    return load_settings().train.model_dump()


def training_rows(data: str, variant: str, model: str, block: int, limit: int):
    """The tokenizer a run of `model` uses and up to `limit` training examples as (ids, target start)."""
    files = sorted(
        glob.glob(
            os.path.join(data, "step_pairs", variant, "train", "**", "*.parquet"), recursive=True
        )
    )
    if not files:
        raise SystemExit(f"labelled_head: no training pairs of {variant} under {data}/step_pairs")
    texts = (
        pads.dataset(files, format="parquet").to_table(columns=["text"]).column("text").to_pylist()
    )
    texts = random.Random(0).sample(texts, min(limit, len(texts)))
    tokenizer = load_tokenizer(model, texts, train_settings()["tiny"]["vocab_size"])
    import pyarrow as pa

    table = tokenize_table(
        pa.table({"text": texts}), tokenizer.backend_tokenizer.to_str(), variant, block
    )
    return tokenizer, example_rows(table)


def new_model(model: str, tokenizer, method: str, device):
    """The model as a training worker builds it: padded vocabulary, prepared for `method`."""
    settings = train_settings()
    shape = {k: v for k, v in settings["tiny"].items() if k != "lr"}
    lm = build_model(
        model, len(tokenizer), shape, settings["seed"], tokenizer.pad_token_id, tokenizer
    )
    live = pad_vocabulary(lm, settings["pad_vocab_to"]).live
    lm = finetune.prepare(
        lm,
        method,
        range(finetune.new_tokens_from(tokenizer), live),
        settings["trainable_layers"],
        settings["lora"],
    )
    return lm.to(device).train()


def engine_of(lm, device, steps: int):
    """The job's torch engine around `lm` (its optimizer groups, schedule and precision)."""
    import torch

    from jobs.train_worker import build_engine
    from rrt.config import DeepSpeedSettings

    ds = train_settings()["deepspeed"]
    cuda = device.type == "cuda"
    precision = resolve_precision(ds["precision"], cuda, cuda and torch.cuda.is_bf16_supported())
    return build_engine(lm, DeepSpeedSettings(**ds), precision, steps, device, "torch")[0]


def timed(engine, batches: list, device) -> float:
    """Seconds of one optimizer step per batch."""
    sync(device)
    started = time.perf_counter()
    for batch in batches:
        loss = engine(**batch.inputs(device)).loss
        engine.backward(loss)
        engine.step()
    sync(device)
    return time.perf_counter() - started


def main() -> None:
    """Time both ways in turns and print the median ratio last."""
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data", help="a prepare_data output folder (default: build one from ../shared/data)"
    )
    parser.add_argument(
        "--variant",
        default="contextual_ing",
        choices=list(train_settings()["block_size"]),
        help="step pairs to train on (loss on the target)",
    )
    parser.add_argument("--model", default=None, help="train.model (default: ray_config.yaml's)")
    parser.add_argument(
        "--finetune",
        default=None,
        choices=finetune.METHODS,
        help="train.finetune (default: ray_config.yaml's; tiny: full)",
    )
    parser.add_argument(
        "--micro-batch", type=int, default=None, help="examples a step (default: ray_config.yaml's)"
    )
    parser.add_argument("--batches", type=int, default=10, help="timed steps a round")
    parser.add_argument(
        "--rounds", type=int, default=3, help="turns of the two ways; the median ratio counts"
    )
    parser.add_argument("--device", default="cpu", help="torch device")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads on CPU (default: torch's)"
    )
    args = parser.parse_args()
    settings = train_settings()
    model = args.model or settings["model"]
    method = args.finetune or ("full" if model == TINY else settings["finetune"])
    micro = args.micro_batch or settings["deepspeed"]["micro_batch"]
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    block = settings["block_size"][args.variant]
    try:
        tokenizer, rows = training_rows(
            prepared_data(args.data),
            args.variant,
            model,
            block,
            micro * (args.batches + WARMUP_STEPS) * 4,
        )
        library = new_model(model, tokenizer, method, device)
    except (OSError, ValueError, RuntimeError) as err:
        raise SystemExit(
            f"labelled_head: cannot load {model}: {str(err).splitlines()[0]}"
        ) from None
    batches = list(
        bucket_batches(
            rows, micro, tokenizer.pad_token_id, "target", random.Random(0), micro * block
        )
    )[: args.batches + WARMUP_STEPS]
    labelled = sum(b.predicted_tokens for b in batches)
    positions = sum(b.labels.size for b in batches)
    print(
        json.dumps(
            {
                "model": model,
                "finetune": method,
                "variant": args.variant,
                "micro_batch": micro,
                "batches": len(batches) - WARMUP_STEPS,
                "labelled_share": round(labelled / positions, 3),
                "device": args.device,
                "threads": torch.get_num_threads(),
            }
        ),
        flush=True,
    )
    ours = copy.deepcopy(library)
    head_on_labels(ours)
    total = (args.rounds + 1) * len(batches)
    engines = {"library": engine_of(library, device, total), "ours": engine_of(ours, device, total)}
    for engine in engines.values():
        timed(engine, batches[:WARMUP_STEPS], device)
    ratios = []
    for round_ in range(args.rounds):
        seconds = {
            name: timed(engine, batches[WARMUP_STEPS:], device) for name, engine in engines.items()
        }
        examples = sum(b.input_ids.shape[0] for b in batches[WARMUP_STEPS:])
        for name, s in seconds.items():
            print(
                json.dumps(
                    {
                        "round": round_ + 1,
                        "way": name,
                        "seconds": round(s, 2),
                        "examples_per_s": round(examples / s, 2),
                    }
                ),
                flush=True,
            )
        ratios.append(seconds["library"] / seconds["ours"])
    print(
        json.dumps(
            {
                "ratio": round(statistics.median(ratios), 3),
                "ratios": [round(r, 3) for r in ratios],
                "of": "ours / the library's forward, examples a second",
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()

"""GPU speed in one command: training rows and the rewrite engine on one GPU, one table.

    python benchmarks/gpu_speed.py --out gpu_speed.jsonl                   # one H100/H200, under 7 minutes
    python benchmarks/gpu_speed.py --sections rewrite --out rewrite.jsonl  # the rewrite rows alone
    python benchmarks/gpu_speed.py --model-shape tiny --device cpu --budget-s 150 --out /tmp/g.jsonl   # try it
    sh benchmarks/gpu_next.sh results/  # the rows RESULTS.md still lacks, one call of about 9 minutes

Needs no network and no Ray: Contextual training texts of the bundled sample (or
--train-recipes-file: real recipes, whose lengths set the padding) with the substitution guide as
the target, block 256, a BPE tokenizer trained on them; the gpt2-medium shape with random weights
and GPT-2's vocabulary plus ours (speed does not depend on the weights). Without DeepSpeed (or
with --no-deepspeed) its engine rows are recorded as skipped.

Training rows (--train-rows), each a fresh model, fused AdamW, clipping 1.0, loss on every token:
padded (every example padded to the block, bf16 autocast, the library's model: the baseline),
bucketed (train.batching: tokens), packed (train.batching: packed), compile (packed +
torch.compile), varlen (packed + compile, train.attention: varlen) in rows of the block and, as
varlen-wide, twice as wide, target (the loss on the target: the library's head at every position
against ours at the labelled positions only); then the engines (jobs/train_worker.build_engine:
torch and deepspeed) at --micro-batch and 8. Ours pad the LM head to train.pad_vocab_to rows.
Rewrite rows (fp16 on CUDA, top-k 40, ten candidates): the generate loop (one
generate(num_return_sequences=10) per recipe step), ours by the device's decoding plan
(rrt.modelling.sampling.decode_plan), a token check of the two plans, and the service's engine
in-process: one recipe at a time, whole batches and continuous batching through each --slots
count, candidates ending at a seeded --stop-share of the vocabulary so steps vary in length as real
ones do. Llama rows (--sections llama): a Llama of SmolLM2-135M's shape, the loop plan against the
graph plan. Every result is appended to --out as a JSON line when measured, so a timeout keeps
what ran; the Markdown table and the ratios (ours against the generate loop last) end the run.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np

from rrt.modelling.kernels import attention_implementation, compile_model
from rrt.modelling.labelled_head import head_on_labels
from rrt.modelling.models import fused_gelu, pad_vocabulary, special_tokens
from rrt.training.speed import attention_flops_per_token, estimate_mfu, gpu_peak_flops
from testing.timing import autocast_step, example_rows, scheme_batches, sync

# Useful tokens/s of our DeepSpeed engine at micro-batch 64 on an H100, the figure to beat.
TODAY_BEST = 73_134
GPT2_VOCAB = 50257
SHAPES = {
    "gpt2-medium": {"n_layer": 24, "n_head": 16, "n_embd": 1024},
    "tiny": {"n_layer": 2, "n_head": 4, "n_embd": 128},
}
BLOCK = 256  # the Contextual block
# The packing checks' GPT-2.
CHECK_SHAPE = {"vocab_size": 300, "n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 128}
WARMUP = 4
# Time a compiled row needs at least, compilation included.
COMPILE_RESERVE_S = {"cuda": 100, "cpu": 60}
TRAIN_ROWS = ("padded", "packed", "compile", "varlen", "varlen-wide", "bucketed", "target")
SECTIONS = ("train", "rewrite", "serve", "llama", "engine")
# The llama rows' model: SmolLM2-135M's shape (the pretrained preset's family), random weights.
LLAMA_SHAPE = {
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "rope_theta": 100000.0,
    "tie_word_embeddings": True,
}
LLAMA_VOCAB = 49152
# The batching rows: with this share of the vocabulary ending a candidate, the random model's steps
# run about as long as a fine-tuned model's on real recipes; a round of several recipes lasts as
# long as its longest step, so lengths that never vary would flatter batching.
STOP_SHARE = 0.07
STOP_SEED = 13
# The least seconds left to start a rewrite row (by way), or a section.
NEED_S = {
    "section": 60,
    "generate": 45,
    "ours": 20,
    "loop": 20,
    "graph": 15,
    "first run": 10,
    "check": 10,
}


class Results:
    """Every result as a JSON line in --out, written the moment it is measured."""

    def __init__(self, path: str | None, budget_s: float):
        self.path, self.rows, self.started, self.budget = path, [], time.perf_counter(), budget_s
        if path:
            open(path, "w", encoding="utf-8").close()

    def left(self) -> float:
        """Seconds of the budget still unspent."""
        return self.budget - (time.perf_counter() - self.started)

    def add(self, row: dict) -> dict:
        """Record one result."""
        row = {**row, "at_s": round(time.perf_counter() - self.started, 1)}
        self.rows.append(row)
        print(json.dumps(row), flush=True)
        if self.path:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(row) + "\n")
        return row

    def skip(self, section: str, name: str, reason: str) -> None:
        """Record a row that did not run, and why."""
        self.add({"section": section, "row": name, "skipped": reason})

    def fail(self, section: str, name: str, err: Exception, before: str = "") -> None:
        """Record a row that failed, and how."""
        failed = f"{before}{type(err).__name__}: {str(err)[:300]}"
        self.add({"section": section, "row": name, "failed": failed})

    def budget_short(self, section: str, name: str, need_s: float, reserve_s: float) -> bool:
        """Whether the budget cannot hold `need_s` more seconds; if so the row is recorded skipped."""
        if self.left() >= need_s + reserve_s:
            return False
        self.skip(section, name, f"budget: {self.left():.0f}s left")
        return True


def choices(allowed) -> Callable[[str], str]:
    """An argparse type: a comma list whose every item is one of `allowed`."""

    def parse(value: str) -> str:
        bad = [item for item in value.split(",") if item and item not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(
                f"unknown {', '.join(bad)}; choose from {', '.join(allowed)}"
            )
        return value

    return parse


def counts(value: str) -> str:
    """An argparse type: a comma list of positive whole numbers."""
    if not all(item.isdigit() and int(item) > 0 for item in value.split(",")):
        raise argparse.ArgumentTypeError(
            f"expected positive whole numbers separated by commas, got {value!r}"
        )
    return value


def release(device) -> None:
    """Give a finished section's GPU memory back (its model, caches and graphs) before the next."""
    import gc

    gc.collect()
    if device.type == "cuda":
        import torch

        torch.cuda.empty_cache()


def read_recipes(path: str | None = None) -> list[dict]:
    """JSON-lines recipes with steps, by default the bundled sample (read directly: the loaders'
    cleaning needs packages the GPU lacks)."""
    with open(
        path or os.path.join(ROOT, "data", "sample", "recipes.jsonl"), encoding="utf-8"
    ) as handle:
        return [r for r in (json.loads(line) for line in handle if line.strip()) if r.get("steps")]


def broken_constraints(recipe: dict) -> list[str]:
    """The constraints a recipe breaks, by the tagger."""
    from rrt.recipes.recipe import Recipe
    from rrt.recipes.tagger import tag_recipe

    tags = tag_recipe(Recipe(recipe["id"], recipe["title"], recipe["ingredients"], recipe["steps"]))
    return [c for c, ok in tags.valid.items() if not ok]


def contextual_texts(recipes: list[dict]) -> list[str]:
    """Contextual training texts: each source step n with steps 1..n as context, and the guide's
    rewrite of steps 1..n as the target, for every constraint the recipe breaks."""
    from rrt.corpus import formats
    from rrt.recipes.recipe import Recipe
    from rrt.recipes.substitutions import substitute_recipe

    texts = []
    for r in recipes:
        recipe = Recipe(r["id"], r["title"], r["ingredients"], r["steps"])
        for constraint in broken_constraints(r):
            target = substitute_recipe(recipe, [constraint]).recipe.steps
            texts += [
                formats.contextual(
                    r["title"], r["ingredients"], r["steps"][: n + 1], target[: n + 1], constraint
                )
                for n in range(len(r["steps"]))
            ]
    return texts


def token_rows(texts: list[str], tokenizer) -> list[tuple[np.ndarray, int]]:
    """(ids, target start) of every text that fits the block, as the training job tokenizes them."""
    import pyarrow as pa

    from rrt.modelling.batching import tokenize_table

    table = tokenize_table(
        pa.table({"text": texts}), tokenizer.backend_tokenizer.to_str(), "contextual", BLOCK
    )
    return example_rows(table)


def model_config(shape: str, tokenizer):
    """GPT-2 of the given shape with GPT-2's vocabulary plus ours; no BOS/EOS in the config, so
    generate() runs every candidate to its token limit as ours does."""
    from transformers import GPT2Config

    vocab = GPT2_VOCAB + len(special_tokens()) if shape == "gpt2-medium" else len(tokenizer)
    return GPT2Config(
        vocab_size=vocab,
        n_positions=1024,
        **SHAPES[shape],
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=tokenizer.pad_token_id,
    )


def llama_config(shape: str, tokenizer):
    """A Llama of SmolLM2-135M's shape (--model-shape tiny: two layers) with its vocabulary size."""
    from transformers import LlamaConfig

    layers = {} if shape == "gpt2-medium" else {"num_hidden_layers": 2}
    return LlamaConfig(
        vocab_size=max(LLAMA_VOCAB, len(tokenizer)),
        max_position_embeddings=2048,
        **{**LLAMA_SHAPE, **layers},
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=tokenizer.pad_token_id,
    )


def new_model(config, device, attention: str | None, fused: bool):
    """A fresh model built on the device (355M parameters take seconds on the host)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    config = fused_gelu(copy.deepcopy(config)) if fused else config
    kwargs = {"attn_implementation": attention_implementation(attention)} if attention else {}
    with device:
        return AutoModelForCausalLM.from_config(config, **kwargs).train()


def engine_step(model, device, micro: int, steps: int, kind: str):
    """Our training step: the engine jobs/train_worker.py builds (`kind` deepspeed or torch;
    v100x64's optimizer block, bf16 where the GPU has it), one process."""
    import torch

    from jobs.train_worker import build_engine
    from rrt.training.optim import resolve_precision

    for key, value in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29533",
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
    }.items():
        os.environ.setdefault(key, value)
    cuda = device.type == "cuda"
    if kind == "deepspeed" and not torch.distributed.is_initialized():
        import deepspeed

        deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo")
    precision = resolve_precision("auto", cuda, cuda and torch.cuda.is_bf16_supported())
    from rrt.config import load_settings

    ds = load_settings(profile="v100x64").train.deepspeed.model_copy(update={"micro_batch": micro})
    engine, _ = build_engine(model, ds, precision, steps, device, kind)

    def step(inputs: dict) -> None:
        """Forward, backward and update through the engine."""
        loss = engine(**inputs).loss
        engine.backward(loss)
        engine.step()

    return step


def time_steps(step, batches: list, steps: int, device, cap_s: float) -> tuple[float, int]:
    """Useful tokens/s over up to `steps` timed steps (fewer when `cap_s` runs out), after warm-up."""
    for index in range(WARMUP):
        step(batches[index % len(batches)].inputs(device))
    sync(device)
    useful, done, started = 0, 0, time.perf_counter()
    while done < steps and (done < 3 or time.perf_counter() - started < cap_s):
        batch = batches[(WARMUP + done) % len(batches)]
        step(batch.inputs(device))
        useful += batch.real_tokens
        done += 1
    sync(device)
    return useful / (time.perf_counter() - started), done


def check_packing(device, results: Results) -> None:
    """Packed rows give each example the logits it gets alone, with this machine's transformers."""
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config

    from rrt.modelling.packing import pack_rows, packed_batch

    torch.manual_seed(0)
    lm = (
        AutoModelForCausalLM.from_config(GPT2Config(**CHECK_SHAPE), attn_implementation="sdpa")
        .to(device)
        .eval()
    )
    rng = np.random.default_rng(0)
    examples = [(rng.integers(3, 300, size=int(rng.integers(5, 41))), 1) for _ in range(9)]
    rows = pack_rows(examples, 64)
    with torch.no_grad():
        packed = lm(**packed_batch(rows, 0, "all", 64).inputs(device)).logits
        worst = 0.0
        for r, row in enumerate(rows):
            at = 0
            for ids, _ in row:
                alone = lm(input_ids=torch.as_tensor(ids[None], device=device)).logits[0]
                worst = max(worst, float((packed[r, at : at + len(ids)] - alone).abs().max()))
                at += len(ids)
    results.add(
        {
            "section": "check",
            "row": "packed logits = each example alone",
            "max_abs_diff": worst,
            "ok": worst < 1e-3,
        }
    )
    if device.type == "cuda":
        check_varlen(device, examples, results)


def check_varlen(device, examples, results: Results) -> None:
    """On CUDA: the flash kernel by example (train.attention: varlen) against sdpa's packed mask,
    logits and loss in bf16 autocast, rows twice the examples' width."""
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config

    from rrt.modelling.packing import pack_rows, packed_batch

    config = GPT2Config(**CHECK_SHAPE)
    inputs = packed_batch(pack_rows(examples, 128), 0, "all", 128, boundaries=True).inputs(device)
    out = {}
    for attention in ("sdpa", "varlen"):
        torch.manual_seed(0)
        lm = AutoModelForCausalLM.from_config(
            config, attn_implementation=attention_implementation(attention)
        )
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            out[attention] = lm.to(device).eval()(**inputs)
    worst = float((out["sdpa"].logits.float() - out["varlen"].logits.float()).abs().max())
    loss = abs(float(out["sdpa"].loss) - float(out["varlen"].loss))
    results.add(
        {
            "section": "check",
            "row": "varlen attention = the packed mask (bf16)",
            "max_abs_diff": worst,
            "loss_diff": loss,
            "ok": worst < 5e-2 and loss < 1e-2,
        }
    )


@dataclasses.dataclass(frozen=True)
class TrainRow:
    """One training row: its batches, attention, model and step."""

    label: str
    kind: str  # the batches: padded, bucketed or packed
    micro: int
    attention: str | None = "sdpa"  # None: the library's default (the padded baseline)
    ours: bool = True  # fused GELU and the LM head padded to --pad-vocab-to, as training does
    compiled: bool = False
    engine: str | None = None  # jobs/train_worker.build_engine's kind; None: the autocast step
    width: int = BLOCK  # the packed rows' tokens
    loss_on: str = "all"
    labelled: bool = (
        False  # the LM head at the labelled positions only (rrt.modelling.labelled_head)
    )


EVERY = "packed+compile, loss on the target"
LABELLED = EVERY + ", head at the labelled positions"


class TrainRows:
    """The training rows, timed one by one within the budget, each recorded as it ends."""

    def __init__(self, args, device, config, rows, pad_id: int, results: Results):
        import torch

        self.args, self.device, self.config, self.rows = args, device, config, rows
        self.pad_id, self.results, self.speeds = pad_id, results, {}
        self.name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
        self.peak = gpu_peak_flops(self.name) or 0.0
        self.attention_flops = attention_flops_per_token(config.n_layer, config.n_embd, BLOCK)

    def plan(self, sections: set[str]) -> list[TrainRow]:
        """The plain rows --train-rows asks for, the most wanted first so a short budget keeps
        them; without the train section, the padded row alone (the engines' baseline)."""
        micro, wide = self.args.micro_batch, max(1, self.args.micro_batch // 2)
        rows = {
            "padded": [TrainRow("padded", "padded", micro, None, ours=False)],
            "packed": [TrainRow("packed", "packed", micro)],
            "compile": [TrainRow("packed+compile", "packed", micro, compiled=True)],
            # Attention by example in rows twice the block at half the rows: the same tokens a
            # step, less padding.
            "varlen-wide": [
                TrainRow(
                    f"packed {2 * BLOCK}-token rows+compile, varlen attention",
                    "packed",
                    wide,
                    "varlen",
                    compiled=True,
                    width=2 * BLOCK,
                )
            ],
            "varlen": [
                TrainRow(
                    "packed+compile, varlen attention", "packed", micro, "varlen", compiled=True
                )
            ],
            "bucketed": [TrainRow("bucketed", "bucketed", micro)],
            "target": [
                TrainRow(EVERY, "packed", micro, compiled=True, loss_on="target"),
                TrainRow(LABELLED, "packed", micro, compiled=True, loss_on="target", labelled=True),
            ],
        }
        if "train" not in sections:
            return rows["padded"]
        wanted, compiled = set(self.args.train_rows.split(",")), not self.args.no_compile
        return [
            row
            for name, some in rows.items()
            if name in wanted and (compiled or not any(r.compiled for r in some))
            for row in some
        ]

    def run_plain(self, sections: set[str]) -> None:
        """Time the plain rows, then the head at the labelled positions against every position."""
        for row in self.plan(sections):
            self.run(row)
        if self.speeds.get(EVERY) and self.speeds.get(LABELLED):
            self.results.add(
                {
                    "section": "train",
                    "row": "ratio head at the labelled positions / every position "
                    "(loss on the target)",
                    "ratio": round(self.speeds[LABELLED] / self.speeds[EVERY], 2),
                    "note": "MFU counts the head at every position in both rows",
                }
            )

    def engine_rows(self) -> list[TrainRow]:
        """The engine rows, timed after the rewrite rows: compiled when the plain compiled row was
        faster (without it, unless --no-compile), at --micro-batch and at 8 (the v100x64 profile's,
        where DeepSpeed's per-step host work showed most)."""
        args, speeds = self.args, self.speeds
        compiled = (
            speeds["packed+compile"] > speeds.get("packed", 0)
            if "packed+compile" in speeds
            else not args.no_compile
        )
        kinds = [
            k for k in args.engines.split(",") if k and not (k == "deepspeed" and args.no_deepspeed)
        ]
        if args.no_deepspeed:
            self.results.skip("train", "engine deepspeed", "--no-deepspeed")
        return [
            TrainRow(
                f"engine {kind}, packed{'+compile' if compiled else ''}, micro {size}",
                "packed",
                size,
                compiled=compiled,
                engine=kind,
            )
            for size in (args.micro_batch, 8)
            for kind in kinds
        ]

    def run(self, row: TrainRow) -> None:
        """Time one row (a fresh model, its batches, its step) and record it; out of memory at a
        micro-batch over 8, the row runs again at half of it."""
        import torch

        need = COMPILE_RESERVE_S[self.device.type] if row.compiled else self.args.row_s
        if self.results.budget_short("train", row.label, need, self.args.reserve_s):
            return
        if row.engine == "deepspeed":
            try:
                importlib.import_module("deepspeed")
            except Exception as err:  # noqa: BLE001 - any failure to load it means no engine rows
                reason = f"deepspeed does not import: {str(err).splitlines()[0][:120]}"
                return self.results.skip("train", row.label, reason)
        batches = scheme_batches(
            row.kind,
            self.rows,
            row.micro,
            BLOCK,
            self.pad_id,
            width=row.width,
            boundaries=row.attention == "varlen",
            loss_on=row.loss_on,
        )
        model = new_model(self.config, self.device, row.attention, row.ours)
        if row.ours:
            pad_vocabulary(model, self.args.pad_vocab_to)
        head_rows = model.get_output_embeddings().weight.shape[0]
        if row.labelled:
            head_on_labels(model)
        parameters = sum(p.numel() for p in model.parameters())
        started, retry, step = time.perf_counter(), None, None
        try:
            step = self.step_of(model, row)
            speed, timed = time_steps(step, batches, self.args.steps, self.device, self.args.row_s)
        except Exception as err:  # noqa: BLE001 - one failed row is recorded; the others still run
            self.results.fail("train", row.label, err)
            retry = isinstance(err, torch.cuda.OutOfMemoryError) and row.micro > 8
        wall = time.perf_counter() - started
        if retry is not None:
            # Out of the except block, so the error's frames no longer hold the step's tensors.
            model = step = None
            release(self.device)
            if retry:
                # The padded baseline at micro-batch 128 outgrows an H100: half of it there.
                half = row.micro // 2
                label = row.label.replace(f"micro {row.micro}", f"micro {half}")
                self.run(dataclasses.replace(row, label=label, micro=half))
            return
        self.speeds[row.label] = speed
        counts = {"head_rows": head_rows, "parameters": parameters, "timed": timed, "wall": wall}
        self.record(row, model, batches, speed, counts)
        del model, step
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    def step_of(self, model, row: TrainRow):
        """The row's training step: the model compiled first where the row asks, stepped by an
        engine or by the plain autocast step."""
        if row.compiled:
            compile_model(model)
        if row.engine:
            return engine_step(model, self.device, row.micro, self.args.steps + WARMUP, row.engine)
        return autocast_step(model, self.device)

    def record(self, row: TrainRow, model, batches: list, speed: float, counts: dict) -> None:
        """The row's result: speed, padding, MFU, memory, and against the padded row and 73,134."""
        import torch

        parameters, peak = counts["parameters"], self.peak
        real = sum(b.real_tokens for b in batches)
        self.results.add(
            {
                "section": "train",
                "row": row.label,
                "batches": row.kind,
                "micro_batch": row.micro,
                "row_width": row.width,
                "device": self.name,
                "loss_on": row.loss_on,
                "lm_head": "labelled positions" if row.labelled else "every position",
                "attention": model.config._attn_implementation,
                "compiled": row.compiled,
                "engine": row.engine,
                "lm_head_rows": counts["head_rows"],
                "parameters": parameters,
                "timed_steps": counts["timed"],
                "row_wall_s": round(counts["wall"], 1),
                "useful_tokens_per_s": round(speed),
                "padding_fraction": round(1 - real / sum(b.total_tokens for b in batches), 3),
                "mfu": round(estimate_mfu(parameters, speed, peak), 4) if peak else None,
                # nanoGPT's and PaLM's count, which adds attention's products at the block's context.
                "mfu_with_attention": round(
                    estimate_mfu(parameters, speed, peak, extra_flops=self.attention_flops), 4
                )
                if peak
                else None,
                "peak_memory_gb": round(torch.cuda.max_memory_allocated() / 2**30, 1)
                if self.device.type == "cuda"
                else None,
                "vs_padded": round(speed / self.speeds["padded"], 2)
                if "padded" in self.speeds
                else None,
                "vs_73134": round(speed / TODAY_BEST, 2),
            }
        )


def decode_counts(rewriter) -> Counter:
    """The decoding counts of the rewriter's model so far: its CandidateSampler's own (the graph
    plan's caches made, captures, replays, eager steps; batches too big for a static cache)."""
    return Counter(rewriter.samplers[id(rewriter.lm)].counts)


class RewriteBench:
    """A random model rewriting through our engine. One rewriter per way, kept as a job's actor or
    a replica keeps it, so an untimed first run builds (and on a GPU captures) what a timed one
    uses; its counts start at zero each run."""

    def __init__(self, args, device, lm, tokenizer, results: Results, section: str):
        from rrt.modelling.sampling import SamplingSettings

        self.args, self.device, self.lm, self.tokenizer = args, device, lm, tokenizer
        self.results, self.section, self.kept = results, section, {}
        self.settings = SamplingSettings(
            top_k=40, top_p=1.0, temperature=1.0, candidates=10, max_new_tokens=64
        )

    def engine(self, plan: str, stops: frozenset = frozenset()):
        """Our rewriter decoding by this plan; a candidate ends at one of `stops` (none: every
        candidate runs to the limit)."""
        from rrt.modelling.rewriter import Rewriter

        rewriter = Rewriter(
            "contextual",
            self.lm,
            self.tokenizer,
            BLOCK,
            self.settings,
            recipe_tokens=384,
            selection="paper",
            closed_foods=False,
            steps="every",
            device=str(self.device),
            plan=plan,
        )
        # Random weights never draw the real stops.
        rewriter._stop_ids = lambda variant, tok: set(stops)
        return rewriter

    def steps_of(self, plan: str, batch, slots: int = 0, stops: frozenset = frozenset()):
        """Rewritten steps of one rewrite of `batch` by this plan, the engine's counts and this
        run's decoding counts; with `slots`, through continuous batching, as the job's actors and
        the service run it."""
        from rrt.modelling.scheduler import rewrite_all

        rewriter = self.kept.get((plan, stops))
        if rewriter is None:
            rewriter = self.kept[(plan, stops)] = self.engine(plan, stops)
        rewriter.stats = {k: 0.0 if isinstance(v, float) else 0 for k, v in rewriter.stats.items()}
        before = decode_counts(rewriter)
        records = rewrite_all(rewriter, batch, slots) if slots else rewriter.rewrite(batch)
        steps = sum(len(r["rewrite"]["steps"]) for r in records)
        return steps, rewriter.stats, decode_counts(rewriter) - before

    def warm_up(self, plans: list[str], labels: dict, tasks: list) -> list[str]:
        """The plans whose first rewrite ran (the kernels' first launches and the allocator's
        first blocks are not timed); a failed one is recorded and dropped."""
        kept = []
        for name in plans:
            try:
                self.engine(name).rewrite(tasks)
                kept.append(name)
            except Exception as err:  # noqa: BLE001 - that row is dropped, the others still run
                self.results.fail(self.section, labels[name], err, "warm-up: ")
        return kept

    def timed(self, label: str, work, recipes_used: int, need_s: float) -> float | None:
        """Rewritten steps/s of one run of `work`, or None when skipped or failed."""
        if self.results.budget_short(self.section, label, need_s, self.args.reserve_s):
            return None
        sync(self.device)
        started = time.perf_counter()
        try:
            out = work()
            sync(self.device)
        except Exception as err:  # noqa: BLE001 - recorded, the other rows still run
            self.results.fail(self.section, label, err)
            return None
        seconds = time.perf_counter() - started
        steps, engine_counts, decoded = out if isinstance(out, tuple) else (out, None, None)
        row = {
            "section": self.section,
            "row": label,
            "recipes": recipes_used,
            "steps": steps,
            "seconds": round(seconds, 2),
            "steps_per_s": round(steps / seconds, 3),
        }
        self.results.add({**row, **where_time_went(steps, engine_counts, decoded)})
        return steps / seconds


def where_time_went(steps: int, engine_counts: dict | None, decoded: Counter | None) -> dict:
    """A rewrite row's counts: the engine's (prompts, prefill and decode, selection rules) and ms
    a rewritten step in each, and the graph plan's decoding counts."""
    from rrt.modelling.rewriter import ENGINE_COUNTS

    row = {}
    if engine_counts:
        row["engine"] = {
            k: round(v, 3) if isinstance(v, float) else v
            for k, v in engine_counts.items()
            if k in ENGINE_COUNTS
        }
        row["ms_a_step"] = ms_a_step(engine_counts, steps)
    if decoded:
        row["decode_counts"] = dict(decoded)
        # The graph plan's decode steps are what a GPU pays for, at nearly the same cost for 10
        # rows as for 80.
        decoded_steps = decoded["replays"] + decoded["eager_steps"]
        if decoded_steps:
            row["steps_decoded_a_step"] = round(decoded_steps / max(1, steps), 2)
        if decoded["capture_failures"]:
            row["note"] = "a capture failed: those steps ran eagerly"
    return row


def random_lm(config, device, ours: bool, tokenizer):
    """The rewrite rows' model: random weights, fp16 on a GPU (as rrt.modelling.models.load_exported
    serves it there), sampling kept inside the tokenizer's vocabulary over the full-size LM head."""
    from rrt.modelling.models import PaddedVocabulary

    lm = new_model(config, device, "sdpa", ours).eval()
    if device.type == "cuda":
        lm = lm.half()
    PaddedVocabulary(len(tokenizer)).mask(lm)
    return lm


def tasks_of(recipes: list[dict]) -> list:
    """Each recipe rewritten for the first constraint it breaks (vegan when none)."""
    from rrt.modelling.rewriter import RewriteTask

    return [
        RewriteTask(r["id"], broken_constraints(r)[:1] or ["vegan"], r, seed=13) for r in recipes
    ]


def rewrite_rows(
    args, device, config, tokenizer, recipes, results: Results, sections: set[str]
) -> None:
    """The generate loop against our engine by the device's decoding plan, a token check of the two
    plans, the service's batching by that plan, and the ratio against the generate loop last. With
    the llama section alone (a Llama `config`): the loop plan against the graph plan (CUDA only),
    and their ratio."""
    from rrt.modelling.sampling import decode_plan

    llama = sections == {"llama"}
    section, prefix = ("llama", "llama: ") if llama else ("rewrite", "")
    if results.budget_short(section, "every rewrite row", NEED_S["section"], args.reserve_s):
        return
    ensure_dictionary(recipes, results)
    bench = RewriteBench(
        args, device, random_lm(config, device, not llama, tokenizer), tokenizer, results, section
    )
    cuda = device.type == "cuda"
    # The llama rows: the loop plan is slow.
    tasks = tasks_of(recipes)[: args.generate_recipes if llama else args.recipes]
    # Ours is one row, the device's plan; the llama rows time the loop plan against the graph plan
    # that decode_plan picks on CUDA for the family.
    plan = decode_plan(bench.lm, device)
    labels = {name: f"{prefix}ours, {name} plan" for name in ("loop", "graph")}
    plans = [plan]
    if llama:
        plans = ["loop", "graph"] if cuda else ["loop"]
        if not cuda:
            results.skip(section, labels["graph"], "needs CUDA (the loop plan is the CPU's)")
    plans = bench.warm_up(plans, labels, tasks[:1])
    if llama:
        return llama_ratio(bench, plans, labels, tasks)
    if not plans:
        return results.skip(section, "the batching rows", f"the {plan} plan's warm-up failed")
    loop = speed = None
    if "rewrite" in sections:
        loop, speed = ours_against_loop(bench, plan, labels[plan], tasks)
    # Real recipes for the batching rows, whose step counts vary as users' do.
    serve_tasks = tasks_of(
        read_recipes(args.serve_recipes_file) if args.serve_recipes_file else recipes
    )
    serve_rows(bench, plan, labels[plan], stop_tokens(tokenizer, args.stop_share), serve_tasks)
    if loop and speed:
        results.add(
            {
                "section": "rewrite",
                "row": f"ratio {labels[plan]} / generate loop",
                "ratio": round(speed / loop, 2),
                "target": 10.0,
            }
        )


def ours_against_loop(bench: RewriteBench, plan: str, label: str, tasks: list):
    """Steps/s of the generate loop and of ours (the graph plan's first run, its captures
    included, a row of its own), then the plans' token check."""
    import torch

    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from rewrite_throughput import straightforward

    args, results = bench.args, bench.results
    loop_tasks = tasks[: args.generate_recipes]
    with torch.no_grad():
        loop = bench.timed(
            "generate loop",
            lambda: straightforward(bench.engine(plan), loop_tasks, stops=[]),
            len(loop_tasks),
            NEED_S["generate"],
        )
    if plan == "graph":
        # The first run captures a graph for each new shape; the second replays them.
        first = label + " (first run: captures)"
        bench.timed(first, lambda: bench.steps_of(plan, tasks), len(tasks), NEED_S["first run"])
    speed = bench.timed(label, lambda: bench.steps_of(plan, tasks), len(tasks), NEED_S[plan])
    if results.left() >= NEED_S["check"] + args.reserve_s:
        try:
            token_check(bench, tasks, bench.engine(plan))
        except Exception as err:  # noqa: BLE001 - recorded, the other rows still run
            results.fail("check", "decoding plans' tokens", err)
    return loop, speed


def llama_ratio(bench: RewriteBench, plans: list[str], labels: dict, tasks: list) -> None:
    """Each llama row (the graph plan's first run, its captures included, a row of its own), then
    the graph plan against the loop plan."""
    speeds = {}
    for name in plans:
        if name == "graph":
            bench.timed(
                labels[name] + " (first run: captures)",
                lambda name=name: bench.steps_of(name, tasks),
                len(tasks),
                NEED_S["first run"],
            )
        speeds[name] = bench.timed(
            labels[name], lambda name=name: bench.steps_of(name, tasks), len(tasks), NEED_S[name]
        )
    if speeds.get("loop") and speeds.get("graph"):
        bench.results.add(
            {
                "section": "llama",
                "row": f"ratio {labels['graph']} / {labels['loop']}",
                "ratio": round(speeds["graph"] / speeds["loop"], 2),
                "note": "decode_plan picks graph on CUDA for Llama family models",
            }
        )


def stop_tokens(tokenizer, share: float) -> frozenset:
    """A seeded `share` of the tokenizer's ids, each of which ends a candidate."""
    ids = np.random.default_rng(STOP_SEED).permutation(len(tokenizer))
    return frozenset(int(i) for i in ids[: round(share * len(tokenizer))])


def summed(work) -> Callable[[], tuple]:
    """`work`, its several rewrites' steps and counts added up into one."""

    def run():
        out = work()
        if not isinstance(out, list):
            return out
        return (
            sum(o[0] for o in out),
            {k: sum(o[1][k] for o in out) for k in out[0][1]},
            sum((o[2] for o in out), Counter()),
        )

    return run


def serve_rows(bench: RewriteBench, plan: str, label: str, stops: frozenset, tasks: list) -> None:
    """The service's engine in-process, by the device's decoding plan: one recipe at a time, whole
    batches of the first `--slots` (each held until its longest recipe ends) and continuous
    batching through each `--slots` count (recipes join and leave between steps, longest first)
    over the first `--serve-recipes` recipes, or as many per slot as the first count has
    (`through`); each way runs once untimed first, so every shape it meets is built (and on a GPU
    captured) before the clock starts. Candidates end at `stops`. The ratios against one at a time
    (target 5), and continuous against whole batches."""
    args, results = bench.args, bench.results
    sizes, used = [int(s) for s in args.slots.split(",")], tasks[: args.serve_recipes]
    slots = sizes[0]

    def steps_of(batch, size: int = 0):
        return bench.steps_of(plan, batch, size, stops)

    def through(size: int) -> list:
        """The recipes a slot count rewrites: as many per slot as the first count's, so every count
        runs as many waves and none is timed mostly on its tail (the last recipes, slots emptying)."""
        return tasks[: max(len(used), len(used) * size // slots)]

    # One at a time costs the most time a step: four recipes spread over the same ones stand for them.
    alone = used[:: max(1, len(used) // 4)][:4]
    ways = [
        ("1 recipe at a time", alone, lambda: [steps_of([t]) for t in alone]),
        (
            f"whole batches of {slots}",
            used,
            lambda: [steps_of(used[i : i + slots]) for i in range(0, len(used), slots)],
        ),
    ]
    ways += [
        (f"continuous, {n} slots", through(n), lambda n=n: steps_of(through(n), n)) for n in sizes
    ]
    speeds = {}
    for name, recipes, work in ways:
        if results.budget_short("serve", f"{label}, {name}", 2 * NEED_S["ours"], args.reserve_s):
            continue
        try:
            work()  # untimed: the shapes of this way
        except Exception as err:  # noqa: BLE001 - recorded, the other rows still run
            results.fail("serve", f"{label}, {name}", err, "warm-up: ")
            continue
        row = f"{label}, {name}, {len(recipes)} recipes"
        speeds[name] = bench.timed(row, summed(work), len(recipes), NEED_S["ours"])
    names = [name for name, _, _ in ways]
    pairs = [(name, names[0], 5.0) for name in names[1:]] + [(names[2], names[1], None)]
    for better, base, target in pairs:
        if speeds.get(better) and speeds.get(base):
            results.add(
                {
                    "section": "serve",
                    "row": f"engine batching: {better} vs {base} (in-process)",
                    "ratio": round(speeds[better] / speeds[base], 2),
                    "target": target,
                    "note": "Ray Serve is not on this machine; serve_throughput.py measures the service",
                }
            )


def token_check(bench: RewriteBench, tasks: list, rewriter) -> None:
    """The first step of every task sampled by both decoding plans on this device (off CUDA the graph
    plan's static step runs eagerly): how many candidates are the same, token for token. Both draw
    the same numbers in the same order; in fp32 they give the same tokens, on a GPU fp16 rounding
    may part them after a while (on random weights, whose distributions are nearly flat, soon)."""
    from rrt.modelling.prompts import step_prompt
    from rrt.modelling.sampling import CandidateSampler
    from rrt.modelling.static_decode import supports

    lm, settings, results = bench.lm, bench.settings, bench.results
    if not supports(lm):
        return results.skip(
            "check", "decoding plans' tokens", "the graph plan cannot run this model"
        )
    prompts = []
    for task in tasks:
        state = rewriter.start(task)
        ids = rewriter.prompt_ids(
            step_prompt("contextual", task.source, 0, [], task.constraints[0], state.rewritten),
            "contextual",
        )
        if ids:
            prompts.append(ids)
    pad = bench.tokenizer.pad_token_id
    out = {
        name: CandidateSampler(lm, str(bench.device), name).sample(
            prompts, list(range(len(prompts))), set(), pad, settings
        )
        for name in ("loop", "graph")
    }

    def same(first: int | None = None) -> float:
        """Share of candidates whose tokens (the first `first`) agree between the two plans."""
        pairs = [
            (x[:first], y[:first])
            for ra, rb in zip(out["graph"], out["loop"])
            for x, y in zip(ra.tokens, rb.tokens)
        ]
        return round(sum(x == y for x, y in pairs) / len(pairs), 3)

    row = {
        "section": "check",
        "row": "decoding plans' tokens",
        "candidates": len(prompts) * settings.candidates,
        "graph = loop": same(),
        "graph = loop, first 8": same(8),
    }
    note = f"the graph plan's candidates identical to the loop plan's: {row['graph = loop']}"
    if bench.device.type != "cuda":  # fp32, eager: token for token
        row["ok"] = row["graph = loop"] == 1.0
    else:
        note += " (fp16: rounding may part them)"
    results.add({**row, "note": note})


class _WordList:
    """Stand-in for the en_US dictionary where pyenchant is missing: the sample's own words.
    Both engines score with it, so the comparison holds; only the scores' meaning shifts."""

    def __init__(self, words: set[str]):
        self.words = words

    def check(self, word: str) -> bool:
        """Whether the word is known."""
        return word.lower() in self.words


def ensure_dictionary(recipes: list[dict], results: Results) -> None:
    """Swap in the sample's word list for the dictionary rule when pyenchant cannot load it."""
    import re

    from rrt.modelling import selection

    try:
        selection._english()
    except selection.DictionaryMissing as err:
        words = {
            w.lower()
            for r in recipes
            for line in [r["title"], *r["ingredients"], *r["steps"]]
            for w in re.findall(r"[^\W\d_]+", line)
        }
        selection._english = lambda: _WordList(words)
        results.add(
            {
                "section": "check",
                "row": "dictionary",
                "note": f"sample word list instead: {str(err)[:80]}",
            }
        )


def ms_a_step(counts: dict, steps: int) -> dict:
    """Milliseconds a rewritten step in each part of a round: building prompts and choosing the best
    candidate are per recipe (the host's, which batching cannot share out); the engine's prefill and
    decode are per round (what batching shares out on a GPU)."""
    parts = {"prompts": "prompting_s", "engine": "sampling_s", "selection": "selection_s"}
    return {name: round(1000 * counts[key] / max(1, steps), 2) for name, key in parts.items()}


def target_text(row: dict) -> str:
    """A ratio's target in brackets, where it has one."""
    return f" (target {row['target']})" if row.get("target") else ""


def table(results: Results) -> str:
    """The Markdown summary of every row."""
    lines = [
        (
            "| section | row | batches / recipes | useful tokens/s or steps/s | MFU | peak GPU memory | "
            "vs padded | vs 73,134 | note |"
        ),
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results.rows:
        if r["section"] == "meta":
            continue
        note = r.get("skipped") or r.get("failed") or r.get("note") or ""
        if "ratio" in r:
            note = f"ratio {r['ratio']}{target_text(r)} {note}".strip()
        if "ms_a_step" in r:
            note = (
                note + " ms a step: " + ", ".join(f"{k} {v}" for k, v in r["ms_a_step"].items())
            ).strip()
        if "steps_decoded_a_step" in r:
            note = f"{note}; decode steps a step {r['steps_decoded_a_step']}".strip("; ")
        if "max_abs_diff" in r:
            note = f"max diff {r['max_abs_diff']:.2e} ({'ok' if r['ok'] else 'NOT EQUAL'})"
        if "lm_head_rows" in r:
            note = f"{note}; LM head {r['lm_head_rows']:,} rows".strip("; ")
        speed = r.get("useful_tokens_per_s", r.get("steps_per_s", ""))
        size = f"{r['batches']} x{r['micro_batch']}" if "batches" in r else r.get("recipes", "")
        mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else ""
        if r.get("mfu_with_attention") is not None:
            mfu += f" ({100 * r['mfu_with_attention']:.1f}% with attention)"
        memory = f"{r['peak_memory_gb']} GB" if r.get("peak_memory_gb") is not None else ""
        lines.append(
            f"| {r['section']} | {r['row']} | {size} | {speed} | {mfu} | {memory} | "
            f"{r.get('vs_padded') or ''} | {r.get('vs_73134') or ''} | {note} |"
        )
    return "\n".join(lines)


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
    """The training rows' flags."""
    parser.add_argument("--micro-batch", type=int, default=64, help="rows per training step")
    parser.add_argument(
        "--steps", type=int, default=25, help="timed steps per training row (after warm-up)"
    )
    parser.add_argument(
        "--train-recipes-file",
        help="JSON-lines recipes whose Contextual texts the training rows train on (default: the "
        "bundled sample), e.g. ../shared/data/web_recipes/recipes.jsonl",
    )
    parser.add_argument(
        "--train-rows",
        default=",".join(TRAIN_ROWS),
        type=choices(TRAIN_ROWS),
        help="comma list of the plain training rows: padded (the baseline), packed, compile "
        "(packed+compile), varlen (packed+compile with train.attention: varlen), varlen-wide (the "
        "same in rows twice the block at half the micro-batch), bucketed, target",
    )
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled rows")
    parser.add_argument(
        "--pad-vocab-to",
        type=int,
        default=None,
        help="our training rows' LM head rows rounded up to this multiple, as training does "
        "(default: train.pad_vocab_to; 1: off)",
    )
    parser.add_argument(
        "--engines",
        default="torch,deepspeed",
        help="comma list of training engines timed (train.engine): torch, deepspeed",
    )
    parser.add_argument(
        "--no-deepspeed",
        action="store_true",
        help="skip the engine rows (as if DeepSpeed were absent)",
    )


def add_rewrite_arguments(parser: argparse.ArgumentParser) -> None:
    """The rewrite and batching rows' flags."""
    parser.add_argument("--recipes", type=int, default=16, help="recipes our engine rewrites")
    parser.add_argument(
        "--generate-recipes", type=int, default=4, help="recipes the generate loop rewrites"
    )
    parser.add_argument(
        "--serve-recipes",
        type=int,
        default=32,
        help="recipes the batching rows through the first --slots count rewrite (a larger count "
        "rewrites as many per slot)",
    )
    parser.add_argument(
        "--serve-recipes-file",
        help="JSON-lines recipes for the batching rows (default: the bundled sample), e.g. "
        "../shared/data/web_recipes/recipes.jsonl",
    )
    parser.add_argument(
        "--stop-share",
        type=float,
        default=STOP_SHARE,
        help="the batching rows: share of the vocabulary that ends a candidate, so steps vary in "
        "length as real ones do (0: every candidate runs to the limit)",
    )
    parser.add_argument(
        "--slots",
        default="8",
        type=counts,
        help="comma list: recipes in the continuous batch at most (serve.batch.max_batch_size), "
        "a row each; the first is also the whole batches' size",
    )


def parse_args():
    """The command line, checked."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="JSON-lines file, one line per result as it is measured")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=420,
        help="total seconds; rows that cannot fit are skipped",
    )
    parser.add_argument(
        "--reserve-s", type=float, default=10, help="seconds kept back for the rows' start-up"
    )
    parser.add_argument(
        "--row-s", type=float, default=25, help="most seconds of timed steps per row"
    )
    parser.add_argument("--model-shape", choices=sorted(SHAPES), default="gpt2-medium")
    parser.add_argument("--device", default="cuda")
    parser.add_argument(
        "--sections",
        default="train,rewrite",
        type=choices(SECTIONS),
        help="comma list, run in its order: train, rewrite (the generate loop, ours by the "
        "device's decoding plan, the plans' token check and the batching rows), serve (the "
        "batching rows alone), llama (the loop plan against the graph plan on a Llama of "
        "SmolLM2-135M's shape; CUDA for the graph plan), engine (the training engine rows, "
        "always last)",
    )
    add_training_arguments(parser)
    add_rewrite_arguments(parser)
    args = parser.parse_args()
    if not 0 <= args.stop_share < 1:
        parser.error(f"--stop-share must be at least 0 and below 1, got {args.stop_share}")
    if args.pad_vocab_to is None:
        from rrt.config import load_settings

        args.pad_vocab_to = load_settings().train.pad_vocab_to
    elif args.pad_vocab_to < 1:
        parser.error(f"--pad-vocab-to must be at least 1, got {args.pad_vocab_to}")
    for path in (args.train_recipes_file, args.serve_recipes_file):
        if path and not os.path.isfile(path):
            parser.error(f"no such recipes file: {path}")
    return args


def training_data(args, recipes: list[dict], results: Results):
    """The tokenizer and the training rows: the sample's Contextual texts, or real recipes' (their
    lengths, so their padding, are users')."""
    from rrt.modelling.models import train_tiny_tokenizer

    train_recipes = read_recipes(args.train_recipes_file) if args.train_recipes_file else recipes
    texts = contextual_texts(train_recipes)
    tokenizer = train_tiny_tokenizer(texts, 8000)
    rows = token_rows(texts, tokenizer)
    results.add(
        {
            "section": "meta",
            "row": "data",
            "train_recipes": args.train_recipes_file or "data/sample",
            "recipes": len(train_recipes),
            "texts": len(texts),
            "examples": len(rows),
            "mean_tokens": round(sum(len(ids) for ids, _ in rows) / len(rows), 1),
            "block": BLOCK,
        }
    )
    return tokenizer, rows


def run_sections(args, device, recipes: list[dict], results: Results) -> None:
    """The sections in the order named (a short GPU lease measures what it wants most first), the
    engine rows last."""
    import torch

    tokenizer, rows = training_data(args, recipes, results)
    config = model_config(args.model_shape, tokenizer)
    check_packing(device, results)
    named = args.sections.split(",")
    sections = set(named) - {"llama"}
    train = TrainRows(args, device, config, rows, tokenizer.pad_token_id, results)
    engine_rows = []
    part = {"train": "train", "engine": "train", "rewrite": "rewrite", "serve": "rewrite"}
    for name in dict.fromkeys(part.get(s, s) for s in named):
        if name == "train":
            train.run_plain(sections)
            engine_rows = train.engine_rows()
        else:
            llama = name == "llama"
            model = llama_config(args.model_shape, tokenizer) if llama else config
            with torch.no_grad():
                rewrite_rows(
                    args,
                    device,
                    model,
                    tokenizer,
                    recipes,
                    results,
                    {"llama"} if llama else sections,
                )
        release(device)
    for row in engine_rows:
        train.run(row)


def main() -> None:
    """Measure every row within the budget, then print the table and the ratios."""
    args = parse_args()
    import torch
    import transformers

    device = torch.device(args.device)
    results = Results(args.out, args.budget_s)
    results.add(
        {
            "section": "meta",
            "row": "versions",
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": sys.version.split()[0],
            "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        }
    )
    run_sections(args, device, read_recipes(), results)
    print("\n" + table(results), flush=True)
    # The ratios once more, the rewrite engine's against the generate loop last.
    for r in sorted(
        (r for r in results.rows if "ratio" in r), key=lambda r: r["section"] == "rewrite"
    ):
        print(f"{r['row']}: {r['ratio']}{target_text(r)}", flush=True)
    leaked = sorted(
        m for m in ("ray", "ftfy", "enchant", "rouge_score") if sys.modules.get(m) is not None
    )
    if leaked:
        print(f"note: imported {', '.join(leaked)}", file=sys.stderr)


if __name__ == "__main__":
    main()

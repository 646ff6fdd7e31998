"""GPU speed in one command: training variants and the rewrite engine on one GPU, one table.

    python benchmarks/gpu_speed.py --out gpu_speed.jsonl                   # one H100/H200, under 7 minutes
    python benchmarks/gpu_speed.py --sections rewrite --out rewrite.jsonl  # the rewrite rows alone, about 2 minutes
    python benchmarks/gpu_speed.py --model-shape tiny --device cpu --budget-s 150 --out /tmp/g.jsonl   # try it
    sh benchmarks/gpu_next.sh results/  # the rows RESULTS.md still lacks, one call of about 9 minutes

Needs no network and no Ray: the data are the bundled sample recipes (data/sample), or for the
training rows --train-recipes-file (real recipes: their lengths set the padding), made into
Contextual training texts with the substitution guide as the target (real steps, the real
format, block 256) and tokenized by a BPE tokenizer trained on them; the model is the
gpt2-medium shape with random weights and GPT-2's vocabulary plus ours (speed does not depend
on the weights). DeepSpeed is optional: without it (or with --no-deepspeed) the engine rows
are recorded as skipped.

Training rows, each a fresh model, fused AdamW, clipping 1.0, loss on every token:
  padded       every example padded to the block, bf16 autocast, the library's default model
  bucketed     our length-sorted token-budget batches (train.batching: tokens), sdpa, fused GELU
  packed       examples end to end in rows of the block (train.batching: packed), sdpa, fused GELU
  packed+compile   the same, torch.compile'd (train.compile); --compile-modes adds a row per mode,
                   --fused-ce one per fused linear cross-entropy kernel (cut-cross-entropy, liger)
  unpadded-head    packed+compile with the LM head's rows unpadded (GPT-2's 50,257 plus our tokens): every
               row of ours but the fused losses' pads them to train.pad_vocab_to as training does
               (jobs/train_worker.py), which the rows before 2026-11-28 did not
  varlen       packed+compile with attention by example (train.attention: varlen, flash's
               variable-length form), in rows of the block and in rows twice as wide (half the rows)
  target       packed+compile with the loss on the target (train.loss_on: target): the library's head at
               every position, and ours at the labelled positions only (rrt.modelling.labelled_head), and
               their ratio (--train-rows target; not in gpu_next.sh's first call)
  engine       jobs/train_worker.build_engine on packed batches, compiled when that row was faster:
               torch (train.engine: torch: autocast, fused AdamW) and deepspeed (ZeRO-2, bf16 weights);
               micro-batch 64 and 8 (timed after the rewrite rows; --sections engine runs them alone)
Rewrite rows (fp16, top-k 40, ten candidates, every candidate runs to max_step_tokens but in batching):
  generate loop   one generate(num_return_sequences=10) per recipe step (the paper's way)
  ours, <plan> plan   rrt.modelling.rewriter.Rewriter, decoding by the device's one plan
                  (rrt.modelling.sampling.decode_plan: graph on CUDA, the graph-captured static cache;
                  loop elsewhere, the growing cache); the graph plan's first run (its captures
                  included) is a row of its own before the timed one, and its rows carry the
                  CandidateSampler's counts (captures, replays, eager steps) and its decode steps a
                  rewritten step
  check           the first step of every recipe sampled by both plans (the graph plan runs its static
                  step eagerly off CUDA): the share of identical candidates
  batching        the service's engine in-process, by the same plan: one recipe at a time, whole batches
                  of the first --slots count (held until the longest ends) and continuous batching
                  (rrt.modelling.scheduler: --serve-recipes recipes through the first --slots count, as
                  many per slot through the others, joining and leaving between steps), each run once
                  untimed first; a candidate ends at a seeded --stop-share of the vocabulary, so steps
                  vary in length about as real ones do (a round lasts as long as its longest step);
                  rows carry where the time went, in ms a rewritten step (prompts, engine, selection
                  rules), on the graph plan the decode steps a rewritten step, and the ratios against
                  one at a time (Ray Serve's own batching is measured by serve_throughput.py)
  ratio           ours against the generate loop, printed last (target 10)
The fair library baseline, batched generate with a static cache on a trained model, is
benchmarks/decode_baseline.py (gpu_next.sh runs it when a model folder is there).
Llama rows (--sections llama): a Llama of SmolLM2-135M's shape (random weights) rewriting
  --generate-recipes recipes through our engine by the loop plan and by the graph plan, which
  decode_plan picks on CUDA for the Llama family, and their ratio (CUDA only: off CUDA the loop
  plan's row alone).
Every result is appended to --out as a JSON line when measured, so a timeout keeps what ran;
the Markdown table is printed at the end. Warm-up steps are not timed; the clock reads after
torch.cuda.synchronize().
"""

from __future__ import annotations

import argparse
import copy
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

TODAY_BEST = (
    73_134  # useful tokens/s: our engine at micro-batch 64 on an H100 (benchmarks/RESULTS.md)
)
GPT2_VOCAB = 50257
SHAPES = {
    "gpt2-medium": {"n_layer": 24, "n_head": 16, "n_embd": 1024},
    "tiny": {"n_layer": 2, "n_head": 4, "n_embd": 128},
}
BLOCK = 256  # the Contextual block
CHECK_SHAPE = {
    "vocab_size": 300,
    "n_layer": 2,
    "n_head": 4,
    "n_embd": 64,
    "n_positions": 128,
}  # the packing checks' GPT-2
WARMUP = 4
COMPILE_RESERVE_S = {
    "cuda": 100,
    "cpu": 60,
}  # time a compiled row needs at least, compilation included
# rewrite rows: the least time left to start each (keys: the generate loop, each plan, other rows)
TRAIN_ROWS = (
    "padded",
    "packed",
    "compile",
    "unpadded-head",
    "varlen",
    "varlen-wide",
    "combined",
    "bucketed",
    "target",
)
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
# The batching rows: with this share of the vocabulary ending a candidate, the random model's steps run
# about as long as a fine-tuned model's on real recipes (benchmarks/RESULTS.md); a round of several
# recipes lasts as long as its longest step, so lengths that never vary would flatter batching.
STOP_SHARE = 0.07
STOP_SEED = 13
NEED_S = {
    "section": 60,
    "generate": 45,
    "ours": 20,
    "loop": 20,
    "graph": 15,
    "first run": 10,
    "one": 25,
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


FUSED_LOSSES = {"cce": "cut-cross-entropy", "liger": "Liger's fused linear cross-entropy"}


def fused_loss(kernel: str):
    """A maintained fused linear cross-entropy, (hidden, LM head weight, labels) -> the mean
    next-token loss over the labelled positions, the full logits never written."""
    if kernel == "cce":
        from cut_cross_entropy import linear_cross_entropy

        return lambda hidden, weight, labels: linear_cross_entropy(
            hidden, weight, labels, shift=True
        )
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    def liger(hidden, weight, labels):
        # Liger takes flat rows and does not shift: position t predicts label t + 1.
        flat = hidden[:, :-1].reshape(-1, hidden.shape[-1])
        return liger_fused_linear_cross_entropy(
            flat, weight, labels[:, 1:].reshape(-1).contiguous()
        )

    return liger


def fused_ce_step(model, device, sample: dict, results: Results, kernel: str):
    """The autocast step with the loss from a fused linear cross-entropy kernel (FUSED_LOSSES);
    its loss on `sample` is checked against the model's own first."""
    import torch

    loss_kernel = fused_loss(kernel)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")

    def loss_of(inputs: dict):
        """The mean next-token loss over the labelled positions, as the model's own loss."""
        hidden = model.transformer(
            **{k: v for k, v in inputs.items() if k != "labels"}
        ).last_hidden_state
        return loss_kernel(
            hidden.to(torch.bfloat16), model.lm_head.weight.to(torch.bfloat16), inputs["labels"]
        )

    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
        ours, theirs = float(loss_of(sample)), float(model(**sample).loss)
    results.add(
        {
            "section": "check",
            "row": f"{FUSED_LOSSES[kernel]} loss = the model's loss",
            "max_abs_diff": abs(ours - theirs),
            "ok": abs(ours - theirs) < 1e-2 * max(1.0, abs(theirs)),
        }
    )

    def step(inputs: dict) -> None:
        """Forward, backward, clip, update."""
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = loss_of(inputs)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def time_steps(
    step,
    batches: list,
    steps: int,
    device,
    cap_s: float,
    wait_each: bool = False,
    warmup: int = WARMUP,
) -> tuple[float, int]:
    """Useful tokens/s over up to `steps` timed steps (fewer when `cap_s` runs out), after warm-up;
    `wait_each`: the host waits for the device after every step, as the training job's loop did
    before its losses stayed on the device (rrt.training.step_window)."""
    for index in range(warmup):
        step(batches[index % len(batches)].inputs(device))
    sync(device)
    useful, done, started = 0, 0, time.perf_counter()
    while done < steps and (done < 3 or time.perf_counter() - started < cap_s):
        batch = batches[(WARMUP + done) % len(batches)]
        step(batch.inputs(device))
        if wait_each:
            sync(device)
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


def train_rows(args, device, config, rows, pad_id, results: Results):
    """The plain training rows in priority order, each skipped when the budget cannot hold it;
    returns the engine rows (DeepSpeed) to run after the rewrite rows."""
    import torch

    cuda = device.type == "cuda"
    name = torch.cuda.get_device_name() if cuda else "cpu"
    peak = gpu_peak_flops(name) or 0.0
    attention_flops = attention_flops_per_token(config.n_layer, config.n_embd, BLOCK)
    speeds: dict[str, float] = {}

    def run(
        label: str,
        kind: str,
        micro: int,
        attention: str | None,
        fused: bool,
        compiled: bool,
        engine: str | None = None,
        mode: str = "default",
        loss: str = "model",
        width: int = BLOCK,
        loss_on: str = "all",
        pad_head: bool = True,
        waiting_too: bool = False,
    ) -> None:
        """Time one training row (a fresh model, its batches, its step) and record it; `mode` is
        torch.compile's, `loss` the model's own, a fused kernel's (FUSED_LOSSES) or `labelled` (the
        head at the labelled positions only, rrt.modelling.labelled_head), `width` the packed rows'
        tokens, `loss_on` the labels' (all | target). Our rows (`fused`) pad the LM head's rows to
        --pad-vocab-to as training does (train.pad_vocab_to), unless `pad_head` is off or a fused loss
        reads the head's weight itself (its padding rows would enter the loss's softmax). With
        `waiting_too`, the same steps are timed again with a wait for the device after each, a row
        of its own."""
        need = (
            COMPILE_RESERVE_S[device.type] * (3 if mode.startswith("max-autotune") else 1)
            if compiled
            else args.row_s
        )
        if results.left() < need + args.reserve_s:
            return results.skip("train", label, f"budget: {results.left():.0f}s left")
        if engine == "deepspeed":
            try:
                importlib.import_module("deepspeed")
            except Exception as err:  # noqa: BLE001 - any failure to load it means no engine rows
                return results.skip(
                    "train", label, f"deepspeed does not import: {str(err).splitlines()[0][:120]}"
                )
        batches = scheme_batches(
            kind,
            rows,
            micro,
            BLOCK,
            pad_id,
            width=width,
            boundaries=attention == "varlen",
            loss_on=loss_on,
        )
        model = new_model(config, device, attention, fused)
        if fused and pad_head and loss not in FUSED_LOSSES:
            pad_vocabulary(model, args.pad_vocab_to)
        head_rows = model.get_output_embeddings().weight.shape[0]
        if loss == "labelled":
            head_on_labels(model)
        parameters = sum(p.numel() for p in model.parameters())
        started, retry = time.perf_counter(), None
        try:
            if loss in FUSED_LOSSES:
                step = fused_ce_step(model, device, batches[0].inputs(device), results, loss)
            if compiled:
                # The fused loss takes the body's hidden states, so the body is what is compiled.
                target = model.transformer if loss in FUSED_LOSSES else model
                if mode == "default":
                    compile_model(target)
                else:
                    target.compile(mode=mode)
            if loss not in FUSED_LOSSES:
                step = (
                    engine_step(model, device, micro, args.steps + WARMUP, engine)
                    if engine
                    else autocast_step(model, device)
                )
            speed, timed = time_steps(step, batches, args.steps, device, args.row_s)
            if waiting_too:
                # What the training job's loop paid before its losses stayed on the device.
                waiting, _ = time_steps(
                    step, batches, args.steps, device, args.row_s, wait_each=True, warmup=0
                )
        except Exception as err:  # noqa: BLE001 - one failed row is recorded; the others still run
            results.add(
                {
                    "section": "train",
                    "row": label,
                    "failed": f"{type(err).__name__}: {str(err)[:300]}",
                }
            )
            retry = isinstance(err, torch.cuda.OutOfMemoryError) and micro > 8
        finally:
            wall = time.perf_counter() - started
        if retry is not None:
            # Out of the except block, so the error's frames no longer hold the step's tensors.
            model = step = None
            release(device)
            if retry:
                # The padded baseline at micro-batch 128 outgrows an H100 (RESULTS.md): half of it there.
                return run(
                    label.replace(f"micro {micro}", f"micro {micro // 2}"),
                    kind,
                    micro // 2,
                    attention,
                    fused,
                    compiled,
                    engine,
                    mode,
                    loss,
                    width,
                    loss_on,
                    pad_head,
                    waiting_too,
                )
            return None
        speeds[label] = speed
        real = sum(b.real_tokens for b in batches)
        results.add(
            {
                "section": "train",
                "row": label,
                "batches": kind,
                "micro_batch": micro,
                "row_width": width,
                "device": name,
                "loss_on": loss_on,
                "lm_head": "labelled positions" if loss == "labelled" else "every position",
                "attention": model.config._attn_implementation,
                "compiled": compiled,
                "engine": engine,
                "lm_head_rows": head_rows,
                "parameters": parameters,
                "timed_steps": timed,
                "row_wall_s": round(wall, 1),
                "useful_tokens_per_s": round(speed),
                "padding_fraction": round(1 - real / sum(b.total_tokens for b in batches), 3),
                "mfu": round(estimate_mfu(parameters, speed, peak), 4) if peak else None,
                # nanoGPT's and PaLM's count, which adds attention's products at the block's context.
                "mfu_with_attention": round(
                    estimate_mfu(parameters, speed, peak, extra_flops=attention_flops), 4
                )
                if peak
                else None,
                "peak_memory_gb": round(torch.cuda.max_memory_allocated() / 2**30, 1)
                if cuda
                else None,
                "vs_padded": round(speed / speeds["padded"], 2) if "padded" in speeds else None,
                "vs_73134": round(speed / TODAY_BEST, 2),
            }
        )
        if waiting_too:
            results.add(
                {
                    "section": "train",
                    "row": f"{label}, a wait for the device after every step",
                    "useful_tokens_per_s": round(waiting),
                    "ratio": round(speed / waiting, 3),
                    "note": "no wait / a wait each step (the training job's loop before)",
                }
            )
        del model, step
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        return None

    micro, wanted = args.micro_batch, set(args.train_rows.split(","))
    if "train" in args.sections.split(","):
        if "padded" in wanted:
            run("padded", "padded", micro, None, False, False)
        if "packed" in wanted:
            run("packed", "packed", micro, "sdpa", True, False)
        if not args.no_compile and "compile" in wanted:
            for mode in args.compile_modes.split(","):
                run(
                    "packed+compile" + ("" if mode == "default" else f" ({mode})"),
                    "packed",
                    micro,
                    "sdpa",
                    True,
                    True,
                    mode=mode,
                    waiting_too=mode == "default",
                )
        # Attention by example (rrt.modelling.varlen) in rows twice the block at half the rows (the same
        # tokens a step, less padding), then the fused losses, then varlen in rows of the block, then
        # the unpadded head (a control): the most promising first, so a short budget keeps them.
        if not args.no_compile and "varlen-wide" in wanted:
            run(
                f"packed {2 * BLOCK}-token rows+compile, varlen attention",
                "packed",
                max(1, micro // 2),
                "varlen",
                True,
                True,
                width=2 * BLOCK,
            )
        kernels = [k for k in args.fused_ce.split(",") if k] if not args.no_compile else []
        for kernel in kernels:
            run(
                f"packed+compile, {FUSED_LOSSES[kernel]} loss",
                "packed",
                micro,
                "sdpa",
                True,
                True,
                loss=kernel,
            )
        if kernels and "combined" in wanted:
            # Both at once: what training would run if each gains on its own.
            run(
                f"packed {2 * BLOCK}-token rows+compile, varlen attention, {FUSED_LOSSES[kernels[0]]} loss",
                "packed",
                max(1, micro // 2),
                "varlen",
                True,
                True,
                loss=kernels[0],
                width=2 * BLOCK,
            )
        if not args.no_compile and "varlen" in wanted:
            run("packed+compile, varlen attention", "packed", micro, "varlen", True, True)
        if not args.no_compile and "unpadded-head" in wanted:
            # The rows measured before the head was padded here as in training: the like-for-like figure.
            run(
                "packed+compile, LM head unpadded",
                "packed",
                micro,
                "sdpa",
                True,
                True,
                pad_head=False,
            )
        if "bucketed" in wanted:
            run("bucketed", "bucketed", micro, "sdpa", True, False)
        if not args.no_compile and "target" in wanted:
            # train.loss_on: target, the library's head at every position against ours at the labelled ones.
            every = "packed+compile, loss on the target"
            labelled = every + ", head at the labelled positions"
            run(every, "packed", micro, "sdpa", True, True, loss_on="target")
            run(labelled, "packed", micro, "sdpa", True, True, loss="labelled", loss_on="target")
            if speeds.get(every) and speeds.get(labelled):
                results.add(
                    {
                        "section": "train",
                        "row": "ratio head at the labelled positions / every position "
                        "(loss on the target)",
                        "ratio": round(speeds[labelled] / speeds[every], 2),
                        "note": "MFU counts the head at every position in both rows",
                    }
                )
    else:
        run("padded", "padded", micro, None, False, False)
    # Without the plain compiled row (--sections engine), the engines run compiled unless --no-compile.
    compiled = (
        speeds["packed+compile"] > speeds.get("packed", 0)
        if "packed+compile" in speeds
        else not args.no_compile
    )
    kinds = [
        k for k in args.engines.split(",") if k and not (k == "deepspeed" and args.no_deepspeed)
    ]
    if args.no_deepspeed:
        results.skip("train", "engine deepspeed", "--no-deepspeed")
    timed_later = []
    # Micro-batch 8 is the v100x64 profile's, where DeepSpeed's per-step host work showed most.
    for size in (micro, 8):
        for kind in kinds:
            label = f"engine {kind}, packed{'+compile' if compiled else ''}, micro {size}"
            timed_later.append(
                lambda label=label, size=size, kind=kind: run(
                    label, "packed", size, "sdpa", True, compiled, engine=kind
                )
            )
    return timed_later


def decode_counts(rewriter) -> Counter:
    """The decoding counts of the rewriter's model so far: its CandidateSampler's own (the graph
    plan's caches made, captures, replays, eager steps; batches too big for a static cache)."""
    return Counter(rewriter.samplers[id(rewriter.lm)].counts)


def rewrite_rows(
    args, device, config, tokenizer, recipes, results: Results, sections: set[str]
) -> None:
    """The generate loop against our engine by the device's decoding plan, a token check of the two
    plans, the service's batching by that plan, and the ratio against the generate loop last. With
    the llama section alone (a Llama `config`): the loop plan against the graph plan (CUDA only),
    and their ratio."""
    import torch

    from rrt.modelling.rewriter import ENGINE_COUNTS, Rewriter, RewriteTask
    from rrt.modelling.sampling import SamplingSettings, decode_plan
    from rrt.modelling.scheduler import rewrite_all

    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from rewrite_throughput import straightforward

    llama = sections == {"llama"}
    section, prefix = ("llama", "llama: ") if llama else ("rewrite", "")
    if results.left() < NEED_S["section"] + args.reserve_s:
        return results.skip(section, "every rewrite row", f"budget: {results.left():.0f}s left")
    ensure_dictionary(recipes, results)
    lm = new_model(config, device, "sdpa", not llama).eval()
    cuda = device.type == "cuda"
    if cuda:
        lm = lm.half()  # as rrt.modelling.models.load_exported serves a model on a GPU
    # Sampling stays inside the tokenizer's vocabulary, over the full-size LM head.
    from rrt.modelling.models import PaddedVocabulary

    PaddedVocabulary(len(tokenizer)).mask(lm)

    def tasks_of(rows: list[dict]) -> list[RewriteTask]:
        """Each recipe rewritten for the first constraint it breaks (vegan when none)."""
        return [
            RewriteTask(r["id"], broken_constraints(r)[:1] or ["vegan"], r, seed=13) for r in rows
        ]

    tasks = serve_tasks = tasks_of(recipes)
    if args.serve_recipes_file:  # real recipes, whose step counts vary as users' do
        serve_tasks = tasks_of(read_recipes(args.serve_recipes_file))
    tasks = tasks[
        : args.generate_recipes if llama else args.recipes
    ]  # llama: the loop plan is slow
    settings = SamplingSettings(
        top_k=40, top_p=1.0, temperature=1.0, candidates=10, max_new_tokens=64
    )
    # Ours is one row, the device's plan; the llama rows time the loop plan against the graph plan
    # that decode_plan picks on CUDA for the family.
    plan = decode_plan(lm, device)
    labels = {name: f"{prefix}ours, {name} plan" for name in ("loop", "graph")}
    plans = [plan]
    if llama:
        plans = ["loop", "graph"] if cuda else ["loop"]
        if not cuda:
            results.skip(section, labels["graph"], "needs CUDA (the loop plan is the CPU's)")

    def engine(name: str, stops: frozenset = frozenset()) -> Rewriter:
        """Our rewriter decoding by this plan; a candidate ends at one of `stops` (none: every
        candidate runs to the limit)."""
        rewriter = Rewriter(
            "contextual",
            lm,
            tokenizer,
            BLOCK,
            settings,
            recipe_tokens=384,
            selection="paper",
            closed_foods=False,
            steps="every",
            device=str(device),
            plan=name,
        )
        rewriter._stop_ids = lambda variant, tok: set(
            stops
        )  # random weights never draw the real stops
        return rewriter

    kept: dict[tuple, Rewriter] = {}

    def steps_of(name: str, batch, slots: int = 0, stops: frozenset = frozenset()):
        """Rewritten steps of one rewrite of `batch` by this plan, the engine's counts and the
        decoding counts of this run; with `slots`, through continuous batching, as the job's actors
        and the service run it. One rewriter per way, kept as a job's actor or a replica keeps it,
        so an untimed first run builds (and on a GPU captures) what a timed one uses; its counts
        start at zero each run."""
        rewriter = kept.get((name, stops))
        if rewriter is None:
            rewriter = kept[(name, stops)] = engine(name, stops)
        rewriter.stats = {k: 0.0 if isinstance(v, float) else 0 for k, v in rewriter.stats.items()}
        before = decode_counts(rewriter)
        records = rewrite_all(rewriter, batch, slots) if slots else rewriter.rewrite(batch)
        steps = sum(len(r["rewrite"]["steps"]) for r in records)
        return steps, rewriter.stats, decode_counts(rewriter) - before

    def timed(label: str, work, recipes_used: int, need_s: float) -> float | None:
        """Rewritten steps/s of one run of `work`, or None when skipped or failed."""
        if results.left() < need_s + args.reserve_s:
            results.skip(section, label, f"budget: {results.left():.0f}s left")
            return None
        sync(device)
        started = time.perf_counter()
        try:
            out = work()
            sync(device)
        except Exception as err:  # noqa: BLE001 - recorded, the other rows still run
            results.add(
                {
                    "section": section,
                    "row": label,
                    "failed": f"{type(err).__name__}: {str(err)[:300]}",
                }
            )
            return None
        seconds = time.perf_counter() - started
        steps, counts_of_engine, decoded = out if isinstance(out, tuple) else (out, None, None)
        row = {
            "section": section,
            "row": label,
            "recipes": recipes_used,
            "steps": steps,
            "seconds": round(seconds, 2),
            "steps_per_s": round(steps / seconds, 3),
        }
        if counts_of_engine:
            # Where the time went: prompts, the engine (prefill + decode), the selection rules.
            row["engine"] = {
                k: round(v, 3) if isinstance(v, float) else v
                for k, v in counts_of_engine.items()
                if k in ENGINE_COUNTS
            }
            row["ms_a_step"] = ms_a_step(counts_of_engine, steps)
        if decoded:
            row["decode_counts"] = dict(decoded)
            # The graph plan's decode steps are what a GPU pays for, at nearly the same cost for
            # 10 rows as for 80.
            decoded_steps = decoded["replays"] + decoded["eager_steps"]
            if decoded_steps:
                row["steps_decoded_a_step"] = round(decoded_steps / max(1, steps), 2)
            if decoded["capture_failures"]:
                row["note"] = "a capture failed: those steps ran eagerly"
        results.add(row)
        return steps / seconds

    # Warm-up: the kernels' first launches and the allocator's first blocks are not timed.
    for name in list(plans):
        try:
            engine(name).rewrite(tasks[:1])
        except Exception as err:  # noqa: BLE001 - that row is dropped, the others still run
            results.add(
                {
                    "section": section,
                    "row": labels[name],
                    "failed": f"warm-up: {type(err).__name__}: {str(err)[:300]}",
                }
            )
            plans.remove(name)
    if llama:
        return llama_ratio(plans, labels, timed, steps_of, tasks, results)
    if not plans:
        return results.skip(section, "the batching rows", f"the {plan} plan's warm-up failed")
    speeds: dict = {}
    loop = None
    if "rewrite" in sections:
        loop_tasks = tasks[: args.generate_recipes]
        with torch.no_grad():
            loop = timed(
                "generate loop",
                lambda: straightforward(engine(plan), loop_tasks, stops=[]),
                len(loop_tasks),
                NEED_S["generate"],
            )
        if plan == "graph":
            # The first run captures a graph for each new shape; the second replays them.
            timed(
                labels[plan] + " (first run: captures)",
                lambda: steps_of(plan, tasks),
                len(tasks),
                NEED_S["first run"],
            )
        speeds[plan] = timed(labels[plan], lambda: steps_of(plan, tasks), len(tasks), NEED_S[plan])
        if results.left() >= NEED_S["check"] + args.reserve_s:
            try:
                token_check(lm, tokenizer, settings, tasks, engine(plan), device, results)
            except Exception as err:  # noqa: BLE001 - recorded, the other rows still run
                results.add(
                    {
                        "section": "check",
                        "row": "decoding plans' tokens",
                        "failed": f"{type(err).__name__}: {str(err)[:300]}",
                    }
                )
    stops = stop_tokens(tokenizer, args.stop_share)
    serve_rows(
        args,
        plan,
        labels[plan],
        lambda name, batch, slots=0: steps_of(name, batch, slots, stops),
        timed,
        serve_tasks,
        results,
    )
    if loop and speeds.get(plan):
        results.add(
            {
                "section": "rewrite",
                "row": f"ratio {labels[plan]} / generate loop",
                "ratio": round(speeds[plan] / loop, 2),
                "target": 10.0,
            }
        )


def llama_ratio(plans, labels, timed, steps_of, tasks, results: Results) -> None:
    """Each llama row (the graph plan's first run, its captures included, a row of its own), then
    the graph plan against the loop plan."""
    speeds = {}
    for name in plans:
        if name == "graph":
            timed(
                labels[name] + " (first run: captures)",
                lambda name=name: steps_of(name, tasks),
                len(tasks),
                NEED_S["first run"],
            )
        speeds[name] = timed(
            labels[name], lambda name=name: steps_of(name, tasks), len(tasks), NEED_S[name]
        )
    if speeds.get("loop") and speeds.get("graph"):
        results.add(
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


def serve_rows(args, plan: str, label: str, steps_of, timed, tasks: list, results: Results) -> None:
    """The service's engine in-process, by the device's decoding plan: one recipe at a time, whole
    batches of the first `--slots` (each held until its longest recipe ends) and continuous
    batching through each `--slots` count (recipes join and leave between steps, longest first)
    over the first `--serve-recipes` recipes, or as many per slot as the first count has
    (`through`); each way runs once untimed first, so every shape it meets is built (and on a GPU
    captured) before the clock starts. Candidates end at `--stop-share`'s tokens. The ratios
    against one at a time (target 5), and continuous against whole batches."""
    sizes, used = [int(s) for s in args.slots.split(",")], tasks[: args.serve_recipes]
    slots = sizes[0]

    def through(size: int) -> list:
        """The recipes a slot count rewrites: as many per slot as the first count's, so every count
        runs as many waves and none is timed mostly on its tail (the last recipes, slots emptying)."""
        return tasks[: max(len(used), len(used) * size // slots)]

    # One at a time costs the most time a step: four recipes spread over the same ones stand for them.
    alone = used[:: max(1, len(used) // 4)][:4]
    ways = [
        ("1 recipe at a time", alone, lambda: [steps_of(plan, [t]) for t in alone]),
        (
            f"whole batches of {slots}",
            used,
            lambda: [steps_of(plan, used[i : i + slots]) for i in range(0, len(used), slots)],
        ),
    ]
    ways += [
        (
            f"continuous, {size} slots",
            through(size),
            lambda size=size: steps_of(plan, through(size), size),
        )
        for size in sizes
    ]
    speeds = {}
    for name, recipes, work in ways:
        if results.left() < 2 * NEED_S["ours"] + args.reserve_s:
            results.skip("serve", f"{label}, {name}", f"budget: {results.left():.0f}s left")
            continue
        try:
            work()  # untimed: the shapes of this way
        except Exception as err:  # noqa: BLE001 - recorded, the other rows still run
            results.add(
                {
                    "section": "serve",
                    "row": f"{label}, {name}",
                    "failed": f"warm-up: {type(err).__name__}: {str(err)[:300]}",
                }
            )
            continue

        def summed(work=work):
            out = work()
            if isinstance(out, list):  # several rewrites: their steps and counts added up
                return (
                    sum(o[0] for o in out),
                    {k: sum(o[1][k] for o in out) for k in out[0][1]},
                    sum((o[2] for o in out), Counter()),
                )
            return out

        speeds[name] = timed(
            f"{label}, {name}, {len(recipes)} recipes", summed, len(recipes), NEED_S["ours"]
        )
    names = [name for name, _, _ in ways]
    pairs = (
        [(names[1], names[0], 5.0)]
        + [(name, names[0], 5.0) for name in names[2:]]
        + [(names[2], names[1], None)]
    )
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


def token_check(lm, tokenizer, settings, tasks, rewriter, device, results: Results) -> None:
    """The first step of every task sampled by both decoding plans on this device (off CUDA the graph
    plan's static step runs eagerly): how many candidates are the same, token for token. Both draw
    the same numbers in the same order; in fp32 they give the same tokens, on a GPU fp16 rounding
    may part them after a while (on random weights, whose distributions are nearly flat, soon)."""
    from rrt.modelling.prompts import step_prompt
    from rrt.modelling.sampling import CandidateSampler
    from rrt.modelling.static_decode import supports

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
    out = {
        name: CandidateSampler(lm, str(device), name).sample(
            prompts, list(range(len(prompts))), set(), tokenizer.pad_token_id, settings
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
    if device.type != "cuda":  # fp32, eager: token for token
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


def main() -> None:
    """Measure every row within the budget, then print the table."""
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
    parser.add_argument("--micro-batch", type=int, default=64, help="rows per training step")
    parser.add_argument(
        "--steps", type=int, default=25, help="timed steps per training row (after warm-up)"
    )
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
        help="JSON-lines recipes for the batching rows (default: the "
        "bundled sample), e.g. ../shared/data/web_recipes/recipes.jsonl",
    )
    parser.add_argument(
        "--train-recipes-file",
        help="JSON-lines recipes whose Contextual texts the training rows "
        "train on (default: the bundled sample), e.g. "
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
    parser.add_argument(
        "--train-rows",
        default=",".join(TRAIN_ROWS),
        type=choices(TRAIN_ROWS),
        help="comma list of the plain training rows: padded (the baseline), packed, compile "
        "(a packed+compile row per --compile-modes), unpadded-head (packed+compile with "
        "the LM head's rows unpadded, as the rows before 2026-11-28), varlen (packed+compile with "
        "train.attention: varlen), varlen-wide (the same in rows twice the block at half "
        "the micro-batch), combined (varlen-wide with the first --fused-ce loss), bucketed",
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
        "--compile-modes",
        default="default",
        help="comma list of torch.compile modes, a packed+compile row each "
        "(e.g. default,max-autotune-no-cudagraphs)",
    )
    parser.add_argument(
        "--fused-ce",
        nargs="?",
        const="cce",
        default="",
        type=choices(FUSED_LOSSES),
        help="comma list of fused linear cross-entropy kernels, a packed+compile row each whose "
        "loss is the kernel's: cce (cut-cross-entropy, the default of a bare --fused-ce), "
        "liger (liger-kernel); carry_packages.sh copies both packages",
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
    import torch
    import transformers

    from rrt.modelling.models import train_tiny_tokenizer

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
    recipes = read_recipes()
    # The training texts: the sample's, or real recipes' (their lengths, so their padding, are users').
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
    config = model_config(args.model_shape, tokenizer)
    sections = set(args.sections.split(",")) - {"llama"}
    check_packing(device, results)
    engine_rows = []
    # The sections run in the order named (a short GPU lease measures what it wants most first).
    part = {
        "train": "train",
        "engine": "train",
        "rewrite": "rewrite",
        "serve": "rewrite",
        "llama": "llama",
    }
    for name in dict.fromkeys(part[s] for s in args.sections.split(",")):
        if name == "train":
            engine_rows = train_rows(args, device, config, rows, tokenizer.pad_token_id, results)
        elif name == "llama":
            with torch.no_grad():
                rewrite_rows(
                    args,
                    device,
                    llama_config(args.model_shape, tokenizer),
                    tokenizer,
                    recipes,
                    results,
                    {"llama"},
                )
        else:
            with torch.no_grad():
                rewrite_rows(args, device, config, tokenizer, recipes, results, sections)
        release(device)
    for row in engine_rows:
        row()
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

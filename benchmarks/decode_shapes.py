"""Static-decode cache shapes under continuous batching: how many caches a rewrite run makes
(on a GPU each brings its CUDA graph captures, and one made past GPU_DECODERS evicts another,
whose shapes are captured again when they come back), with a kept cache serving only the columns
it was made for (reuse 1.0, the baseline) against also serving a batch that needs fewer, when it
holds at most `rrt.modelling.static_decode.COLUMN_REUSE` times as many (ours).

    python benchmarks/decode_shapes.py --recipes-file ../shared/data/web_recipes/recipes.jsonl --block 1024

A random-weight GPT-2 (gpu_speed.py's tiny shape, a BPE trained on the recipes' Contextual
texts) rewrites the recipes with the Contextual system at --block: ten candidates of 64 tokens,
every candidate run to the limit, through continuous batching of --slots recipes, by the CUDA
decoding plan (graph: the static cache). On a CPU its steps run eagerly and nothing is captured,
so the caches made and evicted are those of a GPU (where each cache made brings a capture per
row bucket it runs), and the seconds are not. With --device cuda (and --model-shape gpt2-medium)
the model is in fp16 on the GPU and the captures are real, their time counted with the rest.
Each way starts without kept caches and keeps as many as a GPU does. The ways draw the same
numbers; attention over masked columns adds nothing but may round differently, which moves a
draw where a random model's next-token distribution is nearly flat, so each line counts the
rewritten steps and sampled candidates unlike the baseline's (and, with --dynamic, unlike the
CPU plan's). Prints a JSON line per way: caches made, graph captures, evictions, the columns
held against those needed, steps/s; and the ratio of caches made last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from gpu_speed import (
    SHAPES,
    broken_constraints,
    contextual_texts,
    ensure_dictionary,
    model_config,
    read_recipes,
)

from rrt.modelling import static_decode

COUNTS = ("decoders", "captures", "evictions", "batches", "columns_needed", "columns_held")


class Printed:
    """What ensure_dictionary reports to, printed as a JSON line."""

    def add(self, row: dict) -> None:
        """Print one result row."""
        print(json.dumps(row), flush=True)


def parse_reuse(value: str) -> list[float]:
    """A comma list of reuse factors, each at least 1."""
    try:
        factors = [float(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma list of numbers: {value}") from None
    if not factors or min(factors) < 1:
        raise argparse.ArgumentTypeError("each reuse factor is at least 1")
    return factors


def differing(records: list[dict], others: list[dict]) -> dict:
    """Rewritten steps and sampled candidates of `records` unlike the same recipe's in `others`."""
    by_id = {r["id"]: r for r in others}
    steps = candidates = 0
    for r in records:
        other = by_id[r["id"]]
        steps += sum(a != b for a, b in zip(r["rewrite"]["steps"], other["rewrite"]["steps"]))
        for mine, theirs in zip(r["steps"], other["steps"]):
            candidates += sum(
                a["text"] != b["text"]
                for a, b in zip(mine.get("candidates", []), theirs.get("candidates", []))
            )
    return {"steps": steps, "candidates": candidates}


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's flags."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes-file", help="JSON-lines recipes (default: the bundled sample)")
    parser.add_argument("--recipes", type=int, default=64, help="recipes rewritten")
    parser.add_argument(
        "--block", type=int, default=1024, help="the model's block: prompts fill it less 64 tokens"
    )
    parser.add_argument("--slots", type=int, default=8, help="recipes in the continuous batch")
    parser.add_argument(
        "--reuse",
        type=parse_reuse,
        default=[1.0, static_decode.COLUMN_REUSE],
        help="comma list of reuse factors, a way each; the first is the baseline "
        f"(default: 1.0,{static_decode.COLUMN_REUSE})",
    )
    parser.add_argument(
        "--dynamic",
        action="store_true",
        help="also rewrite by the CPU's plan (the plain loop on a growing cache), whose records "
        "each way's are compared with too",
    )
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="cuda: the model in fp16 and real CUDA graph captures, timed with the rest",
    )
    parser.add_argument(
        "--model-shape",
        choices=sorted(SHAPES),
        default="tiny",
        help="the random GPT-2's layers (gpt2-medium on a GPU)",
    )
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    return parser


def random_model(args, recipes: list[dict]):
    """A random-weight GPT-2 of --model-shape and a BPE trained on the recipes' Contextual texts,
    fp16 on a GPU as a model is served there, sampling kept inside the tokenizer's vocabulary."""
    import torch
    from transformers import GPT2LMHeadModel

    from rrt.modelling.models import PaddedVocabulary, train_tiny_tokenizer

    tokenizer = train_tiny_tokenizer(contextual_texts(recipes), 8000)
    torch.manual_seed(0)
    with torch.device(args.device):
        lm = GPT2LMHeadModel(model_config(args.model_shape, tokenizer)).eval()
    if args.device == "cuda":
        lm = lm.half()
    PaddedVocabulary(len(tokenizer)).mask(lm)
    return lm, tokenizer


def rewrite_once(args, lm, tokenizer, tasks: list, reuse: float, plan: str = "graph") -> dict:
    """One rewrite of every task with this reuse factor: its counts, records and seconds."""
    import torch

    from rrt.modelling.rewriter import Rewriter
    from rrt.modelling.sampling import SamplingSettings
    from rrt.modelling.scheduler import rewrite_all

    static_decode.COLUMN_REUSE = reuse
    settings = SamplingSettings(
        top_k=40, top_p=1.0, temperature=1.0, candidates=10, max_new_tokens=64
    )
    rewriter = Rewriter(
        "contextual",
        lm,
        tokenizer,
        args.block,
        settings,
        recipe_tokens=384,
        selection="paper",
        closed_foods=False,
        steps="every",
        device=args.device,
        plan=plan,  # the CUDA plan on a CPU too
    )
    # Random weights: every candidate runs to the limit.
    rewriter._stop_ids = lambda variant, tok: set()
    started = time.perf_counter()
    with torch.no_grad():
        records = rewrite_all(rewriter, tasks, args.slots)
    seconds = time.perf_counter() - started
    made = rewriter.samplers[id(lm)].counts
    counts = {k: made[k] for k in COUNTS}
    steps = sum(len(r["rewrite"]["steps"]) for r in records)
    return {
        "reuse": reuse,
        **counts,
        "rounds": rewriter.stats["rounds"],
        "column_overhead": round(counts["columns_held"] / max(1, counts["columns_needed"]) - 1, 4),
        "steps": steps,
        "seconds": round(seconds, 2),
        "steps_per_s": round(steps / seconds, 3),
        "records": records,
    }


def main() -> None:
    """Rewrite the same recipes once per reuse factor; print a JSON line each and the ratio of captures last."""
    parser = build_parser()
    args = parser.parse_args()
    if args.recipes_file and not os.path.isfile(args.recipes_file):
        parser.error(f"no such recipes file: {args.recipes_file}")
    import torch

    from rrt.modelling.rewriter import RewriteTask

    torch.set_num_threads(args.threads)
    recipes = read_recipes(args.recipes_file)[: args.recipes]
    ensure_dictionary(recipes, Printed())
    lm, tokenizer = random_model(args, recipes)
    tasks = [
        RewriteTask(r["id"], broken_constraints(r)[:1] or ["vegan"], r, seed=13) for r in recipes
    ]
    if args.device != "cuda":
        static_decode.CPU_DECODERS = static_decode.GPU_DECODERS  # as many caches kept as on a GPU
    results = [rewrite_once(args, lm, tokenizer, tasks, reuse) for reuse in args.reuse]
    references = {"baseline": results[0]["records"]}
    if args.dynamic:
        references["loop"] = rewrite_once(args, lm, tokenizer, tasks, 1.0, "loop")["records"]
    for result in results:
        records = result.pop("records")
        # The ways draw the same numbers; a step differs where float rounding moved a draw.
        sampled = sum(len(e.get("candidates", [])) for r in records for e in r["steps"])
        unlike = {f"unlike_{name}": differing(records, other) for name, other in references.items()}
        print(
            json.dumps(
                {
                    **result,
                    "candidates": sampled,
                    **unlike,
                    "recipes": len(tasks),
                    "block": args.block,
                    "slots": args.slots,
                    "device": args.device,
                    "model_shape": args.model_shape,
                    "recipes_file": args.recipes_file or "data/sample",
                }
            ),
            flush=True,
        )
    base, ours = results[0], results[-1]
    ratio = base["decoders"] / max(1, ours["decoders"])
    print(f"ratio caches made, reuse {base['reuse']} / {ours['reuse']}: {ratio:.2f}")


if __name__ == "__main__":
    main()

"""Rewriting throughput: our batched engine against the straightforward loop, same everything.

    python benchmarks/rewrite_throughput.py --model out/demo/grounded_rule/model --data out/demo/prepared
    python benchmarks/rewrite_throughput.py --model M --data D --recipes 32 --use-gpu

Both rewrite the same recipes with the same model, prompts, sampling settings (top-k 40,
ten candidates per step) and selection rules. The straightforward loop is the paper's way:
one `generate(num_return_sequences=10)` call per recipe step, recipe after recipe (HF copies
the prompt ten times before its prefill). Ours prefills each prompt once and shares its
cache across the ten candidates, drops each candidate from the batch when its step ends,
and advances many recipes at once, decoding by the plan of the device (the plain loop on a CPU,
the graph-captured static cache on CUDA). The fair library baseline (batched `generate` with a
static cache) is benchmarks/decode_baseline.py.
Prints rewritten steps per second of each, the ratio ours / straightforward last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# The rewriter `make demo` trains.
DEMO_MODEL = os.path.join(ROOT, "out", "demo", "grounded_rule", "model")

from rrt.config import load_settings
from rrt.modelling.loading import build_rewriter, load_model
from rrt.modelling.prompts import step_prompt
from rrt.modelling.rewriter import Rewriter, RewriteTask, step_context
from rrt.modelling.selection import select_best


def load_tasks(data: str, count: int) -> list[RewriteTask]:
    """The first `count` test-split sources of a prepared folder, with their pair constraint."""
    import pyarrow.parquet as pq

    pairs = pq.read_table(
        os.path.join(data, "recipe_pairs"), columns=["source_id", "constraint", "split"]
    ).to_pylist()
    keys = sorted({(p["source_id"], p["constraint"]) for p in pairs})[:count]
    recipes = {
        r["id"]: r
        for r in pq.read_table(
            os.path.join(data, "recipes"), columns=["id", "title", "ingredients", "steps"]
        ).to_pylist()
    }
    return [
        RewriteTask(
            sid, [c], {k: recipes[sid][k] for k in ("title", "ingredients", "steps")}, seed=13
        )
        for sid, c in keys
        if sid in recipes
    ]


def input_arguments(parser: argparse.ArgumentParser, recipes: int, model: str) -> None:
    """The flags `load_inputs` reads: --model (default `model`), --data, --recipes, --threads."""
    parser.add_argument(
        "--model",
        default=model,
        help="a trained step-by-step model folder (default: the make demo one)",
    )
    parser.add_argument(
        "--data",
        default=os.path.join(ROOT, "out", "demo", "prepared"),
        help="prepare_data output folder whose test recipes are rewritten",
    )
    parser.add_argument("--recipes", type=int, default=recipes, help="recipes to rewrite")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (CPU)")


def load_inputs(args):
    """The model (`args.model` on `args.device`, `args.threads` torch threads) and the first
    `args.recipes` test recipes of `args.data`; a one-line exit when either is missing."""
    for path in (args.model, args.data):
        if not os.path.exists(path):
            raise SystemExit(f"{path} not found: run `make demo` first or pass --model/--data")
    import torch

    torch.set_num_threads(args.threads)
    model = load_model(args.model, args.device)
    if model.system is None:
        raise SystemExit(
            f"{args.model} holds a {model.meta.get('variant')} model, which does not rewrite recipes"
        )
    return model, load_tasks(args.data, args.recipes)


def straightforward(
    rewriter: Rewriter, tasks: list[RewriteTask], stops: list[int] | None = None
) -> int:
    """The paper's loop: per recipe, per step, one generate() call with ten return sequences
    (ending at the variant's stop tokens, or `stops` when given; [] runs every step to the end),
    never writing the tokens the engine bans."""
    import torch

    lm, tok, settings = rewriter.lm, rewriter.tokenizer, rewriter.settings
    if stops is None:
        stops = sorted(rewriter._stop_ids(rewriter.variant, tok))
    steps = 0
    for task in tasks:
        state = rewriter.start(task)
        while not state.finished:
            text = step_prompt(
                rewriter.variant,
                task.source,
                state.step,
                state.done,
                task.constraints[0],
                state.rewritten,
            )
            ids = rewriter.prompt_ids(text, rewriter.variant)
            if ids is None:
                state.done.append(state.guide_steps[state.step])
            else:
                torch.manual_seed(task.seed + state.step)
                with torch.no_grad():
                    out = lm.generate(
                        torch.tensor([ids], device=rewriter.device),
                        attention_mask=torch.ones(
                            (1, len(ids)), dtype=torch.long, device=rewriter.device
                        ),
                        do_sample=True,
                        top_k=settings.top_k,
                        top_p=settings.top_p,
                        temperature=settings.temperature,
                        num_return_sequences=settings.candidates,
                        max_new_tokens=settings.max_new_tokens,
                        eos_token_id=stops or None,
                        pad_token_id=tok.pad_token_id,
                        suppress_tokens=list(rewriter._banned_ids(tok)) or None,
                    )
                texts = []
                for row in out[:, len(ids) :].tolist():
                    cut = next((i for i, t in enumerate(row) if t in stops), len(row))
                    texts.append(rewriter.decode(row[:cut]))
                chosen, _ = select_best(texts, step_context(state, state.step))
                state.done.append(texts[chosen])
            state.step += 1
            steps += 1
    return steps


def main() -> None:
    """Time both ways on the same recipes; print one JSON line each and the ratio last."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    input_arguments(parser, 24, DEMO_MODEL)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument(
        "--use-gpu", action="store_true", help="both engines on the GPU (--device cuda)"
    )
    args = parser.parse_args()
    if args.use_gpu:
        args.device = "cuda"
    model, tasks = load_inputs(args)
    # The rewrite job's decoding (the paper's: top-k 40, ten candidates).
    settings = load_settings().rewrite
    rewriter = build_rewriter(model, settings, settings.candidates, False)
    results = {}
    for name in ("straightforward", "ours"):
        started = time.perf_counter()
        if name == "straightforward":
            steps = straightforward(rewriter, tasks)
        else:
            steps = sum(len(r["rewrite"]["steps"]) for r in rewriter.rewrite(tasks))
        seconds = time.perf_counter() - started
        results[name] = steps / seconds
        print(
            json.dumps(
                {
                    "engine": name,
                    "recipes": len(tasks),
                    "steps": steps,
                    "seconds": round(seconds, 2),
                    "steps_per_s": round(steps / seconds, 3),
                    "device": args.device,
                    "plan": rewriter.plan,
                }
            ),
            flush=True,
        )
    print(
        json.dumps(
            {
                "ratio_ours_over_straightforward": round(
                    results["ours"] / results["straightforward"], 2
                ),
                "target": 3.0,
            }
        )
    )


if __name__ == "__main__":
    main()

"""Our decoding against the fair library baseline, on the same prompts: does the plan pay?

    python benchmarks/decode_baseline.py --model out/demo/grounded_rule/model --data out/demo/prepared
    python benchmarks/decode_baseline.py --model M --data D --recipes 32 --device cuda [--constrained]

Both rewrite the same recipes with one Rewriter: the same prompts, rounds (every recipe of the
batch advances one step per round), sampling settings (the rewrite block's top-k, top-p,
temperature and candidates per step), stop tokens, banned padding and selection rules. Only
the sampling of a round's prompts differs:

- ours: the decoding plan of this device (rrt.modelling.sampling.decode_plan: the plain loop on a
  CPU, the graph-captured static cache on CUDA);
- the baseline: Hugging Face `generate` on the round's prompts batched together (left-padded),
  `num_return_sequences` candidates each, a static cache (`cache_implementation="static"`, one
  `max_cache_len` for every call, so its shapes do not change), which transformers compiles with
  `torch.compile` on CUDA and leaves eager on a CPU (where compiling a decode step did not pay:
  benchmarks/RESULTS.md); with --constrained, the guard as a `LogitsProcessor` that masks the
  top-k tokens the guard refuses (a refused word cannot be taken back there, and the batch's
  candidates share one seed, where ours draw from per-candidate streams).

Each runs once untimed (compilation, captures), then both take turns `--runs` times. Prints one
JSON line per run and the ratio ours / baseline (steps/s, best run of each) last.
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

from rewrite_throughput import DEMO_MODEL, input_arguments, load_inputs

from rrt.config import load_settings
from rrt.modelling.loading import build_rewriter
from rrt.modelling.sampling import Sampled


class GuardProcessor:
    """The violation guard as a LogitsProcessor: each guarded row's top-k tokens that the guard
    refuses after the row's text so far are masked (all of them refused: the row is left as is)."""

    def __init__(self, guards: list, prompt_width: int, top_k: int):
        self.guards, self.width, self.top_k = guards, prompt_width, top_k
        self.texts = [""] * len(guards)

    def __call__(self, input_ids, scores):
        """Scores with the refused tokens at -inf (called once per new token)."""
        import torch

        if input_ids.shape[1] > self.width:  # the last token drawn joins its row's text
            for row, token in enumerate(input_ids[:, -1].tolist()):
                if self.guards[row] is not None:
                    self.texts[row] += self.guards[row].piece(token)
        top = torch.topk(scores, min(self.top_k, scores.shape[-1]), dim=-1).indices.tolist()
        for row, guard in enumerate(self.guards):
            if guard is None:
                continue
            refused = [t for t in top[row] if guard.check(self.texts[row], t) != "ok"]
            if refused and len(refused) < len(top[row]):
                scores[row, refused] = float("-inf")
        return scores


def library_sample(rewriter, block: int, device: str):
    """A replacement for the rewriter's sampling: every chunk of prompts through `generate`."""
    import torch
    from transformers import LogitsProcessorList

    def sample(jobs, settings, lm=None, variant=None, tokenizer=None):
        lm, tok = lm or rewriter.lm, tokenizer or rewriter.tokenizer
        stops = sorted(rewriter._stop_ids(variant or rewriter.variant, tok))
        banned = list(rewriter._banned_ids(tok))
        n, out = settings.candidates, []
        started = time.perf_counter()
        for lo in range(0, len(jobs), 64):
            chunk = jobs[lo : lo + 64]
            width = max(len(job[0]) for job in chunk)
            ids = torch.full((len(chunk), width), tok.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, job in enumerate(chunk):
                ids[row, width - len(job[0]) :] = torch.as_tensor(job[0])
                mask[row, width - len(job[0]) :] = 1
            guards = [job[2] for job in chunk for _ in range(n)]
            processors = (
                LogitsProcessorList([GuardProcessor(guards, width, settings.top_k)])
                if any(guards)
                else None
            )
            torch.manual_seed(chunk[0][1] % 2**32)
            with torch.no_grad():
                generated = lm.generate(
                    ids.to(device),
                    attention_mask=mask.to(device),
                    do_sample=True,
                    top_k=settings.top_k,
                    top_p=settings.top_p,
                    temperature=settings.temperature,
                    num_return_sequences=n,
                    max_new_tokens=settings.max_new_tokens,
                    eos_token_id=stops,
                    pad_token_id=tok.pad_token_id,
                    suppress_tokens=banned or None,
                    cache_implementation="static",
                    max_cache_len=block,
                    logits_processor=processors,
                )
            rows = generated[:, width:].tolist()
            for p in range(len(chunk)):
                result = Sampled([], [])
                for row in rows[p * n : p * n + n]:
                    cut = next((i for i, t in enumerate(row) if t in stops), None)
                    result.tokens.append(row[:cut] if cut is not None else row)
                    result.ended.append("stop" if cut is not None else "length")
                out.append(result)
        rewriter.stats["sampling_s"] += time.perf_counter() - started
        return out

    return sample


def main() -> None:
    """Time ours and the baseline on the same recipes; one JSON line per run, the ratio last."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    input_arguments(parser, 16, DEMO_MODEL)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--constrained", action="store_true", help="both under the guard")
    parser.add_argument("--runs", type=int, default=2, help="timed runs of each, in turns")
    args = parser.parse_args()
    model, tasks = load_inputs(args)
    settings = load_settings().rewrite
    engines = {}
    for name in ("ours", "baseline"):
        engines[name] = build_rewriter(model, settings, settings.candidates, args.constrained)
    # Prompts are fitted to leave max_step_tokens free in the block: one cache length fits all.
    engines["baseline"]._sample = library_sample(engines["baseline"], model.block_size, args.device)
    for rewriter in engines.values():
        rewriter.rewrite(tasks[:2])  # untimed: compilation, captures, first allocations
    rates: dict[str, list[float]] = {name: [] for name in engines}
    # In turns, so a slow moment of a shared machine falls on both alike.
    for run in range(args.runs):
        for name, rewriter in engines.items():
            started = time.perf_counter()
            records = rewriter.rewrite(tasks)
            seconds = time.perf_counter() - started
            steps = sum(len(r["rewrite"]["steps"]) for r in records)
            rates[name].append(steps / seconds)
            row = {
                "engine": name,
                "run": run + 1,
                "recipes": len(tasks),
                "steps": steps,
                "seconds": round(seconds, 2),
                "steps_per_s": round(steps / seconds, 3),
                "device": args.device,
                "plan": engines["ours"].plan if name == "ours" else "generate, static cache",
                "constrained": args.constrained,
            }
            print(json.dumps(row), flush=True)
    best = {name: max(values) for name, values in rates.items()}
    ratio = round(best["ours"] / best["baseline"], 2)
    print(json.dumps({"ratio_ours_over_baseline": ratio, "keep_at": 1.3}))


if __name__ == "__main__":
    main()

"""Batched best-of-N sampling with a shared prefill: the rewriter's decoding engine.

Every prompt is run through the model once; its key-value cache then serves the N candidates,
which sample token by token (top-k, top-p, temperature) until a stop token. Each candidate draws
# torch and transformers are imported where used: jobs/rewrite.py imports this module (through the
# rewriter), and its --help and driver start without them.
from its own seeded stream, so a recipe's samples do not depend on which other recipes share its
batch.

How the candidates are decoded is one plan per device, resolved from the device and the model
(`decode_plan`), never a setting:

- `graph` (CUDA, GPT-2 and Llama family models): rrt.modelling.static_decode, a preallocated cache
  and a decode step of fixed shapes, captured as a CUDA graph; tokens drawn on the device.
- `loop` (everywhere else): the model's forward on a growing cache, tokens drawn on the host; a
  candidate that stops leaves the batch at once.

Both draw the same numbers in the same order, so they give the same tokens (on a GPU up to float
rounding). With a `guard` (rrt.modelling.constrained.ViolationGuard) a sampled token that would
complete a violating term is refused and the row resamples, or takes the word back
(rrt.modelling.guarded_row), so adherence holds by construction.
"""

from __future__ import annotations

import inspect
from collections import Counter
from dataclasses import dataclass

from rrt.modelling.drawing import (
    Sampled,
    SamplingSettings,
    candidate_streams,
    draw,
    filtered_probs,
)
from rrt.modelling.guarded_row import TAKEN_BACK, finish_guarded, guarded_rows
from rrt.modelling.static_decode import NoRoom, StaticDecoding, supports

PLANS = ("graph", "loop")


def decode_plan(lm, device) -> str:
    """The decoding plan for this model on this device: graph on CUDA for the model families the
    static step runs, else loop."""
    return "graph" if str(device).startswith("cuda") and supports(lm) else "loop"


def cache_argument(lm) -> str:
    """The forward argument that takes the key-value cache (`cache` from transformers 5.2x on)."""
    return "cache" if "cache" in inspect.signature(lm.forward).parameters else "past_key_values"


@dataclass
class Prefilled:
    """A batch of prompts after their one forward pass: the cache (prompts left-padded to end in one
    column), each prompt's last logits, the cache's valid columns and the prompts' positions."""

    cache: object
    logits: object  # [prompts, vocab]
    mask: object  # [prompts, cached columns]
    positions: object  # [prompts, prompt columns]


def prefill(lm, prompts: list[list[int]], pad_id: int, device: str = "cpu") -> Prefilled:
    """One forward pass over every prompt, left-padded so each ends in the last column."""
    import torch
    from transformers import DynamicCache

    count, width = len(prompts), max(len(p) for p in prompts)
    input_ids = torch.full((count, width), pad_id, dtype=torch.long)
    mask = torch.zeros((count, width), dtype=torch.long)
    positions = torch.zeros((count, width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt) :] = torch.as_tensor(prompt)
        mask[row, width - len(prompt) :] = 1
        positions[row, width - len(prompt) :] = torch.arange(len(prompt))
    input_ids, mask, positions = input_ids.to(device), mask.to(device), positions.to(device)
    cache = DynamicCache()
    with torch.no_grad():
        # Only the last position's logits are needed; the LM head over the whole prompt is not.
        out = lm(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{cache_argument(lm): cache},
        )
    return Prefilled(cache, out.logits[:, -1, :], mask, positions)


class CandidateSampler:
    """N candidates for each prompt of a batch, decoded by one model on one device as its plan says
    (`decode_plan`; a test may name the other plan to compare the two). It keeps what the plan
    keeps between batches (the static caches and their graphs) and counts its work in `counts`."""

    def __init__(self, lm, device: str = "cpu", plan: str | None = None):
        plan = plan or decode_plan(lm, device)
        if plan not in PLANS:
            raise ValueError(f"unknown decoding plan {plan!r}; one of {', '.join(PLANS)}")
        if plan == "graph" and not supports(lm):
            raise ValueError(f"the graph plan needs a GPT-2 or Llama family model, not {lm!r:.40}")
        self.lm, self.device, self.plan = lm, device, plan
        self.counts: Counter = Counter()
        self.static = StaticDecoding(lm, device, self.counts) if plan == "graph" else None

    def sample(
        self,
        prompts: list[list[int]],
        seeds: list[int],
        stop_ids: set[int],
        pad_id: int,
        settings: SamplingSettings,
        guards: list | None = None,
    ) -> list[Sampled]:
        """N candidates for each prompt, from one prefill per prompt; each stops at a stop token.
        `guards` holds one ViolationGuard (or None) per prompt for constrained decoding."""
        import torch

        n, count = settings.candidates, len(prompts)
        guards = guards or [None] * count
        done = prefill(self.lm, prompts, pad_id, self.device)
        streams = candidate_streams(seeds, n)
        results = [Sampled([[] for _ in range(n)], ["length"] * n) for _ in range(count)]
        last_tokens = [p[-1] for p in prompts]
        if self.static is not None:
            try:
                with torch.no_grad():
                    self.static.decode(
                        done.cache,
                        done.logits,
                        done.mask,
                        done.positions,
                        streams,
                        results,
                        stop_ids,
                        settings,
                        guards,
                        last_tokens,
                    )
                return results
            except NoRoom:
                self.counts["no_room"] += 1  # this batch decodes the plain way below
        rows = guarded_rows(
            guards, n, last_tokens, done.mask.shape[1] - 1, done.positions[:, -1] + 1
        )
        _decode_loop(self.lm, done, streams, results, stop_ids, settings, rows, self.device)
        return results


def sample_candidates(
    lm,
    prompts: list[list[int]],
    seeds: list[int],
    stop_ids: set[int],
    pad_id: int,
    settings: SamplingSettings,
    guards: list | None = None,
    device: str = "cpu",
) -> list[Sampled]:
    """N candidates for each prompt by a one-off CandidateSampler of the device's plan (one that
    decodes many batches keeps a CandidateSampler, and its caches, instead)."""
    return CandidateSampler(lm, device).sample(prompts, seeds, stop_ids, pad_id, settings, guards)


class _Growing:
    """The plain loop's state after the shared prefill: one batch row per live candidate."""

    def __init__(self, lm, done: Prefilled, n: int, device: str):
        done.cache.batch_repeat_interleave(n)
        self.lm, self.cache, self.cache_kw, self.device = lm, done.cache, cache_argument(lm), device
        self.logits = done.logits.repeat_interleave(n, dim=0)  # [rows, vocab] of the last step
        self.mask = done.mask.repeat_interleave(n, dim=0)  # [rows, seen tokens]
        self.next_pos = done.positions[:, -1:].repeat_interleave(n, dim=0) + 1  # [rows, 1]

    def forward(self, step_ids) -> None:
        """Advance every row by its token; the mask and positions grow with it."""
        import torch

        ones = torch.ones((self.mask.shape[0], 1), dtype=self.mask.dtype, device=self.mask.device)
        self.mask = torch.cat([self.mask, ones], dim=-1)
        with torch.no_grad():
            out = self.lm(
                input_ids=step_ids,
                attention_mask=self.mask,
                position_ids=self.next_pos,
                use_cache=True,
                **{self.cache_kw: self.cache},
            )
        self.logits = out.logits[:, -1, :]
        self.next_pos = self.next_pos + 1

    def select(self, rows: list[int]) -> None:
        """Keep only these batch rows (finished candidates leave)."""
        import torch

        index = torch.as_tensor(rows, dtype=torch.long, device=self.mask.device)
        self.cache.batch_select_indices(index)
        self.mask, self.next_pos = self.mask[index], self.next_pos[index]
        self.logits = self.logits[index]


def _decode_loop(
    lm,
    done: Prefilled,
    streams: list,
    results: list[Sampled],
    stop_ids: set[int],
    settings: SamplingSettings,
    guarded: dict,
    device: str,
) -> None:
    """Draw each token on the host; a candidate leaves the batch the step it stops. A guarded row
    (`guarded`: flat index -> GuardedRow) that takes a word back feeds its token before the cut again."""
    import torch

    n = settings.candidates
    state = _Growing(lm, done, n, device)
    plain = len(guarded) < len(streams)
    active = list(range(len(streams)))  # flat candidate index of each batch row
    logits = state.logits.float().cpu()
    for _ in range(settings.max_new_tokens):
        chosen, kept, refed = [], [], {}
        if plain:
            ids, probs = filtered_probs(logits, settings)
            ids, probs = ids.numpy(), probs.numpy()
        for row, flat in enumerate(active):
            guard = guarded.get(flat)
            if guard is None:
                token = draw(ids[row], probs[row], streams[flat].random())
            else:
                token = guard.draw(logits[row], settings, streams[flat])
                if token == TAKEN_BACK:
                    token, refed[flat] = guard.refeed
                    chosen.append(token)
                    kept.append(row)
                    continue
            sample = results[flat // n]
            if token is None:
                sample.ended[flat % n] = "guard"
            elif token in stop_ids:
                sample.ended[flat % n] = "stop"
            else:
                if guard is None:
                    sample.tokens[flat % n].append(token)
                else:
                    guard.accept(token)
                chosen.append(token)
                kept.append(row)
        if not kept:
            break
        if len(kept) < len(active):
            state.select(kept)
            active = [active[r] for r in kept]
        for row, flat in enumerate(active):
            if flat in refed:
                state.mask[row, guarded[flat].hidden] = 0
                state.next_pos[row, 0] = refed[flat]
        column = state.mask.shape[1]
        state.forward(torch.as_tensor(chosen, dtype=torch.long, device=device)[:, None])
        for flat in active:
            if flat in guarded:
                guarded[flat].fed(column)
        logits = state.logits.float().cpu()
    finish_guarded(guarded, results, n)

"""Batched best-of-N sampling with a shared prefill: the rewriter's decoding engine.

Every prompt is run through the model once; its key-value cache is then copied to the N
candidates, which sample token by token (top-k, top-p, temperature) until a stop token.
A candidate that stops leaves the batch at once, so no step is computed for finished rows.
Each candidate draws from its own seeded stream, so a recipe's samples do not depend on
which other recipes share its batch.

With a `guard` (rrt.modelling.constrained.ViolationGuard) a sampled token that would complete a
violating term is refused and the row resamples, or takes the word back (rrt.modelling.guarded_row),
so adherence holds by construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class SamplingSettings:
    """Decoding settings: top-k, nucleus, temperature, candidates per step, new tokens per step and
    the token ids never drawn."""

    top_k: int
    top_p: float
    temperature: float
    candidates: int
    max_new_tokens: int
    banned: tuple[int, ...] = ()

    @classmethod
    def from_config(cls, values: dict, **changes) -> SamplingSettings:
        """Decoding from a `rewrite` or `serve` block (its max_step_tokens), with any changes."""
        merged = {"max_new_tokens": values.get("max_step_tokens"), **values, **changes}
        return cls(
            **{
                k: merged[k]
                for k in ("top_k", "top_p", "temperature", "candidates", "max_new_tokens")
            }
        )


@dataclass
class Prefix:
    """The key-value tensors of a prompt's first tokens, kept so the next prompt that starts
    with the same tokens skips their prefill (one [1, heads, length, dim] pair per layer)."""

    ids: list[int]
    layers: list[tuple] = field(default_factory=list)


@dataclass
class Sampled:
    """One prompt's candidates: token ids (stop token excluded), why each ended, and the
    prefix kept for the next prompt (when asked for)."""

    tokens: list[list[int]] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)  # stop | length | guard
    prefix: Prefix | None = None
    taken_back: int = 0  # words the guard took back, over every candidate


def _filtered_probs(logits, settings: SamplingSettings):
    """Top-k token ids and their renormalised probabilities (top-p applied) per row."""
    import torch

    scaled = logits.float() / max(settings.temperature, 1e-6)
    # One fill per id, with no host-to-device copy, so a captured decode step can ban them too.
    for token in settings.banned:
        scaled[..., token] = float("-inf")
    k = min(settings.top_k or scaled.shape[-1], scaled.shape[-1])
    values, ids = torch.topk(scaled, k, dim=-1)
    probs = torch.softmax(values, dim=-1)
    if settings.top_p < 1.0:
        # Keep the smallest head of the sorted list whose mass reaches top_p.
        before = torch.cumsum(probs, dim=-1) - probs
        probs = torch.where(before < settings.top_p, probs, torch.zeros_like(probs))
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return ids, probs


def _draw(ids: np.ndarray, probs: np.ndarray, u: float) -> int:
    """Inverse-CDF draw of one token from a row's filtered distribution."""
    cdf = np.cumsum(probs)
    spot = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    return int(ids[min(spot, len(ids) - 1)])


def cache_argument(lm) -> str:
    """The forward argument that takes the key-value cache (`cache` from transformers 5.2x on)."""
    import inspect

    return "cache" if "cache" in inspect.signature(lm.forward).parameters else "past_key_values"


def _padded_prefixes(prefixes: list[Prefix | None], length: int):
    """Per layer, the batch's prefix keys and values left-padded to one length."""
    sample = next(p for p in prefixes if p)
    for layer, (keys, values) in enumerate(sample.layers):
        shape = (len(prefixes), keys.shape[1], length, keys.shape[3])
        batch_k, batch_v = keys.new_zeros(shape), values.new_zeros(shape)
        for row, prefix in enumerate(prefixes):
            if prefix:
                k, v = prefix.layers[layer]
                batch_k[row, :, length - k.shape[2] :] = k[0]
                batch_v[row, :, length - v.shape[2] :] = v[0]
        yield batch_k, batch_v


def _kept_prefix(
    cache, row: int, prompt: list[int], past: int, lp: int, tail_start: int, keep: int
) -> Prefix:
    """The first `keep` tokens of a prompt as a Prefix, cut from the batch cache after its prefill."""
    import torch

    layers = []
    for layer in cache.layers:
        parts = []
        for tensor in (layer.keys, layer.values):
            old = tensor[row, :, lp - past : lp - past + min(keep, past)]
            new = tensor[row, :, lp + tail_start : lp + tail_start + max(0, keep - past)]
            parts.append(torch.cat([old, new], dim=1)[None].clone())
        layers.append(tuple(parts))
    return Prefix(prompt[:keep], layers)


@dataclass
class Prefilled:
    """A batch of prompts after their one forward pass: the cache (prompts left-padded to end in one
    column), each prompt's last logits, the cache's valid columns, the prompts' positions and the
    prefixes asked back."""

    cache: object
    logits: object  # [prompts, vocab]
    mask: object  # [prompts, cached columns]
    positions: object  # [prompts, new columns]
    kept: list


def prefill(
    lm,
    prompts: list[list[int]],
    pad_id: int,
    device: str = "cpu",
    prefixes: list[Prefix | None] | None = None,
    keep: list[int] | None = None,
) -> Prefilled:
    """One forward pass over every prompt; a prompt that starts with its earlier prefix skips those
    tokens, and `keep[i]` asks for prompt i's first tokens back as a Prefix."""
    import torch
    from transformers import DynamicCache

    count = len(prompts)
    # A usable prefix is one the prompt really starts with; its tokens are not run again.
    prefixes = [
        p if p is not None and len(p.ids) < len(q) and q[: len(p.ids)] == p.ids else None
        for p, q in zip(prefixes or [None] * count, prompts)
    ]
    past = [len(p.ids) if p else 0 for p in prefixes]
    tails = [q[k:] for q, k in zip(prompts, past)]
    lp, width = max(past), max(len(t) for t in tails)
    # Left padding of both parts puts every prompt's last token in the last column.
    input_ids = torch.full((count, width), pad_id, dtype=torch.long)
    mask = torch.zeros((count, lp + width), dtype=torch.long)
    positions = torch.zeros((count, width), dtype=torch.long)
    for row, (tail, k) in enumerate(zip(tails, past)):
        input_ids[row, width - len(tail) :] = torch.as_tensor(tail)
        mask[row, lp - k : lp] = 1
        mask[row, lp + width - len(tail) :] = 1
        positions[row, width - len(tail) :] = torch.arange(k, k + len(tail))
    input_ids, mask, positions = input_ids.to(device), mask.to(device), positions.to(device)
    cache, cache_kw = DynamicCache(), cache_argument(lm)
    if lp:
        for layer, (keys, values) in enumerate(_padded_prefixes(prefixes, lp)):
            cache.update(keys.to(device), values.to(device), layer)
    with torch.no_grad():
        # Only the last position's logits are needed; the LM head over the whole prompt is not.
        out = lm(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{cache_kw: cache},
        )
    kept = [
        _kept_prefix(cache, row, prompts[row], past[row], lp, width - len(tails[row]), keep[row])
        if keep and keep[row]
        else None
        for row in range(count)
    ]
    return Prefilled(cache, out.logits[:, -1, :], mask, positions, kept)


def sample_candidates(
    lm,
    prompts: list[list[int]],
    seeds: list[int],
    stop_ids: set[int],
    pad_id: int,
    settings: SamplingSettings,
    guards: list | None = None,
    device: str = "cpu",
    prefixes: list[Prefix | None] | None = None,
    keep: list[int] | None = None,
    decode: str = "host",
    step: str = "dynamic",
    prompt_cache: str = "copied",
) -> list[Sampled]:
    """N candidates for each prompt, from one prefill per prompt; each stops at a stop token.

    `guards` holds one ViolationGuard (or None) per prompt for constrained decoding.
    `prefixes` are earlier prompts' kept prefixes (their tokens skip the prefill); `keep[i]`
    asks for prompt i's first tokens back as a Prefix (in `Sampled.prefix`). `decode` is
    where tokens are drawn (rewrite.decode): both ways draw the same tokens; guarded
    prompts always decode on the host, which checks each token's text. `step` is how a decode
    step runs (rewrite.decode_step, resolved): dynamic (the model's forward on a growing cache,
    tokens drawn per `decode`), static or graph (rrt.modelling.static_decode: a preallocated cache,
    tokens drawn on the device, the same tokens; graph captures the step on CUDA), whose cache holds
    each prompt copied into every candidate's row or, with `prompt_cache` shared, once per prompt."""
    import torch

    n, count = settings.candidates, len(prompts)
    guards = guards or [None] * count
    done = prefill(lm, prompts, pad_id, device, prefixes, keep)
    cache, mask, positions, first = done.cache, done.mask, done.positions, done.logits
    rngs = [np.random.default_rng([seeds[i // n], i % n]) for i in range(count * n)]
    results = [
        Sampled([[] for _ in range(n)], ["length"] * n, done.kept[row]) for row in range(count)
    ]
    if step in ("static", "graph"):
        from rrt.modelling import static_decode

        try:
            if static_decode.supports(lm):
                with torch.no_grad():
                    static_decode.decode_static(
                        lm,
                        cache,
                        first,
                        mask,
                        positions,
                        rngs,
                        results,
                        stop_ids,
                        settings,
                        guards,
                        device,
                        graph=step == "graph",
                        shared=prompt_cache == "shared",
                        last_tokens=[p[-1] for p in prompts],
                    )
                return results
        except static_decode.NoRoom:
            static_decode.STATS["no_room"] += 1  # this batch decodes the dynamic way below
    cache.batch_repeat_interleave(n)
    state = _Decoding(
        lm,
        cache,
        cache_argument(lm),
        first.repeat_interleave(n, dim=0),
        mask.repeat_interleave(n, dim=0),
        positions[:, -1:].repeat_interleave(n, dim=0) + 1,
        rngs,
        device,
    )
    if decode == "device" and all(g is None for g in guards):
        _decode_on_device(state, results, stop_ids, settings)
    else:
        rows = guarded_rows(
            guards, n, [p[-1] for p in prompts], mask.shape[1] - 1, positions[:, -1] + 1
        )
        _decode_on_host(state, results, stop_ids, settings, rows)
    return results


def guarded_rows(
    guards: list, n: int, last_tokens: list[int], prompt_column: int, first_positions
) -> dict:
    """A GuardedRow for each candidate (flat index) whose prompt has a guard."""
    from rrt.modelling.guarded_row import GuardedRow

    first = first_positions.tolist()
    return {
        f: GuardedRow(guards[f // n], last_tokens[f // n], prompt_column, first[f // n])
        for f in range(len(guards) * n)
        if guards[f // n] is not None
    }


def finish_guarded(rows: dict, results: list[Sampled], n: int) -> None:
    """Each guarded candidate's tokens, as its row holds them, and the words taken back."""
    for f, row in rows.items():
        results[f // n].tokens[f % n] = list(row.tokens)
        results[f // n].taken_back += row.taken_back


@dataclass
class _Decoding:
    """The decode loop's state after the shared prefill: one batch row per candidate."""

    lm: object
    cache: object
    cache_kw: str
    logits: object  # [rows, vocab] of the last step
    mask: object  # [rows, seen tokens]
    next_pos: object  # [rows, 1]
    rngs: list  # one seeded stream per candidate (flat index)
    device: str

    def forward(self, step_ids) -> None:
        """Advance every row by its token; the mask and positions grow with it."""
        import torch

        self.mask = torch.cat(
            [
                self.mask,
                torch.ones((self.mask.shape[0], 1), dtype=self.mask.dtype, device=self.mask.device),
            ],
            dim=-1,
        )
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
        self.mask, self.next_pos, self.logits = (
            self.mask[index],
            self.next_pos[index],
            self.logits[index],
        )


def _decode_on_host(
    state: _Decoding,
    results: list[Sampled],
    stop_ids: set[int],
    settings: SamplingSettings,
    guarded: dict,
) -> None:
    """Draw each token on the host; a candidate leaves the batch the step it stops. A guarded row
    (`guarded`: flat index -> GuardedRow) that takes a word back feeds its token before the cut again."""
    import torch

    from rrt.modelling.guarded_row import TAKEN_BACK

    n = settings.candidates
    plain = len(guarded) < len(state.rngs)
    active = list(range(len(state.rngs)))  # flat candidate index of each batch row
    logits = state.logits.float().cpu()
    for _ in range(settings.max_new_tokens):
        chosen, kept, refed = [], [], {}
        if plain:
            ids, probs = _filtered_probs(logits, settings)
            ids, probs = ids.numpy(), probs.numpy()
        for row, flat in enumerate(active):
            guard = guarded.get(flat)
            if guard is None:
                token = _draw(ids[row], probs[row], state.rngs[flat].random())
            else:
                token = guard.draw(logits[row], settings, state.rngs[flat])
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
        state.forward(torch.as_tensor(chosen, dtype=torch.long, device=state.device)[:, None])
        for flat in active:
            if flat in guarded:
                guarded[flat].fed(column)
        logits = state.logits.float().cpu()
    finish_guarded(guarded, results, n)


def record_drawn(sample: Sampled, j: int, row: list[int], stop_ids: set[int]) -> None:
    """Candidate j's tokens from a row drawn on the device (-1: not drawn), cut at its first stop,
    which ends it as "stop"."""
    row = [t for t in row if t >= 0]
    cut = next((i for i, t in enumerate(row) if t in stop_ids), None)
    if cut is not None:
        sample.ended[j], row = "stop", row[:cut]
    sample.tokens[j] = row


def device_draw(logits, uniforms, settings: SamplingSettings):
    """One token per row drawn on the logits' device with the host's inverse-CDF draw (`_draw`):
    the float32 running sum against u x its total, u being the row's float32 number."""
    import torch

    ids, probs = _filtered_probs(logits, settings)
    cdf = torch.cumsum(probs, dim=-1)
    target = (uniforms * cdf[:, -1])[:, None]
    spot = torch.searchsorted(cdf, target, right=True).clamp_(max=ids.shape[-1] - 1)
    return ids.gather(-1, spot)[:, 0]


SYNC_EVERY = 8  # device decoding: tokens between the host's checks for finished candidates


def _decode_on_device(
    state: _Decoding, results: list[Sampled], stop_ids: set[int], settings: SamplingSettings
) -> None:
    """Draw every token on the model's device from numbers pre-drawn from each candidate's own
    stream (the same numbers, in the same order, as the host draws), so no step waits for the
    host; every SYNC_EVERY tokens the finished candidates leave the batch."""
    import torch

    n, steps, device = settings.candidates, settings.max_new_tokens, state.device
    flat_rows = len(state.rngs)
    # float32, as the host's draw multiplies them (NumPy keeps a Python float times a float32 in float32).
    uniforms = torch.as_tensor(
        np.array([rng.random(steps) for rng in state.rngs], dtype=np.float32), device=device
    )
    stops = torch.as_tensor(sorted(stop_ids) or [-1], dtype=torch.long, device=device)
    tokens = torch.full((flat_rows, steps), -1, dtype=torch.long, device=device)
    active = torch.arange(flat_rows, device=device)
    stopped = torch.zeros(flat_rows, dtype=torch.bool, device=device)
    for step in range(steps):
        token = device_draw(state.logits, uniforms[active, step], settings)
        tokens[active, step] = token
        stopped = stopped | torch.isin(token, stops)
        if step == steps - 1:
            break
        if (step + 1) % SYNC_EVERY == 0:
            going = (~stopped).nonzero()[:, 0]
            if going.numel() == 0:
                break
            if going.numel() < stopped.numel():
                state.select(going.tolist())
                active, stopped, token = active[going], stopped[going], token[going]
        state.forward(token[:, None])
    for flat, row in enumerate(tokens.cpu().tolist()):
        record_drawn(results[flat // n], flat % n, row, stop_ids)

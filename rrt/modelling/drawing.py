"""How one token is drawn, the same on every decoding path: the sampling settings, each row's
filtered distribution (temperature, banned ids, top-k, top-p), an inverse-CDF draw from a number
of the candidate's own seeded stream, and what a prompt's candidates come to (`Sampled`).

The host draws one row at a time (`draw`); the static cache's step draws every row on the device
(`device_draw`) with the same float32 arithmetic, so both give the same tokens from the same numbers.
Below the guard (rrt.modelling.guarded_row) and both decode loops (rrt.modelling.sampling,
rrt.modelling.static_decode).
"""

from __future__ import annotations

# torch is imported where used: jobs/rewrite.py imports this module (through the rewriter), and its
# --help and driver start without it.
from dataclasses import dataclass, field

import numpy as np

from rrt.config import Decoding


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
    def from_config(cls, decoding: Decoding, candidates: int, **changes) -> SamplingSettings:
        """Decoding from a `rewrite` or `serve` block, with `candidates` per step and any changes."""
        return cls(
            **{
                "top_k": decoding.top_k,
                "top_p": decoding.top_p,
                "temperature": decoding.temperature,
                "candidates": candidates,
                "max_new_tokens": decoding.max_step_tokens,
                **changes,
            }
        )


@dataclass
class Sampled:
    """One prompt's candidates: token ids (stop token excluded) and why each ended."""

    tokens: list[list[int]] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)  # stop | length | guard
    taken_back: int = 0  # words the guard took back, over every candidate


def filtered_probs(logits, settings: SamplingSettings):
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


def draw(ids: np.ndarray, probs: np.ndarray, u: float) -> int:
    """Inverse-CDF draw of one token from a row's filtered distribution."""
    cdf = np.cumsum(probs)
    spot = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    return int(ids[min(spot, len(ids) - 1)])


def device_draw(logits, uniforms, settings: SamplingSettings):
    """One token per row drawn on the logits' device with the host's inverse-CDF draw (`draw`):
    the float32 running sum against u x its total, u being the row's float32 number."""
    import torch

    ids, probs = filtered_probs(logits, settings)
    cdf = torch.cumsum(probs, dim=-1)
    target = (uniforms * cdf[:, -1])[:, None]
    spot = torch.searchsorted(cdf, target, right=True).clamp_(max=ids.shape[-1] - 1)
    return ids.gather(-1, spot)[:, 0]


def candidate_streams(seeds: list[int], n: int) -> list[np.random.Generator]:
    """Each candidate's own seeded stream (flat index: prompt i's candidate j is i * n + j), so a
    recipe's samples do not depend on which other recipes share its batch."""
    return [np.random.default_rng([seeds[i // n], i % n]) for i in range(len(seeds) * n)]


class Stream:
    """A candidate's seeded numbers: the first `steps` drawn at once for the device, more on demand
    (the same sequence the host draws one at a time)."""

    def __init__(self, rng, steps: int):
        self.rng, self.values, self.used = rng, list(rng.random(steps)), 0

    def at(self, index: int) -> float:
        """The stream's number at `index`."""
        while len(self.values) <= index:
            self.values.append(self.rng.random())
        return float(self.values[index])

    def random(self) -> float:
        """The next number not yet used (as numpy's Generator.random)."""
        self.used += 1
        return self.at(self.used - 1)


def record_drawn(sample: Sampled, j: int, row: list[int], stop_ids: set[int]) -> None:
    """Candidate j's tokens from a row drawn on the device (-1: not drawn), cut at its first stop,
    which ends it as "stop"."""
    row = [t for t in row if t >= 0]
    cut = next((i for i, t in enumerate(row) if t in stop_ids), None)
    if cut is not None:
        sample.ended[j], row = "stop", row[:cut]
    sample.tokens[j] = row

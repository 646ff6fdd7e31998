"""Plug-and-play steering (PPLM, Dathathri et al., 2020) of a recipe LM by a bag of words.

For each new token the key-value history of the last `window` positions is nudged, in a few
gradient steps, towards raising the probability of the bag's words, with a KL term keeping the
next-token distribution near the unsteered one; the steered and unsteered distributions are then
fused by a geometric mean and sampled (top-k). Words of several tokens count: a word's first
token is a target, and once the text ends in a word's first tokens, its next token is.
"""

from __future__ import annotations

# torch and transformers are imported where used: jobs/rewrite.py imports this module (through
# rrt.baselines.controllable), and its --help and driver start without them.
from dataclasses import dataclass

from rrt.modelling.sampling import cache_argument


@dataclass
class PplmSettings:
    """Perturbation and sampling settings (the `rewrite.pplm` block)."""

    step_size: float
    iterations: int
    window: int  # history positions perturbed, counted back from the newest (0: all)
    gamma: float  # gradient normalisation exponent
    kl_scale: float
    gm_scale: float  # weight of the steered distribution in the geometric-mean fusion
    temperature: float
    top_k: int
    max_new_tokens: int


def word_token_ids(tokenizer, words: list[str]) -> list[tuple[int, ...]]:
    """Each word's token ids as it appears inside text (after a space), longest words kept whole."""
    seen, out = set(), []
    for word in words:
        for form in (" " + word, word):
            ids = tuple(tokenizer.encode(form, add_special_tokens=False))
            if ids and ids not in seen:
                seen.add(ids)
                out.append(ids)
    return out


def bow_targets(words: list[tuple[int, ...]], text: list[int]) -> list[int]:
    """The tokens that would begin or continue a bag word after `text`."""
    targets = {ids[0] for ids in words}
    for ids in words:
        for done in range(1, len(ids)):
            if len(text) >= done and tuple(text[-done:]) == ids[:done]:
                targets.add(ids[done])
    return sorted(targets)


def _layers(cache) -> list[tuple]:
    return [(layer.keys, layer.values) for layer in cache.layers]


def _cache(layers: list[tuple]):
    from transformers import DynamicCache

    cache = DynamicCache()
    for index, (keys, values) in enumerate(layers):
        cache.update(keys, values, index)
    return cache


def steered_probs(
    lm, history: list[tuple], last: int, targets: list[int], settings: PplmSettings, cache_kw: str
):
    """(steered next-token probabilities, unsteered ones, the history extended by `last`) after
    `last`, given the key-value history of the text before it (empty for a one-token prompt)."""
    import torch

    token = torch.tensor([[last]], device=next(lm.parameters()).device)
    extended = _cache(history)
    with torch.no_grad():
        plain = lm(input_ids=token, use_cache=True, **{cache_kw: extended})
    unsteered = torch.softmax(plain.logits[0, -1].float() / settings.temperature, dim=-1)
    if not targets or settings.iterations == 0 or not history:
        return unsteered, unsteered, _layers(extended)
    device = token.device
    length = history[0][0].shape[2]
    mask = torch.zeros(1, 1, length, 1, device=device)
    mask[:, :, length - settings.window if 0 < settings.window < length else 0 :] = 1
    deltas = [
        (torch.zeros_like(k, requires_grad=True), torch.zeros_like(v, requires_grad=True))
        for k, v in history
    ]
    target = torch.tensor(targets, device=device)
    for _ in range(settings.iterations):
        layers = [
            (k.detach() + dk * mask, v.detach() + dv * mask)
            for (k, v), (dk, dv) in zip(history, deltas)
        ]
        logits = (
            lm(input_ids=token, use_cache=True, **{cache_kw: _cache(layers)}).logits[0, -1].float()
        )
        probs = torch.softmax(logits, dim=-1)
        loss = -torch.log(probs[target].sum() + 1e-12)
        if settings.kl_scale:
            loss = (
                loss
                + settings.kl_scale
                * (unsteered * (unsteered.clamp_min(1e-12) / probs.clamp_min(1e-12)).log()).sum()
            )
        loss.backward()
        with torch.no_grad():
            for pair in deltas:
                for delta in pair:
                    grad = delta.grad * mask
                    delta -= settings.step_size * grad / (grad.norm() + 1e-10) ** settings.gamma
                    delta.grad.zero_()
    with torch.no_grad():
        layers = [(k + dk * mask, v + dv * mask) for (k, v), (dk, dv) in zip(history, deltas)]
        logits = (
            lm(input_ids=token, use_cache=True, **{cache_kw: _cache(layers)}).logits[0, -1].float()
        )
        steered = torch.softmax(logits / settings.temperature, dim=-1)
        fused = steered**settings.gm_scale * unsteered ** (1 - settings.gm_scale)
    return fused / fused.sum(), unsteered, _layers(extended)


def generate(
    lm,
    prompt: list[int],
    words: list[tuple[int, ...]],
    stop_ids: set[int],
    settings: PplmSettings,
    seed: int,
    device: str = "cpu",
) -> list[int]:
    """New tokens after `prompt`, steered towards the bag of words, sampled top-k from a seeded
    generator; ends at a stop token (not returned) or after max_new_tokens."""
    import torch

    cache_kw = cache_argument(lm)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    ids = list(prompt)
    cache = _cache([])
    if len(ids) > 1:
        with torch.no_grad():
            lm(
                input_ids=torch.tensor([ids[:-1]], device=device),
                use_cache=True,
                **{cache_kw: cache},
            )
    history = _layers(cache)
    out: list[int] = []
    for _ in range(settings.max_new_tokens):
        # The unsteered pass over the last token also extends the history for the next one.
        probs, _, history = steered_probs(
            lm, history, ids[-1], bow_targets(words, out), settings, cache_kw
        )
        top = torch.topk(probs.cpu(), min(settings.top_k, probs.shape[-1]))
        token = int(
            top.indices[torch.multinomial(top.values / top.values.sum(), 1, generator=generator)]
        )
        if token in stop_ids:
            break
        out.append(token)
        ids.append(token)
    return out

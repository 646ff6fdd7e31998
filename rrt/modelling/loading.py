"""One way from a trained model's folder to a model in memory, and from there to a rewriter:
the rewrite job's actors, the evaluation job's scorers and the service's replicas all load
through here, so they read a model, its tokenizer, its meta and its block size alike."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from rrt.config import Decoding
from rrt.modelling.models import META_FILE, lm_block_size, load_exported, read_meta
from rrt.modelling.rewriter import SYSTEMS, Rewriter
from rrt.modelling.sampling import SamplingSettings

# The model system that rewrites with a model of each training variant (the first in SYSTEMS:
# a contextual_ing model is Contextual + rule prompt unless the caller names contextual_gpt2).
VARIANT_SYSTEMS: dict[str, str] = {}
for _system, _variant in SYSTEMS.items():
    if _variant:
        VARIANT_SYSTEMS.setdefault(_variant, _system)


@dataclass
class LoadedModel:
    """An exported model in eval mode on its device, with its tokenizer, meta and block size."""

    folder: str
    lm: object
    tokenizer: object
    device: str
    meta: dict = field(default_factory=dict)
    block_size: int = 0

    @property
    def system(self) -> str | None:
        """The model system that rewrites with this model (None when its variant does not rewrite)."""
        return VARIANT_SYSTEMS.get(self.meta.get("variant"))


def load_model(folder: str, device: str = "cpu", half_on_gpu: bool = True) -> LoadedModel:
    """A trained model's folder (`<train output>/model`) loaded on `device`; fp16 on a GPU
    unless `half_on_gpu` is off (perplexity is scored in fp32)."""
    lm, tokenizer = load_exported(folder, device, half_on_gpu)
    meta = read_meta(folder) if os.path.exists(os.path.join(folder, META_FILE)) else {}
    return LoadedModel(folder, lm, tokenizer, device, meta, lm_block_size(lm.config, meta))


def build_rewriter(
    model: LoadedModel,
    decoding: Decoding,
    candidates: int,
    constrained: bool,
    system: str | None = None,
    ing_model: LoadedModel | None = None,
) -> Rewriter:
    """The rewriter of `system` (default: the model's own) on a loaded model, sampling and
    selecting as a `rewrite` or `serve` block says; how it decodes follows the model's device
    (rrt.modelling.sampling.decode_plan)."""
    system = system or model.system
    if system is None:
        raise ValueError(
            f"{model.folder} holds a {model.meta.get('variant')} model, which does not rewrite recipes"
        )
    return Rewriter(
        system,
        model.lm,
        model.tokenizer,
        model.block_size,
        SamplingSettings.from_config(decoding, candidates),
        recipe_tokens=decoding.recipe_tokens,
        selection=decoding.selection,
        closed_foods=decoding.closed_foods,
        steps=decoding.steps,
        constrained=constrained,
        ing_lm=ing_model.lm if ing_model else None,
        ing_tokenizer=ing_model.tokenizer if ing_model else None,
        device=model.device,
    )

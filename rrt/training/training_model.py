"""A model's life in training, owned in one place: built and made ready, then exported.

A training worker calls `prepare_for_training` once and `export` once; what the steps between
them (vocabulary padding, the fine-tuning method's wrapping, the head on labelled positions, the
compiled forward) did to the model is undone or kept here, so no caller has to know the order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from rrt.baselines.seq2seq import SEQ2SEQ, build_seq2seq
from rrt.config import TrainSettings
from rrt.modelling.kernels import compile_model, resolve_compile
from rrt.modelling.labelled_head import head_on_labels, labelled_head
from rrt.modelling.models import PaddedVocabulary, build_model, export_model, pad_vocabulary
from rrt.training import finetune


@dataclass
class TrainingModel:
    """A model ready to train, with what its export and the run's stats need to know of it."""

    lm: Any
    padding: PaddedVocabulary  # the tokenizer's rows and the mask on any padding rows
    padded_vocab: int  # rows after padding to train.pad_vocab_to
    sizes: dict[str, int] = field(default_factory=dict)  # parameter counts (finetune)

    @property
    def live_vocab(self) -> int:
        """The tokenizer's rows; the export has exactly these."""
        return self.padding.live

    @property
    def head(self) -> str:
        """Where the LM head runs: at the labelled positions only, or at every position."""
        return "labelled positions" if labelled_head(self.lm) else "every position"


def prepare_for_training(
    train: TrainSettings, tokenizer, block: int, device_type: str
) -> TrainingModel:
    """Build the run's model (a preset, a pretrained name or path, or a seq2seq baseline) and make it
    ready: vocabulary padded, the fine-tuning method applied, the head on labelled positions when
    the loss is not on every token, compiled where that pays."""
    if train.variant in SEQ2SEQ:
        lm = build_seq2seq(
            train.variant, len(tokenizer), train.seq2seq.model_dump(), block, tokenizer, train.seed
        )
    else:
        lm = build_model(
            train.model,
            len(tokenizer),
            train.tiny.model_dump(),
            train.seed,
            tokenizer.pad_token_id,
            tokenizer,
            train.attention,
        )
    padding = pad_vocabulary(lm, train.pad_vocab_to)
    padded = lm.get_input_embeddings().weight.shape[0]
    lm = finetune.prepare(
        lm,
        train.finetune,
        range(finetune.new_tokens_from(tokenizer), padding.live),
        train.trainable_layers,
        train.lora.model_dump(),
        padding,
    )
    sizes = finetune.parameter_counts(lm)
    if train.loss_on != "all":
        head_on_labels(lm)
    if resolve_compile(train.compile, device_type):
        compile_model(lm)
    return TrainingModel(lm=lm, padding=padding, padded_vocab=padded, sizes=sizes)


def export(trained, model: TrainingModel, tokenizer, folder: str, meta: dict[str, Any]) -> None:
    """Save the trained weights as a plain Hugging Face model in `folder`: fp32, adapters merged,
    the tokenizer's rows only, with `rrt_meta.json`. `trained` is the module the engine trained."""
    plain = finetune.plain_model(trained.to(torch.float32))
    model.padding.trim(plain)
    export_model(plain, tokenizer, folder, meta)

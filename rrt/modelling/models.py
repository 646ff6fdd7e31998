"""Model presets: the offline `tiny` GPT-2 with a BPE tokenizer trained on the corpus, a
pretrained model that a package ships (`smollm2-135m`, rrt.modelling.pretrained), or any Hugging Face
name or local path (`gpt2-medium`); each with every special token of the paper. Any causal LM
works (GPT-2, Llama, ...); what is GPT-2-specific applies only to GPT-2.

The same functions build the tokenizer on the driver, the model on each training worker
and the export (`save_pretrained` plus `rrt_meta.json`) at the end of a run.
"""

from __future__ import annotations

# torch and transformers are imported where used: the jobs import this module, and their --help and
# drivers start without them.
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tokenizers import Tokenizer, decoders, pre_tokenizers, trainers
from tokenizers import models as token_models

from rrt.modelling.kernels import attention_implementation
from rrt.modelling.pretrained import resolve
from rrt.modelling.special_tokens import (
    PAD,
    add_special_tokens,
    added_token,
    init_added_embeddings,
    special_tokens,
)
from rrt.recipes.paper_format import BOS, EOS

TINY = "tiny"
META_FILE = "rrt_meta.json"


def _wrap(backend, name_or_path: str | None = None):
    from transformers import PreTrainedTokenizerFast

    extras = [t for t in special_tokens() if t not in (BOS, EOS, PAD)]
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=EOS,
        extra_special_tokens=extras,
        name_or_path=name_or_path or TINY,
    )


def train_tiny_tokenizer(texts: Iterable[str], vocab_size: int):
    """A byte-level BPE tokenizer trained on these texts (no download), as a HF fast tokenizer."""
    backend = Tokenizer(token_models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[added_token(t) for t in special_tokens()],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer)
    return _wrap(backend)


def load_tokenizer(model: str, texts: Iterable[str] | None = None, vocab_size: int | None = None):
    """The tokenizer of a preset: trained for `tiny` (on `texts`, to `vocab_size` tokens, the
    `train.tiny` block's), else loaded and given the special tokens."""
    if model == TINY:
        if texts is None or vocab_size is None:
            raise ValueError(
                "the tiny preset trains its tokenizer: it needs texts and a vocab_size"
            )
        return train_tiny_tokenizer(texts, vocab_size)
    from transformers import AutoTokenizer

    return add_special_tokens(AutoTokenizer.from_pretrained(resolve(model)))


def fused_gelu(config):
    """GPT-2's tanh GELU as torch's one fused kernel instead of HF's seven element-wise ops: the same
    function (equal to float rounding), faster training steps on CPU (benchmarks/RESULTS.md), fewer
    kernels on GPU."""
    if getattr(config, "activation_function", None) == "gelu_new":
        config.activation_function = "gelu_pytorch_tanh"
    return config


def tiny_config(
    vocab_size: int, tiny: dict[str, Any] | None = None, pad_token_id: int | None = None
):
    """The tiny preset's GPT-2 config as Hugging Face defines it (layer shape from `train.tiny`)."""
    from transformers import GPT2Config

    # The shape comes from `train.tiny`; what a caller leaves out is GPT2Config's own.
    shape = {k: v for k, v in (tiny or {}).items() if k not in ("vocab_size", "lr")}
    return GPT2Config(vocab_size=vocab_size, pad_token_id=pad_token_id, **shape)


def build_model(
    model: str,
    vocab_size: int,
    tiny: dict[str, Any] | None = None,
    seed: int = 0,
    pad_token_id: int | None = None,
    tokenizer=None,
    attention: str = "sdpa",
):
    """A causal LM: a fresh tiny GPT-2, or pretrained weights with embeddings resized for new
    tokens (started from their meaning when `tokenizer` is given); attention by `attention`
    (train.attention)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    attention = attention_implementation(attention)
    if model == TINY:
        return AutoModelForCausalLM.from_config(
            fused_gelu(tiny_config(vocab_size, tiny, pad_token_id)), attn_implementation=attention
        )
    path = resolve(model)
    lm = AutoModelForCausalLM.from_pretrained(
        path,
        config=fused_gelu(AutoConfig.from_pretrained(path)),
        dtype=torch.float32,
        attn_implementation=attention,
    )
    known = lm.get_input_embeddings().weight.shape[0]
    if known != vocab_size:
        lm.resize_token_embeddings(vocab_size)
        if tokenizer is not None and vocab_size > known:
            init_added_embeddings(lm, tokenizer, known)
    if pad_token_id is not None:
        lm.config.pad_token_id = pad_token_id
    return lm


@dataclass
class PaddedVocabulary:
    """A vocabulary grown past the tokenizer's `live` rows, and the -inf mask on the logits of the
    padding rows (None until hooked, and when nothing was padded)."""

    live: int
    hook: Any = None

    def mask(self, module) -> None:
        """(Re)hook the mask onto the module that computes the logits now: the LM, or the wrapper a
        fine-tuning library put around it (call again after wrapping)."""
        import torch

        live = self.live

        def mask(head, inputs, logits):
            """-inf logits for the padding rows: softmax gives them 0, so every gradient there is 0 too."""
            with torch.no_grad():
                logits[..., live:] = float("-inf")

        if self.hook is not None:
            self.hook.remove()
        self.hook = module.get_output_embeddings().register_forward_hook(mask)

    def trim(self, lm) -> None:
        """Undo the padding before an export: the saved model has exactly the tokenizer's rows."""
        if self.hook is None:
            return
        self.hook.remove()
        self.hook = None
        lm.resize_token_embeddings(self.live, mean_resizing=False)


def pad_vocabulary(lm, multiple: int) -> PaddedVocabulary:
    """Grow the embedding and tied LM head to a multiple of `multiple` rows, whose logits are -inf
    on every forward, so the model computes the same function faster."""
    padding = PaddedVocabulary(lm.get_input_embeddings().weight.shape[0])
    if multiple <= 1 or padding.live % multiple == 0:
        return padding
    # An LM head whose row count is no multiple of the SIMD width or tile (e.g. 8,010, or GPT-2's
    # 50,282) writes misaligned logit rows, off the CPU's SIMD width and the GPU's tensor-core tiles.
    lm.resize_token_embeddings(padding.live, pad_to_multiple_of=multiple, mean_resizing=False)
    padding.mask(lm)
    return padding


def export_model(lm, tokenizer, folder: str, meta: dict[str, Any]) -> None:
    """Save weights, config, tokenizer and `rrt_meta.json` so `from_pretrained(folder)` loads all."""
    os.makedirs(folder, exist_ok=True)
    lm.config.bos_token_id = tokenizer.bos_token_id
    lm.config.eos_token_id = tokenizer.eos_token_id
    lm.config.pad_token_id = tokenizer.pad_token_id
    lm.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    with open(os.path.join(folder, META_FILE), "w", encoding="utf-8") as handle:
        json.dump({**meta, "special_tokens": special_tokens()}, handle, indent=2)


def load_exported(folder: str, device: str = "cpu", half_on_gpu: bool = True):
    """An exported model (fp16 on GPU unless `half_on_gpu` is off) and its tokenizer, in eval
    mode on `device`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    dtype = torch.float16 if half_on_gpu and device.startswith("cuda") else torch.float32
    lm = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
    return lm, tokenizer


def read_meta(folder: str) -> dict[str, Any]:
    """The `rrt_meta.json` of an exported model."""
    with open(os.path.join(folder, META_FILE), encoding="utf-8") as handle:
        return json.load(handle)


def lm_block_size(config, meta: dict | None = None) -> int:
    """The longest text the LM reads: its `n_positions`, or the block it was trained at if smaller."""
    sizes = [
        s
        for s in (
            getattr(config, "n_positions", None),
            getattr(config, "max_position_embeddings", None),
            (meta or {}).get("block_size"),
        )
        if isinstance(s, int) and s > 0
    ]
    if not sizes:
        raise ValueError(
            "cannot tell the LM's block size (no n_positions and no block_size in rrt_meta.json)"
        )
    return min(sizes)

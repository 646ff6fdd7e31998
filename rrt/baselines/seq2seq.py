"""The sentence-level transfer baselines: an encoder-decoder Transformer trained from scratch on
step pairs, and the same backbone with a copy mechanism (pointer-generator; See et al., 2017).

Both read a step pair in the no-context format split at the target tag: the encoder reads
`BOS <src:non-C> title <endoftitle> source step <endofinst>`, the decoder starts from `<tgt:C>`
and writes the target step up to EOS, so the target constraint conditions every decoded token.
The backbone is Hugging Face's BART (`BartForConditionalGeneration`) built from a small config;
only the copy head is ours (`CopyBart`): the last decoder layer's cross-attention, averaged over
heads, is the copy distribution over source positions, scattered onto their token ids, and a
gate p_gen, read from the decoder state, the attention context and the decoder input, mixes it
with the decoder's own softmax: P = p_gen * P_vocab + (1 - p_gen) * P_copy.

`SentenceRewriter` rewrites each source step on its own (best of N samples by the selection
rules, like the other learned systems); title and ingredient lines come from the substitution
guide. Seq2seq Copy keeps one model per constraint, as the paper did: `<folder>/<constraint>/model`.
"""

from __future__ import annotations

# torch and transformers are imported where used: jobs/train.py and jobs/rewrite.py import this
# module, and their --help and drivers start without them.
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from rrt.corpus.formats import no_context
from rrt.modelling.batching import IGNORED, token_budget_chunks
from rrt.modelling.models import META_FILE, read_meta
from rrt.modelling.rewriter import (
    RewriteTask,
    guide_rewrite,
    scored_entry,
    stable_seed,
    step_record,
)
from rrt.modelling.sampling import SamplingSettings
from rrt.modelling.selection import StepContext, select_best, source_word_set
from rrt.recipes.ingredients import ingredient_name
from rrt.recipes.paper_format import EOS, constraint_tag

TRANSFORMER, COPY = "transformer", "seq2seq_copy"
SEQ2SEQ = (TRANSFORMER, COPY)
# The step pairs both train on (prepare_data's format folder).
PAIRS = "no_context"
_FLOOR = 1e-12  # log of a zero-probability token stays finite in the loss


def split_example(ids, start: int) -> tuple[list[int], list[int]]:
    """A no-context token row cut at its target tag: (encoder ids, decoder ids from the tag to EOS)."""
    ids = [int(t) for t in ids]
    return ids[:start], ids[start:]


def bart_config(vocab_size: int, shape: dict[str, Any], block: int, tokenizer):
    """A BART config of the `train.seq2seq` shape for this tokenizer; positions cover the block."""
    from transformers import BartConfig

    layers, heads = shape["layers"], shape["heads"]
    return BartConfig(
        vocab_size=vocab_size,
        d_model=shape["d_model"],
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=shape["ffn_dim"],
        decoder_ffn_dim=shape["ffn_dim"],
        max_position_embeddings=block,
        dropout=shape["dropout"],
        # The copy distribution is the attention itself: no dropout on it.
        attention_dropout=0.0,
        activation_dropout=0.0,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
        forced_eos_token_id=None,
        scale_embedding=True,
    )


def copy_mixture(vocab_probs, attention, source_ids, p_gen):
    """The pointer-generator's final distribution: p_gen x the decoder's softmax plus (1 - p_gen)
    x the attention over source positions added onto the source tokens' ids.

    vocab_probs [B, T, V], attention [B, T, S] (rows sum to 1), source_ids [B, S], p_gen [B, T, 1]."""
    copy = vocab_probs.new_zeros(vocab_probs.shape)
    index = source_ids[:, None, :].expand(-1, attention.shape[1], -1)
    copy.scatter_add_(2, index, attention.to(copy.dtype))
    return p_gen * vocab_probs + (1 - p_gen) * copy


def _copy_class():
    """CopyBart, defined on first use so importing this module does not import transformers."""
    global CopyBart
    if CopyBart is not None:
        return CopyBart
    import torch
    from torch import nn
    from transformers import BartForConditionalGeneration
    from transformers.modeling_outputs import Seq2SeqLMOutput

    class _CopyBart(BartForConditionalGeneration):
        """BART with a pointer-generator head: logits are the log of the copy mixture."""

        def __init__(self, config):
            super().__init__(config)
            # p_gen from [decoder state; attention context; decoder input embedding].
            self.copy_gate = nn.Linear(3 * config.d_model, 1)
            self.post_init()

        def forward(
            self,
            input_ids=None,
            attention_mask=None,
            decoder_input_ids=None,
            decoder_attention_mask=None,
            encoder_outputs=None,
            labels=None,
            use_cache=None,
            source_ids=None,
            **kwargs,
        ):
            """The copy mixture's log-probabilities as logits (and its NLL when labels are given);
            `source_ids` stand for input_ids when the encoder outputs are passed in."""
            kwargs.pop("output_attentions", None)
            out = self.model(
                input_ids,
                attention_mask=attention_mask,
                decoder_input_ids=decoder_input_ids,
                decoder_attention_mask=decoder_attention_mask,
                encoder_outputs=encoder_outputs,
                use_cache=use_cache,
                output_attentions=True,
                **kwargs,
            )
            hidden = out.last_hidden_state
            attention = out.cross_attentions[-1].mean(dim=1)
            context = attention @ out.encoder_last_hidden_state
            embedded = self.model.decoder.embed_tokens(decoder_input_ids)
            p_gen = torch.sigmoid(
                self.copy_gate(torch.cat([hidden, context, embedded], dim=-1)).float()
            )
            # The mixture in fp32: fp16 flushes small probabilities to 0, whose log would be -inf.
            logits = self.lm_head(hidden) + self.final_logits_bias.to(hidden.device)
            vocab = torch.softmax(logits.float(), dim=-1)
            source = input_ids if source_ids is None else source_ids
            final = copy_mixture(vocab, attention.float(), source, p_gen)
            logits = torch.log(final.clamp_min(_FLOOR))
            loss = None
            if labels is not None:
                loss = nn.functional.nll_loss(
                    logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORED
                )
            return Seq2SeqLMOutput(
                loss=loss,
                logits=logits,
                cache=out.cache,
                cross_attentions=out.cross_attentions,
                encoder_last_hidden_state=out.encoder_last_hidden_state,
            )

    _CopyBart.__name__ = _CopyBart.__qualname__ = "CopyBart"
    CopyBart = _CopyBart
    return CopyBart


CopyBart = None


def model_class(variant: str):
    """The Hugging Face class of a variant: BART, or BART with the copy head."""
    if variant == COPY:
        return _copy_class()
    from transformers import BartForConditionalGeneration

    return BartForConditionalGeneration


def build_seq2seq(
    variant: str, vocab_size: int, shape: dict[str, Any], block: int, tokenizer, seed: int = 0
):
    """A fresh encoder-decoder of the `train.seq2seq` shape; the copy model reads eager attention
    weights (fused kernels do not return them)."""
    import torch

    torch.manual_seed(seed)
    config = bart_config(vocab_size, shape, block, tokenizer)
    attention = "eager" if variant == COPY else "sdpa"
    return model_class(variant)._from_config(config, attn_implementation=attention)


@dataclass
class Seq2seqBatch:
    """One micro-batch of step pairs: padded encoder ids and mask, decoder inputs and labels."""

    input_ids: np.ndarray
    attention_mask: np.ndarray
    decoder_input_ids: np.ndarray
    labels: np.ndarray
    real_tokens: int
    total_tokens: int

    @property
    def predicted_tokens(self) -> int:
        """Tokens the loss is taken over (every decoder label)."""
        return int((self.labels != IGNORED).sum())

    def inputs(self, device) -> dict:
        """The model's keyword arguments as tensors on `device`."""
        import torch

        arrays = {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "decoder_input_ids": self.decoder_input_ids,
            "labels": self.labels,
        }
        return {
            **{k: torch.from_numpy(v).to(device, non_blocking=True) for k, v in arrays.items()},
            "use_cache": False,
        }


def seq2seq_batch(
    examples: list[tuple[np.ndarray, int]], pad_id: int, multiple: int = 8
) -> Seq2seqBatch:
    """Pad (token row, target start) examples into encoder and decoder arrays; the decoder reads
    the target from its tag and learns each next token up to EOS."""
    pairs = [split_example(ids, start) for ids, start in examples]
    width = lambda n: -(-max(1, n) // multiple) * multiple
    src_w, tgt_w = width(max(len(s) for s, _ in pairs)), width(max(len(t) - 1 for _, t in pairs))
    rows = len(pairs)
    source = np.full((rows, src_w), pad_id, dtype=np.int64)
    mask = np.zeros((rows, src_w), dtype=np.int64)
    decoder = np.full((rows, tgt_w), pad_id, dtype=np.int64)
    labels = np.full((rows, tgt_w), IGNORED, dtype=np.int64)
    real = 0
    for row, (src, tgt) in enumerate(pairs):
        source[row, : len(src)], mask[row, : len(src)] = src, 1
        decoder[row, : len(tgt) - 1], labels[row, : len(tgt) - 1] = tgt[:-1], tgt[1:]
        real += len(src) + len(tgt) - 1
    return Seq2seqBatch(source, mask, decoder, labels, real, rows * (src_w + tgt_w))


def seq2seq_batches(window, micro_batch: int, pad_id: int, rng, token_budget: int | None = None):
    """A window of examples sorted by length, cut into batches (by token budget when given), shuffled."""
    examples = sorted(window, key=lambda example: len(example[0]))
    if token_budget:
        chunks = token_budget_chunks(examples, token_budget)
    else:
        chunks = [examples[i : i + micro_batch] for i in range(0, len(examples), micro_batch)]
    rng.shuffle(chunks)
    for chunk in chunks:
        yield seq2seq_batch(chunk, pad_id)


def _filter(probs, top_k: int, top_p: float):
    """Zero all but the top-k tokens, then all beyond the top-p mass; rows renormalised."""
    import torch

    if top_k and top_k < probs.shape[-1]:
        kth = torch.topk(probs, top_k, dim=-1).values[..., -1:]
        probs = torch.where(probs < kth, torch.zeros_like(probs), probs)
    if top_p < 1.0:
        ordered, order = torch.sort(probs, dim=-1, descending=True)
        before = ordered.cumsum(-1) - ordered
        ordered = torch.where(
            before > top_p * ordered.sum(-1, keepdim=True), torch.zeros_like(ordered), ordered
        )
        probs = torch.zeros_like(probs).scatter(-1, order, ordered)
    return probs / probs.sum(-1, keepdim=True)


def sample_steps(
    lm,
    source: list[int],
    start_id: int,
    stop_ids: set[int],
    settings: SamplingSettings,
    seed: int,
    device: str = "cpu",
) -> tuple[list[list[int]], list[str]]:
    """N candidates for one source: the encoder runs once, each candidate draws from its own seeded
    stream (so a step's candidates do not depend on what else is rewritten). Returns each
    candidate's new tokens (stop excluded) and why it ended (stop | length)."""
    import torch

    n = settings.candidates
    copy = hasattr(lm, "copy_gate")
    with torch.no_grad():
        src = torch.tensor([source], device=device)
        mask = torch.ones_like(src)
        encoded = lm.get_encoder()(input_ids=src, attention_mask=mask).last_hidden_state.expand(
            n, -1, -1
        )
        extra = {"source_ids": src.expand(n, -1)} if copy else {}
        streams = [torch.Generator().manual_seed(stable_seed(seed, i) % 2**63) for i in range(n)]
        decoded = torch.full((n, 1), start_id, dtype=torch.long, device=device)
        tokens: list[list[int]] = [[] for _ in range(n)]
        ended = ["length"] * n
        live = list(range(n))
        for _ in range(settings.max_new_tokens):
            # No key/value cache: steps are short, and the whole prefix keeps the copy head's inputs simple.
            out = lm(
                encoder_outputs=(encoded[live],),
                attention_mask=mask.expand(len(live), -1),
                decoder_input_ids=decoded[live],
                use_cache=False,
                **{k: v[live] for k, v in extra.items()},
            )
            probs = torch.softmax(out.logits[:, -1].float() / settings.temperature, dim=-1)
            probs = _filter(probs, settings.top_k, settings.top_p).cpu()
            picks = torch.full((n,), start_id, dtype=torch.long)
            for row, cand in enumerate(live):
                picks[cand] = int(torch.multinomial(probs[row], 1, generator=streams[cand]))
            decoded = torch.cat([decoded, picks[:, None].to(device)], dim=1)
            still = []
            for cand in live:
                token = int(picks[cand])
                if token in stop_ids:
                    ended[cand] = "stop"
                else:
                    tokens[cand].append(token)
                    still.append(cand)
            live = still
            if not live:
                break
    return tokens, ended


@dataclass
class Seq2seqModel:
    """A trained sentence-level model in eval mode: its variant, tokenizer, meta and block."""

    lm: Any
    tokenizer: Any
    meta: dict
    block: int


def load_seq2seq(folder: str, device: str = "cpu") -> Seq2seqModel:
    """An exported Transformer or Seq2seq Copy model (`<run>/model`) on `device`, fp32."""
    from transformers import AutoTokenizer

    meta = read_meta(folder)
    variant = meta.get("variant")
    if variant not in SEQ2SEQ:
        raise ValueError(f"{folder} holds a {variant} model, not one of {', '.join(SEQ2SEQ)}")
    attention = "eager" if variant == COPY else "sdpa"
    lm = (
        model_class(variant)
        .from_pretrained(folder, attn_implementation=attention)
        .to(device)
        .eval()
    )
    return Seq2seqModel(lm, AutoTokenizer.from_pretrained(folder), meta, int(meta["block_size"]))


def constraint_models(folder: str) -> dict[str, str]:
    """Seq2seq Copy's per-constraint model folders under a training output: constraint -> folder."""
    if not os.path.isdir(folder):
        return {}
    return {
        name: os.path.join(folder, name, "model")
        for name in sorted(os.listdir(folder))
        if os.path.exists(os.path.join(folder, name, "model", META_FILE))
    }


class SentenceRewriter:
    """Rewrites every step of a recipe on its own with a sentence-level model (one per constraint
    for Seq2seq Copy, keyed by the first constraint as the other models' tags are): N seeded
    samples, the best by the selection rules."""

    def __init__(
        self,
        system: str,
        models: dict[str | None, Seq2seqModel],
        settings: SamplingSettings,
        device: str = "cpu",
    ):
        if system not in SEQ2SEQ:
            raise ValueError(
                f"{system!r} is not a sentence-level baseline; choose from {', '.join(SEQ2SEQ)}"
            )
        self.system, self.models, self.settings, self.device = system, models, settings, device
        self.stats = {"steps_sampled": 0, "steps_fallback": 0, "empty_steps": 0, "candidates": 0}

    def model_for(self, constraint: str) -> Seq2seqModel:
        """The constraint's own model (Seq2seq Copy), or the one model for all (Transformer)."""
        model = self.models.get(constraint) or self.models.get(None)
        if model is None:
            raise KeyError(f"no {self.system} model for {constraint}")
        return model

    def source_ids(
        self, model: Seq2seqModel, title: str, step: str, constraint: str
    ) -> list[int] | None:
        """The encoder's ids for one step (the no-context text up to the target tag); None when
        they leave no room in the block."""
        text = no_context(title, step, "", constraint).split(
            constraint_tag("tgt", constraint, True)
        )[0]
        ids = model.tokenizer.encode(text.strip(), add_special_tokens=False)
        return ids if len(ids) <= model.block else None

    def rewrite_step(self, task: RewriteTask, n: int, ctx: StepContext) -> dict:
        """The scored candidates for source step n and the one chosen."""
        constraint = task.constraints[0]
        model = self.model_for(constraint)
        step = task.source["steps"][n]
        if not step.strip():
            self.stats["empty_steps"] += 1
            return scored_entry("", ctx, n, "empty source step")
        ids = self.source_ids(model, task.source["title"], step, constraint)
        if ids is None:
            self.stats["steps_fallback"] += 1
            guided = guide_rewrite({**task.source, "steps": [step]}, task.constraints)[0]["steps"][
                0
            ]
            return scored_entry(
                guided, ctx, n, "source step longer than the block: rule-based rewrite"
            )
        tok = model.tokenizer
        start = tok.convert_tokens_to_ids(constraint_tag("tgt", constraint, True))
        settings = SamplingSettings(
            self.settings.top_k,
            self.settings.top_p,
            self.settings.temperature,
            self.settings.candidates,
            min(self.settings.max_new_tokens, model.block - 1),
        )
        tokens, ended = sample_steps(
            model.lm,
            ids,
            start,
            {tok.convert_tokens_to_ids(EOS)},
            settings,
            stable_seed(task.seed, task.id, ",".join(task.constraints), n),
            self.device,
        )
        # Special tokens stay in the text: the selection rules penalise them.
        texts = [
            tok.decode(t, skip_special_tokens=False, clean_up_tokenization_spaces=False).strip()
            for t in tokens
        ]
        chosen, scores = select_best(texts, ctx)
        self.stats["steps_sampled"] += 1
        self.stats["candidates"] += len(texts)
        return {
            "source_step": n,
            "chosen": chosen,
            "candidates": [
                {"text": t, "scores": s, "ended": e} for t, s, e in zip(texts, scores, ended)
            ],
        }

    def rewrite(self, tasks: list[RewriteTask]) -> list[dict]:
        """One rewrites.jsonl record per task: the guide's title and ingredient lines, every source
        step rewritten alone."""
        records = []
        for task in tasks:
            guided, subs = guide_rewrite(task.source, task.constraints)
            names = [ingredient_name(x) for x in guided["ingredients"]]
            words = source_word_set(task.source)
            entries = []
            for n, step in enumerate(task.source["steps"]):
                ctx = StepContext(
                    constraints=task.constraints,
                    source_step=step,
                    ingredient_names=names,
                    source_words=words,
                )
                entries.append(self.rewrite_step(task, n, ctx))
            steps = [e["candidates"][e["chosen"]]["text"] for e in entries]
            records.append(step_record(task, self.system, guided, steps, entries, subs))
        return records

"""Token batches for training: encode texts, truncate the source context from the left
(never the target), and group examples of similar length so little of a batch is padding.

`tokenize_table` runs in Ray Data tasks; `bucket_batches` runs on each training worker.
An example whose target alone does not fit the block keeps its row with length 0, so the
workers can count it instead of losing it silently.
"""

from __future__ import annotations

# torch is imported where used: jobs/train.py and jobs/rewrite.py import this module, and their
# --help and drivers start without it.
import hashlib
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from tokenizers import Tokenizer

from rrt.recipes.lexicon import CONSTRAINTS
from rrt.recipes.paper_format import END_INST, END_PROMPT, INST, constraint_tokens

# Tokens always kept at the start of a truncated example: BOS and the source tag.
HEAD_TOKENS = {
    "contextual": 2,
    "contextual_ing": 2,
    "grounded": 2,
    "grounded_ing": 2,
    "no_context": 2,
    "end_to_end": 2,
    "ing_predictor": 1,
    "no_source": 0,
}
IGNORED = -100  # the label of a position the loss skips, as the library's losses read it
TOKEN_SCHEMA = pa.schema(
    [
        ("input_ids", pa.list_(pa.int32())),
        ("target_start", pa.int32()),
        ("step_start", pa.int32()),
        ("length", pa.int32()),
        ("truncated", pa.bool_()),
    ]
)
# The mark before a contextual text's learned step: the earlier target steps are context at rewrite time.
STEP_MARKS = {
    "contextual": INST,
    "contextual_ing": END_PROMPT,
    "grounded": END_PROMPT,
    "grounded_ing": END_PROMPT,
}
# train.batching: token-budget buckets, a fixed number of examples, or packed rows (rrt.modelling.packing).
_BACKENDS: dict[str, object] = {}


def _backend(tokenizer_json: str):
    """A `tokenizers.Tokenizer`, built once per process for each tokenizer."""
    key = hashlib.sha1(tokenizer_json.encode()).hexdigest()
    if key not in _BACKENDS:
        _BACKENDS[key] = Tokenizer.from_str(tokenizer_json)
    return _BACKENDS[key]


def target_start(variant: str, ids: list[int], markers: set[int]) -> int:
    """Index of the first target token: the `<tgt:…>` tag, the last `<endofinst>` (ingredient
    predictor), or 0 for the plain language model (all of it is target)."""
    if variant == "no_source":
        return 0
    if variant == "ing_predictor":
        spots = [i for i, t in enumerate(ids) if t in markers]
        return spots[-1] + 1 if spots else 0
    return next((i for i, t in enumerate(ids) if t in markers), 0)


def step_start(ids: list[int], start: int, mark: int | None) -> int:
    """Index of a contextual text's learned step, the last target step (just after the last `mark`
    past the target tag, or after the tag itself); `start` when the variant has no such mark."""
    if mark is None:
        return start
    return next((i + 1 for i in range(len(ids) - 1, start, -1) if ids[i] == mark), start + 1)


def fit_block(ids: list[int], start: int, block: int, head: int) -> tuple[list[int], int] | None:
    """Cut the context from the left (after `head` tokens) so the example fits `block`;
    None when the target alone is too long. A plain LM text (start 0) is cut from the right."""
    if len(ids) <= block:
        return ids, start
    if start == 0:
        return ids[:block], 0
    target = len(ids) - start
    head = min(head, start)
    budget = block - head - target
    if budget < 0:
        return None
    return ids[:head] + ids[start - budget : start] + ids[start:], head + budget


def tokenize_table(batch: pa.Table, tokenizer_json: str, variant: str, block: int) -> pa.Table:
    """Encode a batch of training texts into token rows (`TOKEN_SCHEMA`), one row per text."""
    backend = _backend(tokenizer_json)
    marker_tokens = (
        [END_INST] if variant == "ing_predictor" else constraint_tokens(list(CONSTRAINTS))
    )
    markers = {backend.token_to_id(t) for t in marker_tokens} - {None}
    if variant not in ("ing_predictor", "no_source"):
        # Only target tags mark the target; source tags open the text.
        markers = {backend.token_to_id(t) for t in marker_tokens if t.startswith("<tgt:")} - {None}
    mark = backend.token_to_id(STEP_MARKS[variant]) if variant in STEP_MARKS else None
    rows, starts, steps, lengths, truncated = [], [], [], [], []
    for encoding in backend.encode_batch(
        batch.column("text").to_pylist(), add_special_tokens=False
    ):
        ids = encoding.ids
        fitted = fit_block(ids, target_start(variant, ids, markers), block, HEAD_TOKENS[variant])
        if fitted is None:
            (
                rows.append([]),
                starts.append(0),
                steps.append(0),
                lengths.append(0),
                truncated.append(True),
            )
            continue
        kept, start = fitted
        rows.append(kept), starts.append(start), steps.append(step_start(kept, start, mark))
        lengths.append(len(kept)), truncated.append(len(kept) < len(ids))
    return pa.table(
        [
            pa.array(rows, pa.list_(pa.int32())),
            pa.array(starts, pa.int32()),
            pa.array(steps, pa.int32()),
            pa.array(lengths, pa.int32()),
            pa.array(truncated, pa.bool_()),
        ],
        schema=TOKEN_SCHEMA,
    )


@dataclass
class Batch:
    """One micro-batch: padded arrays and how much of it is real tokens. A packed batch
    (rrt.modelling.packing) has position ids instead of an attention mask, and its examples'
    boundaries for variable-length attention (rrt.modelling.varlen)."""

    input_ids: np.ndarray
    attention_mask: np.ndarray | None
    labels: np.ndarray
    real_tokens: int
    total_tokens: int
    position_ids: np.ndarray | None = None
    segments: np.ndarray | None = None

    @property
    def predicted_tokens(self) -> int:
        """Tokens the loss is taken over: the causal LM shifts labels, so a row's first is never predicted."""
        return int((self.labels[:, 1:] != IGNORED).sum())

    def inputs(self, device) -> dict:
        """The model's keyword arguments as tensors on `device` (no key/value cache: training
        never reads one back)."""
        import torch

        arrays = {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "labels": self.labels,
            "position_ids": self.position_ids,
            "cu_seq_lens_q": self.segments,
        }
        tensors = {
            k: torch.from_numpy(v).to(device, non_blocking=True)
            for k, v in arrays.items()
            if v is not None
        }
        if self.segments is not None:
            # The examples in a batch, so the boundaries' length, vary: marked variable from the
            # first batch, a compiled model is built once, not again at the second batch's count.
            torch._dynamo.maybe_mark_dynamic(tensors["cu_seq_lens_q"], 0)
            # Queries and keys share the boundaries; an upper bound on an example's length (the
            # row's width), one value for every batch so a compiled model is not specialised again.
            tensors["cu_seq_lens_k"] = tensors["cu_seq_lens_q"]
            tensors["max_length_q"] = tensors["max_length_k"] = self.input_ids.shape[1]
        return {**tensors, "use_cache": False}


def pad_batch(
    examples: list[tuple[np.ndarray, int]], pad_id: int, loss_on: str, multiple: int = 8
) -> Batch:
    """Right-pad examples to the longest (rounded up to `multiple`); loss on all tokens or from each
    example's start on (`loss_on` target or step: the start the worker gave it)."""
    longest = max(len(ids) for ids, _ in examples)
    width = -(-longest // multiple) * multiple
    input_ids = np.full((len(examples), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(examples), width), dtype=np.int64)
    labels = np.full((len(examples), width), IGNORED, dtype=np.int64)
    for row, (ids, start) in enumerate(examples):
        input_ids[row, : len(ids)] = ids
        mask[row, : len(ids)] = 1
        first = 0 if loss_on == "all" else start
        labels[row, first : len(ids)] = ids[first:]
    real = int(mask.sum())
    return Batch(input_ids, mask, labels, real, int(mask.size))


def token_budget_chunks(examples: list, budget: int, multiple: int = 8) -> list[list]:
    """Cut length-sorted examples into chunks whose padded size (rows x longest) fits `budget`."""
    chunks, current, longest = [], [], 0
    for example in examples:
        width = -(-max(longest, len(example[0])) // multiple) * multiple
        if current and width * (len(current) + 1) > budget:
            chunks.append(current)
            current, width = [], -(-len(example[0]) // multiple) * multiple
        current.append(example)
        longest = width
    if current:
        chunks.append(current)
    return chunks


def bucket_batches(
    window: Iterable[tuple[np.ndarray, int]],
    micro_batch: int,
    pad_id: int,
    loss_on: str,
    rng: random.Random,
    token_budget: int | None = None,
    multiple: int = 8,
) -> Iterator[Batch]:
    """Sort a window of examples by length, cut it into batches and yield them shuffled.

    With a token budget a batch holds as many examples as fit (short ones travel in larger
    batches, so every step carries about the same number of real tokens); without one, each
    batch holds `micro_batch` examples. A last, smaller batch is yielded too. Widths are
    rounded up to `multiple`: on a GPU fewer distinct shapes mean less allocator churn.
    """
    examples = sorted(window, key=lambda example: len(example[0]))
    if token_budget:
        chunks = token_budget_chunks(examples, token_budget, multiple)
    else:
        chunks = [examples[i : i + micro_batch] for i in range(0, len(examples), micro_batch)]
    rng.shuffle(chunks)
    for chunk in chunks:
        yield pad_batch(chunk, pad_id, loss_on, multiple)

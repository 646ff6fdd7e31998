"""Padding-free training batches: examples packed end to end into rows of the block size.

Each example keeps its own positions (they restart at 0), so the model's mask code sees where
one example ends and the next begins and keeps attention inside each example (transformers
builds a block-diagonal causal mask from the position ids when no attention mask is given).
A row's unused tail is padding that forms an example of its own and carries no loss. A row may
be wider than the block (`train.pack_width`): positions restart per example, so none passes the
block. For attention by example (rrt.modelling.varlen) a batch also carries its examples'
boundaries (`Batch.segments`).

    rows = pack_rows(examples, width=256)                       # first-fit, longest first
    batch = packed_batch(rows, pad_id, "target", 256, True)     # input_ids, position_ids, labels, segments
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator

import numpy as np

from rrt.modelling.batching import IGNORED, Batch
from rrt.modelling.varlen import segment_offsets


def pack_rows(
    examples: list[tuple[np.ndarray, int]], width: int
) -> list[list[tuple[np.ndarray, int]]]:
    """Examples grouped into rows of at most `width` tokens: longest first, each into the first
    row with room (first-fit decreasing leaves little of a row empty)."""
    rows: list[list] = []
    room: list[int] = []
    for example in sorted(examples, key=lambda e: len(e[0]), reverse=True):
        size = len(example[0])
        if size > width:
            raise ValueError(f"an example of {size} tokens does not fit a row of {width}")
        slot = next((i for i, left in enumerate(room) if left >= size), None)
        if slot is None:
            rows.append([example])
            room.append(width - size)
        else:
            rows[slot].append(example)
            room[slot] -= size
    return rows


def packed_batch(
    rows: list[list[tuple[np.ndarray, int]]],
    pad_id: int,
    loss_on: str,
    width: int,
    boundaries: bool = False,
) -> Batch:
    """One micro-batch of packed rows: no attention mask, positions restarting per example; with
    `boundaries`, the examples' boundaries for attention by example (train.attention: varlen).

    An example's first token gets no label: the loss shifts labels left, so that label would
    train the previous example's last token to predict this one."""
    input_ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    positions = np.zeros((len(rows), width), dtype=np.int64)
    labels = np.full((len(rows), width), IGNORED, dtype=np.int64)
    real = 0
    for row, examples in enumerate(rows):
        at = 0
        for ids, start in examples:
            end = at + len(ids)
            input_ids[row, at:end] = ids
            positions[row, at:end] = np.arange(len(ids))
            first = max(1, 0 if loss_on == "all" else start)
            labels[row, at + first : end] = ids[first:]
            at = end
        real += at
        # The tail's positions restart too, so it is a separate (padding) example.
        positions[row, at:] = np.arange(width - at)
    # Only a model that reads them gets them: their count varies by batch, and as an input of a
    # compiled model that would compile it again.
    return Batch(
        input_ids,
        None,
        labels,
        real,
        int(input_ids.size),
        positions,
        segment_offsets(positions) if boundaries else None,
    )


def packed_batches(
    window: Iterable[tuple[np.ndarray, int]],
    micro_batch: int,
    width: int,
    pad_id: int,
    loss_on: str,
    rng: random.Random,
    boundaries: bool = False,
) -> Iterator[Batch]:
    """Pack a window of examples into rows of `width` and yield shuffled batches of
    `micro_batch` rows (every batch one shape, the last perhaps fewer rows)."""
    rows = pack_rows(list(window), width)
    rng.shuffle(rows)
    for lo in range(0, len(rows), micro_batch):
        yield packed_batch(rows[lo : lo + micro_batch], pad_id, loss_on, width, boundaries)

"""Timing helpers the training benchmarks share: a GPU sync before a clock read, the plain
autocast training step they compare against, the examples of a tokenized table and their batches."""

from __future__ import annotations


def sync(device) -> None:
    """Wait for the GPU's queued work, so a clock read after it counts that work."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def autocast_step(model, device):
    """A plain training step as a Hugging Face user writes it: bf16 autocast, fused AdamW, clipping."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")

    def step(inputs: dict) -> None:
        """Forward, backward, clip, update."""
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = model(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def scheme_batches(
    scheme: str,
    rows,
    micro: int,
    block: int,
    pad_id: int,
    multiple: int = 8,
    width: int | None = None,
    boundaries: bool = False,
    loss_on: str = "all",
) -> list:
    """The batches of one scheme over shuffled rows: `padded` (every example padded to the block,
    the baseline's), `bucketed` (length-sorted windows cut by a token budget, widths rounded up to
    `multiple`) or `packed` (examples end to end in rows of `width` tokens, the block unless
    given, with the examples' boundaries for train.attention: varlen when `boundaries`; full
    batches only); labels on every token, or on the target with `loss_on` target."""
    import random

    from rrt.modelling.batching import bucket_batches, pad_batch
    from rrt.modelling.packing import packed_batches

    rng = random.Random(0)
    order = list(rows)
    rng.shuffle(order)
    if scheme == "padded":
        return [
            pad_batch(order[i : i + micro], pad_id, loss_on, multiple=block)
            for i in range(0, len(order) - micro + 1, micro)
        ]
    batches = []
    for i in range(0, len(order), micro * 32):
        window = order[i : i + micro * 32]
        if scheme == "packed":
            batches += packed_batches(
                window, micro, width or block, pad_id, loss_on, rng, boundaries
            )
        else:
            batches += bucket_batches(
                window, micro, pad_id, loss_on, rng, token_budget=micro * block, multiple=multiple
            )
    # A window's last packed batch is short; timing full batches keeps every step the same kind of work.
    full = [b for b in batches if b.input_ids.shape[0] == micro] if scheme == "packed" else batches
    return full or batches


def example_rows(table) -> list:
    """(token ids, target start) of every example of a `tokenize_table` table that fits the block."""
    import numpy as np

    return [
        (np.asarray(ids), start)
        for ids, start, n in zip(
            table.column("input_ids").to_pylist(),
            table.column("target_start").to_pylist(),
            table.column("length").to_pylist(),
        )
        if n
    ]

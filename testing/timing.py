"""Timing helpers the training benchmarks share: a GPU sync before a clock read and the plain
autocast training step they compare against."""
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

"""A plain PyTorch training engine with the part of DeepSpeed's engine interface the training
loop uses (call, backward, step, global_steps, module, save and load a checkpoint).

It runs the step a GPU finishes fastest when there is no optimizer state to shard: autocast to
bf16 or fp16 over fp32 weights, torch's fused AdamW, gradient clipping, accumulation, and DDP
across workers when there are several. DeepSpeed adds per-step host work that a single fast GPU
waits on (benchmarks/RESULTS.md); `train.engine` chooses between the two.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

CHECKPOINT = "engine.pt"


class TorchEngine:
    """Forward under autocast, backward (scaled for fp16), and an optimizer step every
    `grad_accum` micro-batches with clipping and the LR schedule."""

    def __init__(
        self, lm, optimizer, schedule, precision: str, grad_accum: int, clipping: float, device
    ):
        self.module, self.optimizer, self.schedule = lm, optimizer, schedule
        self.device, self.grad_accum, self.clipping = device, grad_accum, clipping
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        self.scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        wrapped = lm
        if dist.is_initialized() and dist.get_world_size() > 1:
            wrapped = DistributedDataParallel(
                lm, device_ids=[device.index] if device.type == "cuda" else None
            )
        self.wrapped = wrapped
        self.global_steps, self.micro_steps = 0, 0

    def __call__(self, **inputs):
        """The model's output for one micro-batch, under autocast when the precision asks for it."""
        with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype is not None):
            return self.wrapped(**inputs)

    def backward(self, loss) -> None:
        """Gradients of one micro-batch's loss, averaged over the accumulation."""
        loss = loss / self.grad_accum
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def step(self) -> None:
        """Count a micro-batch; after `grad_accum` of them clip, update and advance the schedule."""
        self.micro_steps += 1
        if self.micro_steps % self.grad_accum:
            return
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        if self.clipping > 0:
            torch.nn.utils.clip_grad_norm_(
                [p for p in self.module.parameters() if p.requires_grad], self.clipping
            )
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.schedule.step()
        self.global_steps += 1

    def save_checkpoint(self, folder: str, tag: str) -> None:
        """Weights, optimizer, schedule and counters in `folder/tag` (rank 0 writes; the others hold the same)."""
        if self.rank != 0:
            return
        os.makedirs(os.path.join(folder, tag), exist_ok=True)
        torch.save(
            {
                "model": self.module.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "schedule": self.schedule.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler else None,
                "global_steps": self.global_steps,
                "micro_steps": self.micro_steps,
            },
            os.path.join(folder, tag, CHECKPOINT),
        )

    def load_checkpoint(self, folder: str, tag: str) -> None:
        """Everything save_checkpoint wrote, onto this worker's device."""
        state = torch.load(
            os.path.join(folder, tag, CHECKPOINT), map_location=self.device, weights_only=True
        )
        self.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        if self.scaler and state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])
        self.global_steps, self.micro_steps = state["global_steps"], state["micro_steps"]

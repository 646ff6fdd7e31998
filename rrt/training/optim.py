"""Optimisation settings: the DeepSpeed config built from `ray_config.yaml` and the LR schedule."""

from __future__ import annotations

import math
from typing import Any


def resolve_precision(precision: str, cuda: bool, bf16_supported: bool) -> str:
    """`auto` means bf16 where the GPU has it, fp16 on older GPUs (V100), fp32 on CPU."""
    if precision != "auto":
        return precision
    if not cuda:
        return "fp32"
    return "bf16" if bf16_supported else "fp16"


def deepspeed_config(block: dict[str, Any], precision: str) -> dict[str, Any]:
    """The DeepSpeed JSON config for one run (ZeRO stage, precision, batch, clipping)."""
    bucket = int(block["bucket_size"])
    config = {
        "train_micro_batch_size_per_gpu": int(block["micro_batch"]),
        "gradient_accumulation_steps": int(block["grad_accum"]),
        "gradient_clipping": float(block["gradient_clipping"]),
        "zero_optimization": {
            "stage": int(block["zero_stage"]),
            "overlap_comm": True,
            "contiguous_gradients": True,
            # Elements per gradient-reduce and all-gather bucket: DeepSpeed's own
            # size suits large models and slows small steps (see benchmarks).
            "reduce_bucket_size": bucket,
            "allgather_bucket_size": bucket,
        },
        # Our optimizer is torch's AdamW, which ZeRO handles but does not list as tested.
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if precision == "fp16":
        config["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}
    elif precision == "bf16":
        config["bf16"] = {"enabled": True}
    return config


def lr_factor(step: int, warmup: int, total: int, schedule: str, min_ratio: float) -> float:
    """Multiplier of the peak LR at an optimizer step: linear warmup, then cosine or linear decay."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    span = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / span)
    decay = 0.5 * (1 + math.cos(math.pi * progress)) if schedule == "cosine" else 1 - progress
    return min_ratio + (1 - min_ratio) * decay

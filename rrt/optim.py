"""Optimisation settings: the DeepSpeed config built from `ray_config.yaml` and the LR schedule."""
from __future__ import annotations

import math
from typing import Any

PRECISIONS = ("auto", "fp32", "fp16", "bf16")
SCHEDULES = ("cosine", "linear")
DEFAULT_BUCKET_SIZE = 5e8  # DeepSpeed's own: elements per ZeRO reduce and all-gather bucket


def resolve_precision(precision: str, cuda: bool, bf16_supported: bool) -> str:
    """`auto` means bf16 where the GPU has it, fp16 on older GPUs (V100), fp32 on CPU."""
    if precision != "auto":
        return precision
    if not cuda:
        return "fp32"
    return "bf16" if bf16_supported else "fp16"


def deepspeed_config(block: dict[str, Any], precision: str) -> dict[str, Any]:
    """The DeepSpeed JSON config for one run (ZeRO stage, precision, batch, clipping)."""
    bucket = int(float(block.get("bucket_size", DEFAULT_BUCKET_SIZE)))
    config = {
        "train_micro_batch_size_per_gpu": int(block.get("micro_batch", 8)),
        "gradient_accumulation_steps": int(block.get("grad_accum", 1)),
        "gradient_clipping": float(block.get("gradient_clipping", 1.0)),
        "zero_optimization": {"stage": int(block.get("zero_stage", 2)), "overlap_comm": True,
                              "contiguous_gradients": True,
                              # Elements per gradient-reduce and all-gather bucket. DeepSpeed's 5e8
                              # suits large models; for the tiny CPU preset it cost about 8% a step.
                              "reduce_bucket_size": bucket, "allgather_bucket_size": bucket},
        # Our optimizer is torch's AdamW, which ZeRO handles but does not list as tested.
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10 ** 9,
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

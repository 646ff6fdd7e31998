"""Training speed as a first-class number: model FLOPs utilisation against the hardware peak."""

from __future__ import annotations

# torch is imported where used: jobs/train.py imports this module, and its --help starts without
# torch.
import time

# Dense peak FLOP/s per device at the precision training uses there (vendor data sheets).
GPU_PEAK_FLOPS = {
    "V100": 125e12,
    "A100": 312e12,
    "H100": 989e12,
    "H200": 989e12,
    "A10": 125e12,
    "L4": 121e12,
    "T4": 65e12,
}


def flops_per_token(parameters: int, trainable: int | None = None, method: str = "full") -> float:
    """Training FLOPs per token: 2N forward, and a backward of 2N for the activations' gradients
    through the trained part plus 2N for the trained weights' gradients. Full: the usual 6N;
    freeze: 2N + 4 x trainable; LoRA: the activations' gradients run through every layer, 4N."""
    trainable = parameters if trainable is None else trainable
    if method == "lora":
        return 4.0 * parameters
    return 2.0 * parameters + 4.0 * trainable


def attention_flops_per_token(layers: int, width: int, context: int) -> float:
    """Training FLOPs per token of attention's score and weighted-sum products, which no weight
    counts: 12 x layers x width x context (PaLM's MFU count, which nanoGPT's figures use)."""
    return 12.0 * layers * width * context


def estimate_mfu(
    parameters: int,
    tokens_per_s: float,
    peak_flops: float,
    trainable: int | None = None,
    method: str = "full",
    extra_flops: float = 0.0,
) -> float:
    """Model FLOPs utilisation: training FLOPs per token (the weights' and `extra_flops`, such as
    attention's) x tokens per second over the hardware peak."""
    flops = flops_per_token(parameters, trainable, method) + extra_flops
    return flops * tokens_per_s / peak_flops if peak_flops > 0 else 0.0


def gpu_peak_flops(device_name: str) -> float | None:
    """The data-sheet peak of a GPU named like `NVIDIA H100 80GB HBM3`, if we know it."""
    for model, flops in GPU_PEAK_FLOPS.items():
        if model in device_name.upper():
            return flops
    return None


def measure_cpu_peak_flops(threads: int, size: int = 1024, seconds: float = 1.0) -> float:
    """FLOP/s of fp32 matrix multiplies on this CPU with `threads` threads (its practical peak)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(size, size), torch.randn(size, size)
        a @ b
        runs, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            a @ b
            runs += 1
        return 2.0 * size**3 * runs / (time.perf_counter() - started)
    finally:
        torch.set_num_threads(previous)


def loaded_allocator() -> str:
    """The malloc this process runs on: tcmalloc, jemalloc, system, or unknown (no /proc)."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as handle:
            maps = handle.read()
    except OSError:
        return "unknown"
    return next((name for name in ("tcmalloc", "jemalloc") if f"lib{name}" in maps), "system")

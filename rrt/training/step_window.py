"""What the training steps since the last metrics line add up to, kept so that no step waits on
the device.

Reading a loss on the host (`float(loss)`) makes the host wait until the GPU has finished that
step; done every step, the GPU then idles while the host fetches and builds the next batch and
launches the next step. So the losses are summed on the device, and the host reads them once, at
the metrics line, with the clock.

    window = StepWindow()
    window.start()                        # before a window's first step
    window.add(loss, batch)               # after each micro-batch: no wait
    window.waited(seconds)                # the host's wait for the next batch
    loss_sum, micro, real, total, seconds, wait = window.totals(device)   # one wait, at the line
"""

from __future__ import annotations

import time

import torch


class StepWindow:
    """The sums of one metrics line: the loss (on the device), micro-batches, real and padded
    tokens, wall seconds and the host's waits for batches."""

    def __init__(self):
        self.loss, self.micro, self.real, self.total, self.wait = 0.0, 0, 0, 0, 0.0
        self.since: float | None = None

    def start(self) -> None:
        """Start the clock at the window's first step (eval and checkpoints before it are not counted)."""
        if self.since is None:
            self.since = time.perf_counter()

    def add(self, loss, batch) -> None:
        """One micro-batch's loss (left on its device) and tokens."""
        self.loss = self.loss + loss.detach().float()
        self.micro += 1
        self.real += batch.real_tokens
        self.total += batch.total_tokens

    def waited(self, seconds: float) -> None:
        """Time the host spent getting the next batch."""
        self.wait += seconds

    def totals(self, device) -> list[float]:
        """[loss sum, micro-batches, real tokens, total tokens, seconds, wait]: the device's queued
        steps are finished first, so the seconds cover them."""
        if getattr(device, "type", device) == "cuda":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - self.since if self.since is not None else 0.0
        return [
            float(self.loss),
            float(self.micro),
            float(self.real),
            float(self.total),
            seconds,
            self.wait,
        ]

"""What crosses from the training job to its Ray Train workers: typed, frozen settings.

`TrainRun` is one run's checked settings (the `train` and `ray` blocks of `ray_config.yaml`
after the profile and flags, with what the job worked out from them); `WorkerPlan` adds what the
driver measured and decided before the workers start. Both pickle as they are, so a worker reads
the same typed values the job checked, not a dict rebuilt from them.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from rrt.baselines.seq2seq import SEQ2SEQ
from rrt.config import RaySettings, TrainSettings


@dataclass(frozen=True)
class TrainRun:
    """One training run: the checked `train` block, the Ray block, and the run's own facts."""

    train: TrainSettings
    ray: RaySettings
    pairs: str  # the prepared step-pair folder the variant reads
    block: int  # tokens per training example
    constraint: str | None = None  # Seq2seq Copy: the one constraint this run trains
    constraints: tuple[str, ...] = ()  # Seq2seq Copy: every constraint of the job
    constraints_given: bool = False  # Seq2seq Copy: chosen by --constraint, not found

    @property
    def data(self) -> str:
        """The prepared data folder (absolute)."""
        return self.train.data

    @property
    def output(self) -> str:
        """The run folder (absolute)."""
        return self.train.output

    def for_constraint(self, constraint: str) -> TrainRun:
        """Seq2seq Copy's run of one constraint, in <output>/<constraint>/."""
        folder = os.path.join(self.output, constraint)
        return dataclasses.replace(
            self, train=self.train.model_copy(update={"output": folder}), constraint=constraint
        )

    def record(self) -> dict[str, Any]:
        """The run's settings as run.json keeps them (and the fingerprint reads them)."""
        train = self.train.model_dump()
        # The from-scratch presets' own rates are folded into deepspeed.lr by the job.
        train["tiny"].pop("lr")
        train["seq2seq"].pop("lr")
        record = {
            **train,
            "pairs": self.pairs,
            "block": self.block,
            "ray": self.ray.model_dump(),
            "constraint": self.constraint,
        }
        if self.constraints:
            record["constraints"] = list(self.constraints)
            record["constraints_given"] = self.constraints_given
        return record


@dataclass(frozen=True)
class BatchPlan:
    """How a worker groups its token rows into micro-batches."""

    variant: str
    micro_batch: int
    bucket_window: int
    batching: str  # tokens | examples | packed
    pad_id: int
    loss_on: str  # step | target | all
    token_budget: int | None = None  # tokens per micro-batch (token batching)
    pack_width: int = 0  # tokens per packed row
    varlen: bool = False  # packed rows keep each example's attention to itself

    @property
    def seq2seq(self) -> bool:
        """An encoder-decoder baseline, whose rows split at the target tag."""
        return self.variant in SEQ2SEQ


@dataclass(frozen=True)
class WorkerPlan:
    """Everything a training worker needs: the run, its batching, and the driver's decisions."""

    run: TrainRun
    batches: BatchPlan
    tokenizer_dir: str
    total_steps: int
    steps_per_epoch: int
    torch_threads: int
    meta: dict[str, Any]  # written into the export's rrt_meta.json

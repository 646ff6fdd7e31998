"""What runs inside the rewrite job's Ray Data stages: the model actor and the baselines.

Each batch is a pyarrow table of tasks in columns (TASK_SCHEMA); each answer is a table of
JSON records, one per task, which the driver appends to rewrites.jsonl as they arrive.
"""

from __future__ import annotations

# torch, transformers and ray are imported where used: jobs/rewrite.py imports this module, and its
# --help, its driver and the Rule-Based and Retrieval tasks run without torch.
import json

import pyarrow as pa

from rrt.baselines.controllable import (
    ControlledRewriter,
    ControlSettings,
    ctrl_writer,
    pplm_writer,
)
from rrt.baselines.pplm import PplmSettings
from rrt.baselines.seq2seq import COPY, SentenceRewriter, constraint_models, load_seq2seq
from rrt.config import RewriteSettings
from rrt.corpus.bow import load_bag
from rrt.evaluation.baselines import retrieval, rule_based
from rrt.modelling.loading import build_rewriter, load_model
from rrt.modelling.rewriter import ENGINE_COUNTS, RewriteTask
from rrt.modelling.sampling import SamplingSettings
from rrt.modelling.scheduler import rewrite_all

ACTOR_KEY = "actor"  # in a call's engine counts: the Ray actor that made the call (not a count)

_LINES = pa.list_(pa.string())
TASK_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("constraints", _LINES),
        ("title", pa.string()),
        ("ingredients", _LINES),
        ("steps", _LINES),
        (
            "non_steps",
            pa.list_(
                pa.struct([("kind", pa.string()), ("text", pa.string()), ("before", pa.int64())])
            ),
        ),
        # Retrieval's pick: a recipe of the dish that obeys the constraints (null when the dish has none).
        (
            "retrieved",
            pa.struct(
                [
                    ("id", pa.string()),
                    ("title", pa.string()),
                    ("ingredients", _LINES),
                    ("steps", _LINES),
                ]
            ),
        ),
    ]
)


def task_table(tasks: list[dict]) -> pa.Table:
    """The planned tasks (id, constraints, source recipe, retrieved recipe) as TASK_SCHEMA columns."""
    return pa.Table.from_pylist(
        [
            {
                "id": t["id"],
                "constraints": list(t["constraints"]),
                "title": t["source"]["title"],
                "ingredients": list(t["source"]["ingredients"]),
                "steps": list(t["source"]["steps"]),
                "non_steps": list(t["source"].get("non_steps") or []),
                "retrieved": {
                    k: (list(v) if k in ("ingredients", "steps") else v)
                    for k, v in t["retrieved"].items()
                }
                if t.get("retrieved")
                else None,
            }
            for t in tasks
        ],
        schema=TASK_SCHEMA,
    )


def _tasks(batch: pa.Table) -> list[RewriteTask]:
    out = []
    for row in batch.to_pylist():
        source = {k: row[k] for k in ("title", "ingredients", "steps")}
        if row["non_steps"]:
            source["non_steps"] = row["non_steps"]
        out.append(RewriteTask(row["id"], row["constraints"], source, retrieved=row["retrieved"]))
    return out


def _seeded_tasks(batch: pa.Table, seed: int) -> list[RewriteTask]:
    """The batch's tasks, each with the run's base seed."""
    tasks = _tasks(batch)
    for task in tasks:
        task.seed = seed
    return tasks


def _actor_device(settings: RewriteSettings) -> str:
    """An actor's device (a GPU when asked for and present), with torch's threads set for it."""
    import torch

    torch.set_num_threads(settings.torch_threads or max(1, int(settings.cpus_per_actor)))
    return "cuda" if settings.use_gpu and torch.cuda.is_available() else "cpu"


def _table(records: list[dict], engine: dict | None = None) -> pa.Table:
    """One row per record; the call's engine counts (JSON) ride on its first row."""
    counts = [json.dumps(engine) if engine and i == 0 else "" for i in range(len(records))]
    return pa.table(
        {"record": [json.dumps(r, ensure_ascii=False) for r in records], "engine": counts}
    )


def _actor_table(records: list[dict], engine: dict | None = None) -> pa.Table:
    """_table for an actor's call, which also names the actor (ACTOR_KEY), so the job can count its actors."""
    import ray

    # Called in-process (no Ray), it names none: asking Ray's context would start a Ray.
    actor = ray.get_runtime_context().get_actor_id() if ray.is_initialized() else None
    return _table(records, {**(engine or {}), ACTOR_KEY: actor})


def rewrite_baseline(batch: pa.Table, system: str) -> pa.Table:
    """Ray Data task: Rule-Based or Retrieval rewrites of a batch of tasks."""
    rewrite = rule_based if system == "rule_based" else retrieval
    return _table([rewrite(task) for task in _tasks(batch)])


class ControlledBatch:
    """Ray Data actor: loads a controllable baseline's LM (CTRL, or the No-Source LM that PPLM
    steers) once, then rewrites batches, one recipe after another."""

    def __init__(self, settings: RewriteSettings):
        import torch

        self.device = _actor_device(settings)
        self.system, self.seed, self.writers = settings.system, settings.seed, {}
        if self.system == "pplm":
            # Gradients flow through the key-value history: fp32 on a GPU too.
            self.model = load_model(settings.model, self.device, half_on_gpu=False)
            block = settings.pplm.model_dump()
            self.bow, length = block.pop("bow"), block.pop("length")
            self.steer = PplmSettings(**block, max_new_tokens=length)
        else:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            half = torch.float16 if self.device == "cuda" else torch.float32
            lm = (
                AutoModelForCausalLM.from_pretrained(settings.model, dtype=half)
                .to(self.device)
                .eval()
            )
            control = ControlSettings(
                **settings.ctrl.model_dump(), max_new_tokens=settings.max_step_tokens
            )
            self.writers[None] = ctrl_writer(
                lm, AutoTokenizer.from_pretrained(settings.model), control, self.device
            )

    def _writer(self, constraints: list[str]):
        """CTRL's writer, or PPLM's steered by the bags of these constraints (made once per set)."""
        key = None if self.system != "pplm" else tuple(constraints)
        if key not in self.writers:
            self.writers[key] = pplm_writer(
                self.model.lm,
                self.model.tokenizer,
                self.steer,
                load_bag(self.bow, list(constraints)),
                self.device,
            )
        return self.writers[key]

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Rewrite every task of the batch."""
        records = []
        for task in _seeded_tasks(batch, self.seed):
            records += ControlledRewriter(self.system, self._writer(task.constraints)).rewrite(
                [task]
            )
        return _actor_table(records)


class Seq2seqBatch:
    """Ray Data actor: loads a sentence-level baseline once (Seq2seq Copy: the model of every
    constraint), then rewrites batches, each step of each recipe on its own."""

    def __init__(self, settings: RewriteSettings):
        device = _actor_device(settings)
        folders = (
            constraint_models(settings.model) if settings.system == COPY else {None: settings.model}
        )
        models = {key: load_seq2seq(folder, device) for key, folder in folders.items()}
        self.seed = settings.seed
        self.rewriter = SentenceRewriter(
            settings.system,
            models,
            SamplingSettings.from_config(settings, candidates=settings.candidates),
            device,
        )

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Rewrite every task of the batch."""
        return _actor_table(self.rewriter.rewrite(_seeded_tasks(batch, self.seed)))


class RewriteBatch:
    """Ray Data actor: loads the system's model(s) once, then rewrites batches of recipes."""

    def __init__(self, settings: RewriteSettings):
        device = _actor_device(settings)
        model = load_model(settings.model, device)
        ing_model = load_model(settings.ing_model, device) if settings.ing_model else None
        self.seed, self.slots = settings.seed, settings.batch_recipes
        self.rewriter = build_rewriter(
            model,
            settings,
            settings.candidates,
            settings.constrained,
            settings.system,
            ing_model,
        )

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Rewrite every task of the batch, batch_recipes at a time, the next joining as one finishes
        (continuous batching, longest first so no long recipe is left to run its last steps alone);
        records in the batch's order. A recipe's rewrite does not depend on which share its rounds."""
        before = {key: self.rewriter.stats[key] for key in ENGINE_COUNTS}
        records = rewrite_all(self.rewriter, _seeded_tasks(batch, self.seed), self.slots)
        return _actor_table(
            records, {key: self.rewriter.stats[key] - before[key] for key in ENGINE_COUNTS}
        )

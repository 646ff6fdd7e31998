"""Document-level controllable baselines: a language model steered by a control prompt writes the
target recipe's steps one at a time, each after the steps it wrote before.

CTRL (Keskar et al., 2019) as the paper's repository ran it: the "Links" control code, then the
constraint, the target recipe's title and its ingredient lines, then numbered steps:
`Links <Constraint> <title> \\n <ingredient 1> \\n … \\n 1. `. Generation stops after as many steps
as the source has. The target's title and ingredient lines are the substitution guide's, the
lines every system of ours starts from.
"""
from __future__ import annotations

from dataclasses import dataclass

from rrt.modelling.rewriter import RewriteTask, guide_rewrite, record, scored_entry, stable_seed
from rrt.modelling.selection import StepContext, source_word_set
from rrt.recipes.ingredients import ingredient_name

CONTROLLABLE = ("ctrl",)


@dataclass
class ControlSettings:
    """How the controllable baseline samples each step (the `rewrite.ctrl` block)."""

    control_code: str
    temperature: float
    top_k: int
    repetition_penalty: float
    max_new_tokens: int


def constraint_name(constraints: list[str]) -> str:
    """The constraint as the prompt names it: `Vegan`, `Dairy-free, nut-free`."""
    text = ", ".join(constraints)
    return text[:1].upper() + text[1:]


def ctrl_prompt(code: str, constraints: list[str], title: str, ingredients: list[str], done: list[str]) -> str:
    """The prompt for the next step: control code, constraint, title, ingredient lines, the
    steps written so far with their numbers, and the next step's number."""
    head = " \n ".join([f"{code} {constraint_name(constraints)} {title}", *ingredients])
    steps = "".join(f"{n}. {step} \n " for n, step in enumerate(done, 1))
    return f"{head} \n {steps}{len(done) + 1}. "


def first_line(text: str) -> str:
    """The generated step: the text up to the first line break, trimmed."""
    return text.split("\n", 1)[0].strip()


class ControlledRewriter:
    """Rewrites recipes step by step with a control-prompted LM (one sample per step, seeded per
    recipe and step, so a recipe's rewrite does not depend on its batch)."""

    def __init__(self, system: str, lm, tokenizer, settings: ControlSettings, device: str = "cpu"):
        if system not in CONTROLLABLE:
            raise ValueError(f"{system!r} is not a controllable baseline; choose from {', '.join(CONTROLLABLE)}")
        self.system, self.lm, self.tokenizer, self.settings, self.device = system, lm, tokenizer, settings, device
        self.stats = {"steps_sampled": 0, "empty_steps": 0}

    def _step(self, prompt: str, seed: int) -> str:
        import torch

        ids = self.tokenizer(prompt, return_tensors="pt").input_ids.to(self.device)
        limit = getattr(self.lm.config, "n_positions", None) or getattr(self.lm.config, "max_position_embeddings", 0)
        if limit:
            # The ingredient lines and earlier steps grow the prompt; keep the control code and the end.
            room = max(1, limit - self.settings.max_new_tokens)
            if ids.shape[1] > room:
                ids = torch.cat([ids[:, :1], ids[:, ids.shape[1] - room + 1:]], dim=1)
        torch.manual_seed(seed)
        s = self.settings
        out = self.lm.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=s.temperature,
                               top_k=s.top_k, repetition_penalty=s.repetition_penalty,
                               max_new_tokens=s.max_new_tokens, pad_token_id=self.tokenizer.pad_token_id
                               if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id,
                               stop_strings=["\n"], tokenizer=self.tokenizer)
        return first_line(self.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True))

    def rewrite(self, tasks: list[RewriteTask]) -> list[dict]:
        """One rewrites.jsonl record per task: the guide's title and ingredient lines, and as many
        generated steps as the source has, each scored by the selection rules."""
        records = []
        for task in tasks:
            guided, subs = guide_rewrite(task.source, task.constraints)
            done: list[str] = []
            entries = []
            names = [ingredient_name(x) for x in guided["ingredients"]]
            for n, source_step in enumerate(task.source["steps"]):
                prompt = ctrl_prompt(self.settings.control_code, task.constraints, guided["title"],
                                     guided["ingredients"], done)
                step = self._step(prompt, stable_seed(task.seed, task.id, ",".join(task.constraints), n))
                self.stats["steps_sampled"] += 1
                self.stats["empty_steps"] += not step
                done.append(step)
                ctx = StepContext(constraints=task.constraints, source_step=source_step, ingredient_names=names,
                                  source_words=source_word_set(task.source))
                entries.append(scored_entry(step, ctx, n))
            rewrite = {"title": guided["title"], "ingredients": guided["ingredients"], "steps": done}
            records.append(record(task, self.system, False, rewrite, entries, subs,
                                  [] if task.source["steps"] else ["the source recipe has no steps"]))
        return records

"""Document-level controllable baselines: a steered language model writes the target recipe's
steps one at a time, each after the steps it wrote before, and stops after as many steps as the
source has. The target's title and ingredient lines are the substitution guide's, the lines
every system of ours starts from.

- CTRL (Keskar et al., 2019) as the paper's repository ran it: the "Links" control code, then the
  constraint, the title and the ingredient lines, then numbered steps:
  `Links <Constraint> <title> \\n <ingredient 1> \\n … \\n 1. `.
- PPLM (rrt.baselines.pplm): our No-Source recipe LM, prompted in its own format with the title,
  ingredient lines and steps so far, steered by the constraint's bag of words.
"""

from __future__ import annotations

# torch is imported where used: jobs/rewrite.py imports this module, and its --help and driver
# start without torch.
from dataclasses import dataclass

from rrt.baselines.pplm import generate, word_token_ids
from rrt.modelling.prompts import step_prompt
from rrt.modelling.rewriter import (
    RewriteTask,
    guide_rewrite,
    scored_entry,
    stable_seed,
    step_record,
)
from rrt.modelling.selection import StepContext, source_word_set
from rrt.recipes.ingredients import ingredient_name
from rrt.recipes.paper_format import END_INST, EOS

CONTROLLABLE = ("ctrl", "pplm")


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


def ctrl_prompt(
    code: str, constraints: list[str], title: str, ingredients: list[str], done: list[str]
) -> str:
    """The prompt for the next step: control code, constraint, title, ingredient lines, the
    steps written so far with their numbers, and the next step's number."""
    head = " \n ".join([f"{code} {constraint_name(constraints)} {title}", *ingredients])
    steps = "".join(f"{n}. {step} \n " for n, step in enumerate(done, 1))
    return f"{head} \n {steps}{len(done) + 1}. "


def first_line(text: str) -> str:
    """The generated step: the text up to the first line break, trimmed."""
    return text.split("\n", 1)[0].strip()


def ctrl_writer(lm, tokenizer, settings: ControlSettings, device: str = "cpu"):
    """CTRL's step writer: (guided recipe, constraints, steps so far, seed) -> the next step."""

    def write(guided: dict, constraints: list[str], done: list[str], seed: int) -> str:
        """The next step from the Links prompt, up to its line break."""
        import torch

        prompt = ctrl_prompt(
            settings.control_code, constraints, guided["title"], guided["ingredients"], done
        )
        ids = _fit(
            tokenizer(prompt, return_tensors="pt").input_ids, lm, settings.max_new_tokens
        ).to(device)
        torch.manual_seed(seed)
        pad = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        )
        out = lm.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            temperature=settings.temperature,
            top_k=settings.top_k,
            repetition_penalty=settings.repetition_penalty,
            max_new_tokens=settings.max_new_tokens,
            pad_token_id=pad,
            stop_strings=["\n"],
            tokenizer=tokenizer,
        )
        return first_line(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))

    return write


def pplm_writer(lm, tokenizer, settings, words: list[str], device: str = "cpu"):
    """PPLM's step writer on a No-Source LM: the next step in the LM's own format, steered by `words`."""
    bag = word_token_ids(tokenizer, words)
    stops = {tokenizer.convert_tokens_to_ids(t) for t in (END_INST, EOS)}

    def write(guided: dict, constraints: list[str], done: list[str], seed: int) -> str:
        """The next step after the recipe's title, ingredient lines and steps so far."""
        import torch

        prompt = step_prompt(
            "no_source", guided, len(done), done, ",".join(constraints), rewritten=guided
        )
        ids = _fit(
            torch.tensor([tokenizer.encode(prompt, add_special_tokens=False)]),
            lm,
            settings.max_new_tokens,
        )
        new = generate(lm, ids[0].tolist(), bag, stops, settings, seed, device)
        return tokenizer.decode(new, skip_special_tokens=True).strip()

    return write


def _fit(ids, lm, room_for: int):
    """The prompt's ids cut from the left (its first token kept) to leave room for the new tokens."""
    import torch

    limit = getattr(lm.config, "n_positions", None) or getattr(
        lm.config, "max_position_embeddings", 0
    )
    room = max(1, limit - room_for) if limit else ids.shape[1]
    return (
        ids
        if ids.shape[1] <= room
        else torch.cat([ids[:, :1], ids[:, ids.shape[1] - room + 1 :]], dim=1)
    )


class ControlledRewriter:
    """Rewrites recipes step by step with a steered LM: one sample per step, seeded per recipe and
    step, so a recipe's rewrite does not depend on its batch."""

    def __init__(self, system: str, write):
        if system not in CONTROLLABLE:
            raise ValueError(
                f"{system!r} is not a controllable baseline; choose from {', '.join(CONTROLLABLE)}"
            )
        self.system, self.write = system, write
        self.stats = {"steps_sampled": 0, "empty_steps": 0}

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
                step = self.write(
                    guided,
                    task.constraints,
                    done,
                    stable_seed(task.seed, task.id, ",".join(task.constraints), n),
                )
                self.stats["steps_sampled"] += 1
                self.stats["empty_steps"] += not step
                done.append(step)
                ctx = StepContext(
                    constraints=task.constraints,
                    source_step=source_step,
                    ingredient_names=names,
                    source_words=source_word_set(task.source),
                )
                entries.append(scored_entry(step, ctx, n))
            records.append(step_record(task, self.system, guided, done, entries, subs))
        return records

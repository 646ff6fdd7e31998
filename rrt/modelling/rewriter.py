"""Document-level rewriting: every recipe of a batch advances one step per round.

For step n a recipe's prompt holds its source context and its own best rewrites of steps
1..n-1; the prompts of all recipes in the batch are sampled together (`rrt.modelling.sampling`), ten
candidates each, and the best candidate by the selection rules becomes step n. Title and
ingredient lines are rewritten by the substitution guide. The records written here are the
lines of `rewrites.jsonl`.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field, replace

from rrt.modelling.constrained import guard_text, shared_guard
from rrt.modelling.editing import STEP_SCOPES, choose_edit, step_affected
from rrt.modelling.prompts import (
    SPECIAL_NAMES,
    STEP_VARIANTS,
    STOPS,
    fit_prompt,
    parse_ingredients,
    parse_recipe,
    protected_span,
    recipe_prompt,
    step_prompt,
)
from rrt.modelling.sampling import CandidateSampler, SamplingSettings
from rrt.modelling.selection import StepContext, score_candidate, select_best, source_word_set
from rrt.recipes.cook_dishes import tofu_scramble
from rrt.recipes.cook_lines import adapt_lines
from rrt.recipes.cook_notes import adapt_steps, place_notes
from rrt.recipes.foods import held_words
from rrt.recipes.ingredients import ingredient_name, step_ingredients
from rrt.recipes.paper_format import INST
from rrt.recipes.recipe import Recipe
from rrt.recipes.substitutions import substitute_recipe

# The rewriter's counts of where a round's time goes, as jobs and benchmarks report them.
# The static decode step's counts a rewriter reports, each read from its CandidateSampler's counts:
# caches made (on a GPU, each with its graph captures), captures, kept caches evicted, batches too big for one.
STATIC_COUNTS = {
    "static_caches": "decoders",
    "graph_captures": "captures",
    "cache_evictions": "evictions",
    "no_room": "no_room",
}
# words_taken_back: forbidden words the guard took back while sampling (rrt.modelling.guarded_row).
ENGINE_COUNTS = (
    "rounds",
    "prompting_s",
    "sampling_s",
    "selection_s",
    "words_taken_back",
    *STATIC_COUNTS,
)

# system -> the training variant of its model; None for the two systems without a model.
SYSTEMS = {
    "rule_based": None,
    "retrieval": None,
    "no_source": "no_source",
    "end_to_end": "end_to_end",
    "no_context": "no_context",
    "contextual": "contextual",
    "contextual_rule": "contextual_ing",
    "contextual_gpt2": "contextual_ing",
    "grounded": "grounded",
    "grounded_rule": "grounded_ing",
}
# The variants whose prompt carries the next step's ingredients, and the systems that name them by rule.
PROMPTED = ("contextual_ing", "grounded_ing")
RULE_PROMPT = ("contextual_rule", "grounded_rule")
# Prompts per forward pass (each with its candidates): a round's prompts, chunked by length.
BATCH_PROMPTS = 64


def stable_seed(*keys) -> int:
    """A seed from any keys that is the same in every process and run."""
    return int.from_bytes(
        hashlib.sha256("\x1f".join(map(str, keys)).encode()).digest()[:8], "little"
    )


@dataclass
class RewriteTask:
    """One recipe to rewrite: its id, constraints, source recipe and base seed."""

    id: str
    constraints: list[str]
    source: dict
    seed: int = 0
    retrieved: dict | None = None


@dataclass
class RecipeState:
    """A recipe part-way through its rewrite: the steps chosen so far and their records."""

    task: RewriteTask
    rewritten: dict
    substitutions: list[dict]
    names: list[str]
    words: frozenset
    done: list[str] = field(default_factory=list)
    entries: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    step: int = 0
    guide_steps: list[str] = field(default_factory=list)
    held: frozenset = (
        frozenset()
    )  # the words a food in a rewritten step may use (rrt.recipes.foods)
    rules: str = "paper"  # the selection's rule set (rrt.modelling.selection.SELECTIONS)
    guard: object | None = None  # the constrained decoding guard of this recipe (None: unguarded)

    @property
    def finished(self) -> bool:
        """Every source step has its rewrite."""
        return self.step >= len(self.task.source["steps"])


def guide_rewrite(source: dict, constraints: list[str]) -> tuple[dict, list[dict]]:
    """The substitution guide's whole-recipe rewrite and its substitutions (record form)."""
    recipe = Recipe("", source["title"], list(source["ingredients"]), list(source["steps"]))
    result = substitute_recipe(recipe, constraints)
    subs = [
        {
            "field": s.field,
            "index": s.index,
            "original": s.from_text,
            "replacement": s.to_text,
            "constraint": s.constraint,
        }
        for s in result.substitutions
    ]
    return {
        "title": result.recipe.title,
        "ingredients": result.recipe.ingredients,
        "steps": result.recipe.steps,
    }, subs


def step_context(state: RecipeState, n: int) -> StepContext:
    """What the selection rules need to judge candidates for source step n."""
    return StepContext(
        constraints=state.task.constraints,
        source_step=state.task.source["steps"][n],
        ingredient_names=state.names,
        source_words=state.words,
        held_foods=state.held,
        rules=state.rules,
    )


def scored_entry(
    text: str, ctx: StepContext, source_step: int | None, note: str = "", decision: str = ""
) -> dict:
    """A step written without sampling (kept, guide, retrieval, fallback), scored like any candidate;
    a model rewriter's `decision` says whose version it is (rrt.modelling.editing.DECISIONS)."""
    entry = {
        "source_step": source_step,
        "candidates": [{"text": text, "scores": score_candidate(text, ctx)}],
        "chosen": 0,
    }
    if decision:
        entry["decision"] = decision
    return {**entry, "note": note} if note else entry


def carried_lines(task: RewriteTask) -> list[dict]:
    """The source's method lines that are not steps (headers, notes, storage tips), each before
    the step it preceded, with the guide's stand-ins for any forbidden food they name: they are
    not rewritten by a model, but a section keeps its heading."""
    lines = list(task.source.get("non_steps") or [])
    if not lines:
        return []
    source = Recipe(
        "", task.source["title"], list(task.source["ingredients"]), [line["text"] for line in lines]
    )
    guided = substitute_recipe(source, task.constraints).recipe.steps
    return [{**line, "text": text} for line, text in zip(lines, guided)]


def record(
    task: RewriteTask,
    system: str,
    constrained: bool,
    rewrite: dict,
    entries: list[dict],
    substitutions: list[dict],
    notes: list[str],
) -> dict:
    """One line of rewrites.jsonl."""
    source = {"id": task.id, **{k: task.source[k] for k in ("title", "ingredients", "steps")}}
    carried = carried_lines(task)
    if carried:
        source["non_steps"] = list(task.source["non_steps"])
        rewrite = {**rewrite, "non_steps": carried}
    return {
        "id": task.id,
        "constraint": ",".join(task.constraints),
        "system": system,
        "constrained": constrained,
        "source": source,
        "rewrite": rewrite,
        "steps": entries,
        "substitutions": substitutions,
        "notes": notes,
    }


def step_record(
    task: RewriteTask,
    system: str,
    guided: dict,
    steps: list[str],
    entries: list[dict],
    substitutions: list[dict],
) -> dict:
    """The record of a baseline that writes only the steps, after the guide's title and ingredient
    lines, unconstrained."""
    rewrite = {"title": guided["title"], "ingredients": guided["ingredients"], "steps": steps}
    notes = [] if task.source["steps"] else ["the source recipe has no steps"]
    return record(task, system, False, rewrite, entries, substitutions, notes)


class Rewriter:
    """A trained model (and, for Contextual + GPT-2 prompt, the next-ingredient model) that
    rewrites batches of recipes with best-of-N selection."""

    def __init__(
        self,
        system: str,
        lm,
        tokenizer,
        block_size: int,
        settings: SamplingSettings,
        *,
        recipe_tokens: int,
        selection: str,
        closed_foods: bool,
        steps: str,
        constrained: bool = False,
        ing_lm=None,
        ing_tokenizer=None,
        device: str = "cpu",
        plan: str | None = None,
    ):
        """`steps` is which steps the model rewrites (rrt.modelling.editing: affected, the product's
        edit, or every, the paper's); `plan` is how candidates are decoded
        (rrt.modelling.sampling.decode_plan; default: the device's), named only to compare the plans
        on one device."""
        if SYSTEMS.get(system) is None:
            raise ValueError(
                f"{system!r} is not a model system; choose from "
                f"{', '.join(s for s, v in SYSTEMS.items() if v)}"
            )
        if system == "contextual_gpt2" and ing_lm is None:
            raise ValueError("contextual_gpt2 needs the next-ingredient model (--ing-model)")
        self.system, self.variant = system, SYSTEMS[system]
        self.lm, self.tokenizer, self.block = lm, tokenizer, block_size
        self.settings, self.constrained = settings, constrained
        if steps not in STEP_SCOPES:
            raise ValueError(f"steps is one of {', '.join(STEP_SCOPES)}, not {steps!r}")
        self.selection, self.closed_foods = selection, closed_foods
        # End-to-End writes whole recipes, so it has no step to keep.
        self.edit = steps == "affected" and SYSTEMS[system] != "end_to_end"
        self.ing_lm, self.ing_tokenizer = ing_lm, ing_tokenizer
        self.recipe_tokens, self.device = recipe_tokens, device
        # One sampler per model, each decoding by its device's plan and keeping its caches.
        self.samplers = {id(lm): CandidateSampler(lm, device, plan)}
        if ing_lm is not None and id(ing_lm) not in self.samplers:
            self.samplers[id(ing_lm)] = CandidateSampler(ing_lm, device, plan)
        self.plan = self.samplers[id(lm)].plan
        self.special = {name: tokenizer.convert_tokens_to_ids(name) for name in SPECIAL_NAMES}
        self.stats = {
            "steps_sampled": 0,
            "steps_kept": 0,
            "steps_guide": 0,
            "steps_model": 0,
            "steps_fallback": 0,
            "empty_steps": 0,
            "recipes_without_steps": 0,
            "guard_stops": 0,
            "words_taken_back": 0,
            "candidates": 0,
            "rounds": 0,
            "prompting_s": 0.0,
            "sampling_s": 0.0,
            "selection_s": 0.0,
            **dict.fromkeys(STATIC_COUNTS, 0),
        }

    def _stop_ids(self, variant: str, tokenizer) -> set[int]:
        named = {t: tokenizer.convert_tokens_to_ids(t) for t in STOPS[variant]}
        # A name the tokenizer lacks maps to None or to its unknown token: not a stop.
        ids = {
            i for t, i in named.items() if i is not None and tokenizer.convert_ids_to_tokens(i) == t
        }
        if variant in STEP_VARIANTS:
            ids |= {i for i, token in tokenizer.added_tokens_decoder.items() if token.special}
        return ids

    @staticmethod
    def _banned_ids(tokenizer) -> tuple[int, ...]:
        # Padding is masked out of every label, so a model never learns to write it; a briefly
        # fine-tuned pretrained one still draws it where its starting embedding (a space) fits.
        pad = tokenizer.pad_token_id
        return (pad,) if pad is not None and pad != tokenizer.eos_token_id else ()

    def _guard(self, constraints: list[str]):
        if not self.constrained:
            return None
        # Kept per tokenizer, not per rewriter: a replica's rewriters (one per candidates value) and a
        # request's order of its constraints share one guard.
        return shared_guard(
            self.tokenizer, constraints, self._stop_ids(self.variant, self.tokenizer)
        )

    def decode(self, ids: list[int], tokenizer=None) -> str:
        """Generated token ids as text, special tokens kept (the selection rules penalise them)."""
        tok = tokenizer or self.tokenizer
        return tok.decode(
            ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
        ).strip()

    def _sample(
        self,
        jobs: list[tuple],
        settings: SamplingSettings,
        lm=None,
        variant: str | None = None,
        tokenizer=None,
    ) -> list:
        """Sample every (prompt ids, seed, guard) job, in length-sorted chunks."""
        lm, tokenizer = lm or self.lm, tokenizer or self.tokenizer
        sampler = self.samplers[id(lm)]
        stops = self._stop_ids(variant or self.variant, tokenizer)
        settings = replace(settings, banned=self._banned_ids(tokenizer))
        order = sorted(range(len(jobs)), key=lambda i: len(jobs[i][0]))
        out: list = [None] * len(jobs)
        started, before = time.perf_counter(), dict(sampler.counts)
        for lo in range(0, len(order), BATCH_PROMPTS):
            chunk = order[lo : lo + BATCH_PROMPTS]
            results = sampler.sample(
                [jobs[i][0] for i in chunk],
                [jobs[i][1] for i in chunk],
                stops,
                tokenizer.pad_token_id,
                settings,
                guards=[jobs[i][2] for i in chunk],
            )
            for i, result in zip(chunk, results):
                out[i] = result
        self.stats["sampling_s"] += time.perf_counter() - started
        for ours, theirs in STATIC_COUNTS.items():
            self.stats[ours] += sampler.counts[theirs] - before.get(theirs, 0)
        return out

    def prompt_ids(self, text: str, variant: str, tokenizer=None) -> list[int] | None:
        """A prompt's token ids fitted to the block (room left for the new text); None if it cannot fit."""
        return self.prompts_ids([text], variant, tokenizer)[0]

    def prompts_ids(self, texts: list[str], variant: str, tokenizer=None) -> list[list[int] | None]:
        """Each prompt's token ids fitted to the block, as `prompt_ids`, the texts tokenized in one call."""
        tok = tokenizer or self.tokenizer
        special = (
            self.special
            if tok is self.tokenizer
            else {n: tok.convert_tokens_to_ids(n) for n in SPECIAL_NAMES}
        )
        max_new = self.recipe_tokens if variant == "end_to_end" else self.settings.max_new_tokens
        fitted = []
        # Each prompt is a whole document, so tokenizing is most of a round's prompt work, and a fast
        # tokenizer encodes a batch on all the host's cores.
        for ids in tok(texts, add_special_tokens=False)["input_ids"] if texts else []:
            head, tail, steps_from = protected_span(variant, ids, special)
            fitted.append(
                fit_prompt(ids, head, tail, self.block - max_new, steps_from, {special[INST]})
            )
        return fitted

    def _finish(self, text: str, state: RecipeState) -> str:
        """A candidate's final text; constrained, a word left open at the end is checked too."""
        if not self.constrained:
            return text
        return guard_text(text, state.task.constraints, state.held if self.closed_foods else None)

    def start(self, task: RewriteTask) -> RecipeState:
        """A recipe's rewrite state: guide-rewritten title and ingredients, no steps yet."""
        rewritten, subs = guide_rewrite(task.source, task.constraints)
        if self.edit:
            # The product's guide chooses stand-ins by the dish too, and drops the words of a line
            # that its swap makes untrue.
            rewritten, subs = tofu_scramble(task.source, rewritten, subs)
            rewritten["ingredients"] = adapt_lines(rewritten["ingredients"], subs, task.constraints)
        state = RecipeState(
            task,
            {"title": rewritten["title"], "ingredients": rewritten["ingredients"], "steps": []},
            subs,
            [ingredient_name(line) for line in rewritten["ingredients"]],
            source_word_set(task.source),
        )
        state.guide_steps = rewritten["steps"]
        if self.edit:
            # The product's guide also changes the cues a swap makes untrue and adds its notes.
            state.guide_steps = [
                place_notes(step, notes)
                for step, notes in adapt_steps(
                    task.source["steps"], rewritten["steps"], subs, task.constraints
                )
            ]
        state.rules = self.selection
        state.held = held_words(rewritten, task.source)
        guard = self._guard(task.constraints)
        state.guard = guard.closed(state.held) if guard is not None and self.closed_foods else guard
        if not task.source["steps"]:
            state.notes.append("the source recipe has no steps")
            self.stats["recipes_without_steps"] += 1
        return state

    def _ingredient_prompts(self, states: list[RecipeState]) -> dict[int, list[str]]:
        """The ingredients each recipe's next step should use (rule method or predictor model)."""
        prompts: dict[int, list[str]] = {}
        if self.system in RULE_PROMPT:
            for k, state in enumerate(states):
                # Source step's ingredients, named as in the guide-rewritten ingredient list.
                mentioned = step_ingredients(
                    state.task.source["steps"][state.step],
                    [ingredient_name(x) for x in state.task.source["ingredients"]],
                )
                prompts[k] = [state.names[m.index] for m in mentioned]
            return prompts
        jobs, owners = [], []
        texts = [
            step_prompt(
                "ing_predictor", state.task.source, state.step, state.done, "", state.rewritten
            )
            for state in states
        ]
        for k, (state, ids) in enumerate(
            zip(states, self.prompts_ids(texts, "ing_predictor", self.ing_tokenizer))
        ):
            if ids is None:
                prompts[k] = []
                continue
            jobs.append((ids, stable_seed(state.task.seed, state.task.id, "ing", state.step), None))
            owners.append(k)
        greedy = SamplingSettings(
            top_k=1, top_p=1.0, temperature=1.0, candidates=1, max_new_tokens=48
        )
        for k, result in zip(
            owners, self._sample(jobs, greedy, self.ing_lm, "ing_predictor", self.ing_tokenizer)
        ):
            prompts[k] = parse_ingredients(self.decode(result.tokens[0], self.ing_tokenizer))
        return prompts

    def _kept(self, state: RecipeState) -> bool:
        """Whether the recipe's next step is one the guide leaves alone (kept as it is, its entry
        recorded): the product rewrites only affected steps."""
        n = state.step
        source_step = state.task.source["steps"][n]
        # An empty source step is recorded as such where prompts are built.
        if not source_step.strip() or step_affected(source_step, state.guide_steps[n]):
            return False
        state.entries.append(
            scored_entry(state.guide_steps[n], step_context(state, n), n, "", "kept")
        )
        self.stats["steps_kept"] += 1
        return True

    def _step_prompt(self, state: RecipeState, ingredients: list[str] | None) -> str | None:
        """The prompt of a recipe's next step; None when its source step is empty (that entry recorded)."""
        n, source = state.step, state.task.source
        if not source["steps"][n].strip():
            state.entries.append(
                scored_entry("", step_context(state, n), n, "empty source step", "kept")
            )
            self.stats["empty_steps"] += 1
            return None
        # The models learned one tag per example: the first constraint picks it, and the
        # selection rules (and the guard) hold the rewrite to all of them.
        return step_prompt(
            self.variant,
            source,
            n,
            state.done,
            state.task.constraints[0],
            state.rewritten,
            ingredients,
        )

    def _step_job(self, state: RecipeState, ids: list[int] | None) -> tuple | None:
        """The (prompt ids, seed, guard) job of a recipe's next step; None when its prompt cannot
        fit the block (the guide's rewrite recorded)."""
        n = state.step
        if ids is None:
            state.entries.append(
                scored_entry(
                    state.guide_steps[n],
                    step_context(state, n),
                    n,
                    "source step longer than the block: rule-based rewrite",
                    "guide",
                )
            )
            self.stats["steps_fallback"] += 1
            return None
        seed = stable_seed(state.task.seed, state.task.id, ",".join(state.task.constraints), n)
        return ids, seed, state.guard

    def _choose(self, state: RecipeState, result) -> None:
        """A sampled step's candidates scored and the best chosen (its entry recorded)."""
        texts = [self._finish(self.decode(t), state) for t in result.tokens]
        ctx, ended = step_context(state, state.step), list(result.ended)
        if self.edit:
            # The guide's version is candidate 0: the floor a sample must beat.
            chosen, scores, decision = choose_edit(state.guide_steps[state.step], texts, ctx)
            texts, ended = [state.guide_steps[state.step], *texts], ["guide", *ended]
            self.stats[f"steps_{decision}"] += 1
        else:
            (chosen, scores), decision = select_best(texts, ctx), "model"
        state.entries.append(
            {
                "source_step": state.step,
                "chosen": chosen,
                "decision": decision,
                "candidates": [
                    {"text": t, "scores": s, "ended": e} for t, s, e in zip(texts, scores, ended)
                ],
            }
        )
        self.stats["steps_sampled"] += 1
        self.stats["candidates"] += len(result.tokens)
        self.stats["guard_stops"] += result.ended.count("guard")
        self.stats["words_taken_back"] += result.taken_back

    @staticmethod
    def _close_step(state: RecipeState) -> None:
        """The step's chosen text becomes the recipe's, and the recipe moves to its next step."""
        entry = state.entries[-1]
        state.done.append(entry["candidates"][entry["chosen"]]["text"])
        state.step += 1

    def _round(self, states: list[RecipeState]) -> None:
        """Rewrite the next step of every unfinished recipe."""
        live = [s for s in states if not s.finished]
        self.stats["rounds"] += 1
        started = time.perf_counter()
        changing = [s for s in live if not (self.edit and self._kept(s))]
        ing_prompts = self._ingredient_prompts(changing) if self.variant in PROMPTED else {}
        texts, writing = [], []
        for k, state in enumerate(changing):
            text = self._step_prompt(state, ing_prompts.get(k))
            if text is not None:
                texts.append(text)
                writing.append(state)
        jobs, owners = [], []
        for state, ids in zip(writing, self.prompts_ids(texts, self.variant)):
            job = self._step_job(state, ids)
            if job is not None:
                jobs.append(job)
                owners.append(state)
        self.stats["prompting_s"] += time.perf_counter() - started
        sampled = self._sample(jobs, self.settings)
        started = time.perf_counter()
        for state, result in zip(owners, sampled):
            self._choose(state, result)
        for state in live:
            self._close_step(state)
        self.stats["selection_s"] += time.perf_counter() - started

    def _end_to_end(self, states: list[RecipeState]) -> None:
        """End-to-End: N whole target recipes per source, the best by its steps' mean score."""
        jobs, owners = [], []
        for state in states:
            if not state.task.source["steps"]:
                continue
            ids = self.prompt_ids(
                recipe_prompt(state.task.source, state.task.constraints[0]), "end_to_end"
            )
            if ids is None:
                state.notes.append("source recipe longer than the block: rule-based rewrite")
                state.done = list(state.guide_steps)
                self.stats["steps_fallback"] += len(state.done)
                continue
            jobs.append(
                (
                    ids,
                    stable_seed(state.task.seed, state.task.id, ",".join(state.task.constraints)),
                    self._guard(state.task.constraints),
                )
            )
            owners.append(state)
        settings = SamplingSettings(
            self.settings.top_k,
            self.settings.top_p,
            self.settings.temperature,
            self.settings.candidates,
            self.recipe_tokens,
        )
        for state, result in zip(owners, self._sample(jobs, settings)):
            ctx = StepContext(
                state.task.constraints,
                " ".join(state.task.source["steps"]),
                state.names,
                state.words,
            )
            recipes = [parse_recipe(self._finish(self.decode(t), state)) for t in result.tokens]
            candidates = []
            for generated, ended in zip(recipes, result.ended):
                step_scores = [score_candidate(s, ctx)["total"] for s in generated["steps"]] or [
                    0.0
                ]
                candidates.append(
                    {
                        "text": "\n".join(generated["steps"]),
                        "recipe": generated,
                        "ended": ended,
                        "scores": {"total": round(sum(step_scores) / len(step_scores), 4)},
                    }
                )
            chosen = min(
                range(len(candidates)), key=lambda i: (-candidates[i]["scores"]["total"], i)
            )
            best = candidates[chosen]["recipe"]
            state.entries.append({"source_step": None, "chosen": chosen, "candidates": candidates})
            state.done = best["steps"]
            if best["title"]:
                state.rewritten["title"] = best["title"]
            if best["ingredients"]:
                state.rewritten["ingredients"] = best["ingredients"]
            self.stats["steps_sampled"] += 1
            self.stats["candidates"] += len(candidates)

    def advance(self, states: list[RecipeState]) -> None:
        """One round: the next step of every unfinished recipe (End-to-End: the whole recipe)."""
        live = [s for s in states if not s.finished]
        if not live:
            return
        if self.variant == "end_to_end":
            self._end_to_end(live)
            for state in live:
                state.step = len(state.task.source["steps"])
        else:
            self._round(live)

    def result(self, state: RecipeState) -> dict:
        """A finished recipe's line of rewrites.jsonl."""
        rewrite = {**state.rewritten, "steps": list(state.done)}
        return record(
            state.task,
            self.system,
            self.constrained,
            rewrite,
            state.entries,
            state.substitutions,
            state.notes,
        )

    def rewrite(self, tasks: list[RewriteTask]) -> list[dict]:
        """Rewrite a batch of recipes; one record per task, in order."""
        states = [self.start(task) for task in tasks]
        while any(not s.finished for s in states):
            self.advance(states)
        return [self.result(state) for state in states]

"""The paper's two systems without a model: Rule-Based and Retrieval.

Rule-Based runs the substitution guide over the whole recipe. Retrieval answers with a
recipe of the same dish that already obeys every constraint, from the train, dev and test
pool; a dish without one falls back to the guide (counted in the record's notes).
"""

from __future__ import annotations

from rrt.modelling.rewriter import RewriteTask, guide_rewrite, record, scored_entry, stable_seed
from rrt.modelling.selection import StepContext, source_word_set
from rrt.recipes.ingredients import ingredient_name


def _context(task: RewriteTask, source_step: str, ingredients: list[str]) -> StepContext:
    return StepContext(
        constraints=task.constraints,
        source_step=source_step,
        ingredient_names=[ingredient_name(x) for x in ingredients],
        source_words=source_word_set(task.source),
    )


def rule_based(task: RewriteTask, note: str = "") -> dict:
    """The guide's rewrite of every line; each step scored by the selection rules."""
    rewrite, subs = guide_rewrite(task.source, task.constraints)
    entries = [
        scored_entry(step, _context(task, task.source["steps"][n], rewrite["ingredients"]), n)
        for n, step in enumerate(rewrite["steps"])
    ]
    notes = [note] if note else []
    if not task.source["steps"]:
        notes.append("the source recipe has no steps")
    return record(task, "rule_based", False, rewrite, entries, subs, notes)


def pick_retrieval(source_id: str, candidates: list[str], seed: int) -> str | None:
    """One recipe id from those of the same dish that obey the constraints (not the source),
    chosen by a seeded hash so the choice is stable across runs and machines."""
    pool = sorted(c for c in candidates if c != source_id)
    if not pool:
        return None
    return min(pool, key=lambda c: stable_seed(seed, source_id, c))


def retrieval(task: RewriteTask) -> dict:
    """The retrieved recipe as the rewrite (the guide's when the dish has no valid recipe)."""
    if task.retrieved is None:
        out = rule_based(task, "no recipe of this dish obeys the constraints: rule-based rewrite")
        out["system"] = "retrieval"
        return out
    found = task.retrieved
    rewrite = {
        "title": found["title"],
        "ingredients": list(found["ingredients"]),
        "steps": list(found["steps"]),
    }
    whole = " ".join(task.source["steps"])
    entries = [
        scored_entry(step, _context(task, whole, rewrite["ingredients"]), None)
        for step in rewrite["steps"]
    ]
    return record(
        task, "retrieval", False, rewrite, entries, [], [f"retrieved {found.get('id', '')}".strip()]
    )

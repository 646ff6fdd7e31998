"""Change only what must change: how the product rewrites a step (`rewrite.steps: affected`).

A cook rewriting a recipe for a diet keeps it and edits what the diet touches. So:

    untouched step   the guide leaves it as it was (no forbidden food, no changed ingredient, no
                     cue that follows from a swap): it is kept as the guide wrote it, unsampled
    affected step    the guide's version is candidate 0, beside the model's samples; a sample
                     replaces it only when it passes every gate below, and the guide's version
                     fails one of the gates the sample passes (it still breaks the constraint,
                     hides a forbidden food, names a food the recipe lacks, or is no well-formed
                     sentence where its source step was one); otherwise the guide's version stays

A sample's gates, in order: no violation, no disguised food, no invented food, well formed (the
grounded rules of rrt.modelling.selection), and `keeps_step`: it starts with the guide's version's
leading action (or an equivalent in ACTION_EQUIVALENTS), names every ingredient and every allowed
food that version names, and recalls at least KEEP_RECALL of its words (ROUGE-L). So the guide is
the floor: by these rules the product is never worse than the guide on a step, and the model earns
a step only where it repairs the guide's. The product's guide also changes the cues a swap makes
untrue and adds its notes (rrt.recipes.cook_notes). Each step's entry records its `decision`:
kept, guide or model (DECISIONS).
"""

from __future__ import annotations

import re

from rrt.corpus.cooking_actions import step_actions
from rrt.modelling.selection import (
    StepContext,
    closeness,
    no_disguised_food,
    no_invented_food,
    no_violation,
    score_candidate,
    well_formed,
)
from rrt.recipes.foods import mentions
from rrt.recipes.ingredients import content_words, step_ingredients
from rrt.recipes.tagger import text_violations

STEP_SCOPES = ("affected", "every")  # rewrite.steps: the product's edit, or the paper's every step
DECISIONS = ("kept", "guide", "model")
KEEP_RECALL = 0.5  # ROUGE-L recall of the guide's version a sample must reach to do the same step
# A step's leading action is its first word unless that opens a phrase; then the first word after
# the phrase's comma ("In a bowl, whisk ...").
_OPENERS = frozenset(
    ("in", "on", "into", "to", "for", "with", "using", "once", "when", "while", "if", "after")
    + ("before", "meanwhile", "then", "next", "a", "an", "the")
)
# Verbs a cook uses for one action: a sample may say either.
ACTION_EQUIVALENTS: tuple[frozenset[str], ...] = tuple(
    frozenset(group.split())
    for group in (
        "heat warm",
        "whisk beat stir mix combine blend",
        "bake roast",
        "saute sauté fry cook brown",
        "chop dice mince cut slice",
        "pour drizzle",
        "top sprinkle garnish",
        "cool chill refrigerate",
        "serve enjoy",
        "add put",
    )
)
_WORD = re.compile(r"[A-Za-zé]+")
_GATES = ("no_violation", "no_disguised_food", "no_invented_food", "well_formed")
_GATE_RULES = {
    "no_violation": no_violation,
    "no_disguised_food": no_disguised_food,
    "no_invented_food": no_invented_food,
    "well_formed": well_formed,
}


def _same(text: str) -> str:
    return " ".join(text.split())


def step_affected(source_step: str, guide_step: str) -> bool:
    """Whether the guide changed a step (a forbidden food, a changed ingredient or a cue that
    follows from a swap); an unchanged step is kept."""
    return _same(source_step) != _same(guide_step)


def leading_action(step: str) -> str:
    """The step's first action word, lowercased ("" when none): its first word, or the first word
    after an opening phrase's comma, or without a comma the phrase's first word of cooking work."""
    clauses = step.strip().split(",", 1)
    words = _WORD.findall(clauses[0].lower())
    if words and words[0] not in _OPENERS:
        return words[0]
    if len(clauses) > 1:
        rest = _WORD.findall(clauses[1].lower())
        return rest[0] if rest else ""
    # "In a large bowl whisk the eggs": the first word that names a kind of cooking work.
    return next((w for w in words[1:] if step_actions(w)), words[0] if words else "")


def same_action(a: str, b: str) -> bool:
    """Whether two action words name one action (equal, or listed together in ACTION_EQUIVALENTS)."""
    return a == b or any(a in group and b in group for group in ACTION_EQUIVALENTS)


def keeps_foods(text: str, guide_step: str, names: list[str], constraints: list[str]) -> bool:
    """Whether a step still names every ingredient (of `names`) and every allowed food that the
    guide's version of its source step names."""
    named = {m.index for m in step_ingredients(text, names)}
    if any(m.index not in named for m in step_ingredients(guide_step, names)):
        return False
    words = set(content_words(text))
    return all(
        food.words[-1] in words
        for food in mentions(guide_step)
        if not text_violations(guide_step[food.start : food.end], constraints)
    )


def keeps_step(candidate: str, guide_step: str, ctx: StepContext) -> bool:
    """Whether a sample does the guide's version's step: its leading action, every ingredient and
    every allowed food it names, and at least KEEP_RECALL of its words."""
    if not same_action(leading_action(candidate), leading_action(guide_step)):
        return False
    if not keeps_foods(candidate, guide_step, ctx.ingredient_names, ctx.constraints):
        return False
    return closeness(candidate, StepContext([], guide_step, [])) >= KEEP_RECALL


def _gates(scores: dict) -> tuple[float, ...]:
    return tuple(scores[name] for name in _GATES)


def edit_scores(text: str, guide_step: str, ctx: StepContext) -> dict[str, float]:
    """A candidate's scores by the context's rule set, plus the edit gates and `keeps_step`."""
    scores = score_candidate(text, ctx)
    text = (text or "").strip()
    for name, rule in _GATE_RULES.items():
        scores.setdefault(name, round(float(rule(text, ctx)) if text else 0.0, 4))
    scores["keeps_step"] = float(bool(text) and keeps_step(text, guide_step, ctx))
    return scores


def choose_edit(
    guide_step: str, samples: list[str], ctx: StepContext
) -> tuple[int, list[dict], str]:
    """Among the guide's version (index 0) and the model's samples, the step to keep, every
    candidate's scores and the decision ("guide" or "model")."""
    texts = [guide_step, *samples]
    known: dict[str, dict] = {}
    for text in texts:
        if text not in known:
            known[text] = edit_scores(text, guide_step, ctx)
    scores = [dict(known[text]) for text in texts]
    # A flaw the guide's version only inherits from the source step (no capital, no full stop)
    # is the user's own writing: no sample is chosen to repair it.
    floor = dict(scores[0])
    if floor["well_formed"] == 0.0 and not well_formed(ctx.source_step.strip(), ctx):
        floor["well_formed"] = 1.0
    passing = [
        i
        for i in range(1, len(texts))
        if scores[i]["keeps_step"] == 1.0 and all(v == 1.0 for v in _gates(scores[i]))
    ]
    if not passing or _gates(floor) == (1.0,) * len(_GATES):
        return 0, scores, "guide"
    best = max(passing, key=lambda i: (scores[i]["total"], -i))
    return best, scores, "model"

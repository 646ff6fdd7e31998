"""Step flags: what a careful reader would mark in a rewritten step, found by rules.

Readers mark each rewritten step OK, another job, makes no sense, names a food the recipe lacks,
or breaks the constraint (docs/JUDGING.md). These flags look for the same faults, each from its
source step and the substitution guide's version of it (the source with the constraint's foods
replaced, so a swapped food is no fault):

    another_action   the rewrite's leading action is not the source step's (nor an equivalent,
                     rrt.modelling.editing.ACTION_EQUIVALENTS)
    lost_food        an ingredient or allowed food the guide's version names is gone
    heat_changed     the source step's heat (oven, stovetop, grill) is another, or added
    absurd_action    the leading action cannot act on what follows it (ACTION_OBJECTS: "melt the
                     taco shells", "whisk the tortillas")
    repeated         the step says again what an earlier rewritten step said, where the source did not
    unlisted_food    it names a food the recipe does not hold (rrt.evaluation.grounding)
    violation        it names a food the constraint forbids (the tagger)

FLAG_MARKS maps each flag to the reader's mark it predicts. How well each agrees with readers'
marks is measured on the labelled set (benchmarks/RESULTS.md, "Step flags against readers").
"""

from __future__ import annotations

import functools
import json
import re
from importlib import resources

import numpy as np

from rrt.corpus.cooking_actions import same_job, work_kinds
from rrt.evaluation.grounding import invented_foods, source_steps_of
from rrt.modelling.editing import keeps_foods, leading_action, same_action
from rrt.modelling.selection import StepContext, closeness
from rrt.recipes.ingredients import ingredient_name
from rrt.recipes.recipe import Recipe
from rrt.recipes.substitutions import substitute_recipe
from rrt.recipes.tagger import parse_constraints, text_violations

FLAG_MARKS = {
    "another_action": "another_job",
    "lost_food": "another_job",
    "heat_changed": "another_job",
    "absurd_action": "no_sense",
    "repeated": "no_sense",
    "unlisted_food": "unlisted_food",
    "violation": "breaks_constraint",
}
HEATS = frozenset({"oven", "stovetop", "grill"})
REPEAT_RECALL = 0.8  # ROUGE-L recall of an earlier step past which a step only says it again
# Actions that need what they act on to pour, melt or mix, and the solid things they cannot.
ACTION_OBJECTS: dict[frozenset[str], frozenset[str]] = {
    frozenset(
        {"whisk", "beat", "melt", "pour", "drizzle", "simmer", "boil", "dissolve"}
    ): frozenset(
        {
            "shell",
            "shells",
            "tortilla",
            "tortillas",
            "bread",
            "lettuce",
            "tomato",
            "tomatoes",
            "pan",
            "skillet",
            "pot",
            "bowl",
            "sheet",
            "dish",
            "oven",
            "loaf",
            "slices",
            "toast",
            "cabbage",
            "onion",
            "onions",
            "potato",
            "potatoes",
            "carrot",
            "carrots",
        }
    ),
    frozenset({"knead", "roll"}): frozenset({"water", "milk", "broth", "sauce", "soup", "juice"}),
}
_WORD = re.compile(r"[a-z]+")
_PHRASE_END = frozenset(
    {"in", "on", "into", "onto", "with", "until", "and", "over", "to", "for", "from", "then"}
)


def _object_phrase(step: str, action: str) -> list[str]:
    # The words after the leading action up to the first preposition: what the action acts on.
    words = _WORD.findall(step.lower().split(",")[0])
    if action not in words:
        return []
    phrase = []
    for word in words[words.index(action) + 1 :]:
        if word in _PHRASE_END:
            break
        phrase.append(word)
    return phrase


def absurd_action(step: str) -> bool:
    """Whether a step's leading action cannot act on what it names next (ACTION_OBJECTS)."""
    action = leading_action(step)
    phrase = set(_object_phrase(step, action))
    return any(action in actions and phrase & solids for actions, solids in ACTION_OBJECTS.items())


def _heat(step: str) -> frozenset[str]:
    return work_kinds(step) & HEATS


def _guided_steps(source: dict, constraints: list[str]) -> list[str]:
    return list(
        _guided(
            source.get("title", ""),
            tuple(source.get("ingredients") or []),
            tuple(source.get("steps") or []),
            tuple(constraints),
        )
    )


@functools.lru_cache(maxsize=256)
def _guided(title: str, ingredients: tuple, steps: tuple, constraints: tuple) -> tuple[str, ...]:
    # A record's flags and its fault features both read the guide's steps: the guide runs once.
    recipe = Recipe("", title, list(ingredients), list(steps))
    return tuple(substitute_recipe(recipe, list(constraints)).recipe.steps)


def _same(text: str) -> str:
    return " ".join(text.split())


def record_flags(record: dict) -> list[set[str]]:
    """Per rewritten step of one rewrite record, the flags it raises (FLAG_MARKS)."""
    source = record.get("source") or {}
    rewrite = record.get("rewrite") or {}
    steps = list(rewrite.get("steps") or [])
    constraints = parse_constraints(record.get("constraint") or "")
    guided = _guided_steps(source, constraints)
    by_source = dict(zip(source.get("steps") or [], guided))
    names = [ingredient_name(line) for line in rewrite.get("ingredients") or []]
    invented = invented_foods(record)
    flags: list[set[str]] = []
    for n, (step, src) in enumerate(zip(steps, source_steps_of(record))):
        found: set[str] = set()
        if invented[n]:
            found.add("unlisted_food")
        if text_violations(step, constraints):
            found.add("violation")
        if absurd_action(step) and not absurd_action(src or ""):
            found.add("absurd_action")
        if src:
            guide = by_source.get(src, src)
            if not same_action(leading_action(step), leading_action(guide)):
                found.add("another_action")
            if not keeps_foods(step, guide, names, constraints):
                found.add("lost_food")
            if _heat(step) != _heat(src):
                found.add("heat_changed")
        earlier = [s for s in steps[:n] if s.strip()]
        if step.strip() and any(
            closeness(step, StepContext([], before, [])) >= REPEAT_RECALL for before in earlier
        ):
            found.add("repeated")
        flags.append(found)
    return flags


def step_marks_predicted(record: dict) -> list[set[str]]:
    """Per rewritten step, the readers' marks its flags predict (empty: predicted OK)."""
    return [{FLAG_MARKS[f] for f in found} for found in record_flags(record)]


# What each check is scored against: reader marks it should catch.
TARGETS = {
    "another_job or no_sense": frozenset({"another_job", "no_sense"}),
    "another_job": frozenset({"another_job"}),
    "no_sense": frozenset({"no_sense"}),
    "unlisted_food": frozenset({"unlisted_food"}),
    "breaks_constraint": frozenset({"breaks_constraint"}),
}


def record_checks(record: dict) -> list[dict[str, bool]]:
    """Per rewritten step, each check's verdict (True: flagged): every flag, the readers' marks they
    predict (`marks:<mark>`), and the older measures, `same_job` (False counts as flagged) and
    `invented_food`."""
    flags = record_flags(record)
    steps = (record.get("rewrite") or {}).get("steps") or []
    invented = invented_foods(record)
    out = []
    for n, (found, src) in enumerate(zip(flags, source_steps_of(record))):
        checks = {f"flag:{name}": name in found for name in FLAG_MARKS}
        predicted = {FLAG_MARKS[f] for f in found}
        checks |= {f"marks:{t}": bool(predicted & wanted) for t, wanted in TARGETS.items()}
        checks["same_job (older measure)"] = src is not None and not same_job(steps[n], src)
        checks["invented_food (older measure)"] = bool(invented[n])
        out.append(checks)
    return out


def flag_agreement(records: dict[tuple, dict], marks: list[dict]) -> dict:
    """Each check against readers' step marks, counted over (step, reader) pairs: for each target
    (TARGETS), recall (marked steps flagged), precision (flagged steps marked) and the share of
    steps marked ok that are flagged. `records` by (system, recipe, constraint); `marks`: rows of
    {system, recipe, constraint, step, judge, mark}."""
    checks: dict[tuple, list[dict[str, bool]]] = {k: record_checks(r) for k, r in records.items()}
    pairs = []
    for row in marks:
        found = checks.get((row["system"], row["recipe"], row["constraint"]))
        if found is not None and row["step"] < len(found):
            pairs.append((row["mark"], found[row["step"]]))
    names = sorted({name for _, found in pairs for name in found})
    table: dict[str, dict] = {}
    for target, wanted in TARGETS.items():
        for name in names:
            hit = sum(1 for mark, f in pairs if mark in wanted and f[name])
            marked = sum(1 for mark, _ in pairs if mark in wanted)
            flagged = sum(1 for _, f in pairs if f[name])
            ok = [f[name] for mark, f in pairs if mark == "ok"]
            table.setdefault(target, {})[name] = {
                "recall": round(hit / marked, 3) if marked else None,
                "precision": round(hit / flagged, 3) if flagged else None,
                "ok_flagged": round(sum(ok) / len(ok), 3) if ok else None,
                "marked": marked,
                "flagged": flagged,
            }
    return {"pairs": len(pairs), "targets": table}


# ---- the fault model: the flags weighed into one calibrated score --------------------------

FAULT_MODEL = str(resources.files("rrt").joinpath("data", "step_fault_model.json"))
FAULT_FEATURES = (
    "bias",
    "another_action",
    "lost_food",
    "heat_changed",
    "absurd_action",
    "repeated",
    "same_as_guide",
    "closeness_to_guide",
    "best_closeness",
    "action_of_any_step",
)


def fault_features(record: dict) -> list[list[float]]:
    """Per rewritten step, FAULT_FEATURES: the flags, whether it is the guide's version of its
    source step, its closeness to that version and to the closest source step, and whether its
    leading action is that of some source step (a step moved, not lost)."""
    source = record.get("source") or {}
    steps = list((record.get("rewrite") or {}).get("steps") or [])
    constraints = parse_constraints(record.get("constraint") or "")
    guided = _guided_steps(source, constraints)
    by_source = dict(zip(source.get("steps") or [], guided))
    actions = {leading_action(g) for g in guided}
    rows = []
    for step, src, found in zip(steps, source_steps_of(record), record_flags(record)):
        guide = by_source.get(src, src) or ""
        near = [closeness(g, StepContext([], step, [])) for g in guided if step.strip()] or [0.0]
        rows.append(
            [
                1.0,
                *(float(name in found) for name in FAULT_FEATURES[1:6]),
                float(_same(step) == _same(guide)),
                closeness(step, StepContext([], guide, [])) if guide.strip() else 0.0,
                max(near),
                float(any(same_action(leading_action(step), a) for a in actions)),
            ]
        )
    return rows


@functools.cache
def load_fault_model(path: str = FAULT_MODEL) -> tuple[np.ndarray, float]:
    """The fault model's weights (FAULT_FEATURES order) and its threshold (read once a process)."""
    with open(path, encoding="utf-8") as handle:
        model = json.load(handle)
    if tuple(model["features"]) != FAULT_FEATURES:
        raise ValueError(
            f"{path} was fitted on other features; refit: benchmarks/step_flags.py --fit"
        )
    return np.array(model["weights"], dtype=float), float(model["threshold"])


def fault_probability(rows: list[list[float]], weights: np.ndarray) -> np.ndarray:
    """The fault model's probability that a reader marks each step another job or no sense."""
    rows = np.asarray(rows, dtype=float)
    if not rows.size:
        return np.zeros(0)
    return 1.0 / (1.0 + np.exp(-rows @ weights))


def faulty_steps(record: dict) -> list[bool]:
    """Per rewritten step, whether the fault model says a reader would mark it another job or no sense."""
    weights, threshold = load_fault_model()
    return [bool(p >= threshold) for p in fault_probability(fault_features(record), weights)]

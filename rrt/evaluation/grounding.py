"""Whether a rewrite stays the user's recipe, beyond the paper's measures.

    invented foods  chosen steps that name a food absent from both the rewritten title and
                    ingredient lines and the source recipe (rrt.recipes.foods; pantry words aside)
    same job        chosen steps whose kinds of work (rrt.corpus.cooking_actions: mix, oven,
                    stovetop, rest, shape, serve...) meet their source step's; a source step that
                    shows no kind matches a rewrite that shows none
    consistency     the new foods that the rewritten title and steps name (foods the source recipe
                    does not have) are all on the rewritten ingredient lines (each word the source
                    lacks): title, lines and steps name one substitute; `title_consistent` checks
                    the title alone

Each function takes one rewrite record (rewrites.jsonl) and is pure.
"""

from __future__ import annotations

from rrt.corpus.cooking_actions import same_job
from rrt.recipes import foods
from rrt.recipes.foods import FoodMention, recipe_food_words, unlisted_foods


def _parts(record: dict) -> tuple[dict, dict]:
    return record.get("source") or {}, record.get("rewrite") or {}


def held_words(record: dict) -> frozenset[str]:
    """The words a food in a rewritten step may use: the rewritten title and ingredient lines, the
    whole source recipe and the pantry."""
    source, rewrite = _parts(record)
    return foods.held_words(rewrite, source)


def invented_foods(record: dict) -> list[list[FoodMention]]:
    """Per rewritten step, the foods it names that the recipe does not hold."""
    held = held_words(record)
    return [unlisted_foods(step, held) for step in _parts(record)[1].get("steps") or []]


def source_steps_of(record: dict) -> list[str | None]:
    """Per rewritten step, the source step it rewrites: the step entry's `source_step` where the
    record has one per step, else the source step at the same position (None past the source's end)."""
    source, rewrite = _parts(record)
    steps, sources = rewrite.get("steps") or [], source.get("steps") or []
    entries = [e for e in record.get("steps") or [] if isinstance(e, dict)]
    if len(entries) == len(steps) and all(isinstance(e.get("source_step"), int) for e in entries):
        return [
            sources[e["source_step"]] if e["source_step"] < len(sources) else None for e in entries
        ]
    return [sources[i] if i < len(sources) else None for i in range(len(steps))]


def same_job_steps(record: dict) -> tuple[int, int]:
    """(steps doing their source step's job, steps with a source step) of one rewrite."""
    pairs = [
        (step, src)
        for step, src in zip(_parts(record)[1].get("steps") or [], source_steps_of(record))
        if src is not None
    ]
    return sum(same_job(step, src) for step, src in pairs), len(pairs)


def _new_foods(texts: list[str], record: dict) -> list[list[FoodMention]]:
    # Per text, the foods it names that the source recipe lacks and the rewritten lines do not hold.
    source, rewrite = _parts(record)
    had = recipe_food_words(
        [str(source.get("title") or "")], source.get("ingredients") or [], source.get("steps") or []
    )
    listed = recipe_food_words(rewrite.get("ingredients") or [])
    return [
        [m for m in unlisted_foods(text, had) if not set(m.words) - had <= listed] for text in texts
    ]


def title_consistent(record: dict) -> bool:
    """Whether every food the rewritten title adds is on the rewritten ingredient lines."""
    return not _new_foods([str(_parts(record)[1].get("title") or "")], record)[0]


def consistent(record: dict) -> bool:
    """Whether every food the rewritten title and steps add is on the rewritten ingredient lines."""
    rewrite = _parts(record)[1]
    return not any(
        _new_foods([str(rewrite.get("title") or ""), *(rewrite.get("steps") or [])], record)
    )


def grounding_counts(record: dict) -> dict:
    """One rewrite's grounding counts: steps, steps naming an invented food, same-job steps of those
    with a source step, and whether title and the whole recipe are consistent."""
    invented = invented_foods(record)
    same, paired = same_job_steps(record)
    rewrite = _parts(record)[1]
    added = _new_foods([str(rewrite.get("title") or ""), *(rewrite.get("steps") or [])], record)
    return {
        "steps": len(invented),
        "invented_steps": sum(1 for found in invented if found),
        "same_job_steps": same,
        "paired_steps": paired,
        "title_consistent": not added[0],
        "consistent": not any(added),
    }

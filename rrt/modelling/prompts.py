"""Generation prompts in each model's own training format, and their fit to the block.

A prompt is the training text of `rrt.corpus.formats` cut where the generated part would begin,
so prompts and training texts cannot drift apart. Every prompt ends on a special token.
"""

from __future__ import annotations

from rrt.corpus import formats
from rrt.recipes.paper_format import (
    END_INGS,
    END_INST,
    END_PROMPT,
    END_TITLE,
    EOS,
    ING,
    INST,
    NO_INGS,
)

_MARK = "\x00"  # stands where the model's text starts; no recipe holds it
STOPS = {
    "contextual": (INST, END_INST, EOS),
    "contextual_ing": (INST, END_INST, EOS),
    "grounded": (INST, END_INST, EOS),
    "grounded_ing": (INST, END_INST, EOS),
    "no_context": (INST, END_INST, EOS),
    "no_source": (INST, END_INST, EOS),
    "ing_predictor": (EOS, END_INST, INST),
    "end_to_end": (EOS,),
}
# The variants that write one step, which holds no special token: besides its STOPS, any special token
# of the tokenizer (an ingredient field's marks, a tag, padding, a pretrained model's own chat marks)
# is the model leaving the step, so it ends there too.
STEP_VARIANTS = frozenset(
    {"contextual", "contextual_ing", "grounded", "grounded_ing", "no_context", "no_source"}
)


def _cut(text: str) -> str:
    return text.split(_MARK, 1)[0].rstrip()


def step_prompt(
    variant: str,
    source: dict,
    n: int,
    done: list[str],
    constraint: str,
    rewritten: dict | None = None,
    prompt_ingredients: list[str] | None = None,
) -> str:
    """The text before the rewrite of source step `n`, given the rewritten steps so far."""
    title, ings, steps = source["title"], list(source["ingredients"]), list(source["steps"])
    if variant == "contextual":
        return _cut(formats.contextual(title, ings, steps[: n + 1], done + [_MARK], constraint))
    if variant == "contextual_ing":
        return _cut(
            formats.contextual_ing(
                title, ings, steps[: n + 1], done + [_MARK], constraint, prompt_ingredients or []
            )
        )
    if variant in formats.GROUNDED_VARIANTS:
        new = rewritten or source
        # The rewritten steps so far stand where the target's steps do; the model's text replaces the last.
        target = [str(new["title"]), list(new["ingredients"]), done + [_MARK]]
        if variant == "grounded":
            return _cut(formats.grounded(title, ings, steps[: n + 1], *target, constraint))
        return _cut(
            formats.grounded_ing(
                title, ings, steps[: n + 1], *target, constraint, prompt_ingredients or []
            )
        )
    if variant == "no_context":
        return _cut(formats.no_context(title, steps[n], _MARK, constraint))
    if variant == "no_source":
        new = rewritten or source
        return _cut(formats.no_source(new["title"], list(new["ingredients"]), done + [_MARK]))
    if variant == "ing_predictor":
        new = rewritten or source
        return _cut(formats.ing_predictor(new["title"], list(new["ingredients"]), done, [_MARK]))
    raise ValueError(f"{variant!r} does not rewrite step by step")


def recipe_prompt(source: dict, constraint: str) -> str:
    """The End-to-End prompt: the whole source recipe and the target tag."""
    return _cut(
        formats.end_to_end(source, {"title": _MARK, "ingredients": [], "steps": []}, constraint)
    )


def parse_ingredients(text: str) -> list[str]:
    """The ingredient names an ingredient predictor wrote (`<noings>`: none)."""
    text = text.split(EOS, 1)[0].strip()
    if not text or text.startswith(NO_INGS):
        return []
    return [p.strip() for p in text.split(ING) if p.strip() and p.strip() != NO_INGS]


def parse_recipe(text: str) -> dict:
    """Title, ingredient lines and steps of a generated End-to-End recipe (missing parts empty)."""
    text = text.split(EOS, 1)[0]
    title, _, rest = text.partition(END_TITLE) if END_TITLE in text else ("", "", text)
    ings, _, steps = rest.partition(END_INGS) if END_INGS in rest else ("", "", rest)
    steps = steps.split(END_INST, 1)[0]
    return {
        "title": title.strip(),
        "ingredients": [p.strip() for p in ings.split(ING) if p.strip() and p.strip() != NO_INGS],
        "steps": [p.strip() for p in steps.split(INST) if p.strip()],
    }


def _last(ids: list[int], token: int, before: int) -> int:
    return max((i for i in range(before) if ids[i] == token), default=-1)


def protected_span(
    variant: str, ids: list[int], special: dict[str, int]
) -> tuple[int, int, int | None]:
    """(end of the head that is always kept, start of the current source step, start of the
    rewritten steps or None).

    The head is BOS, the tag and the title. The current source step (and the target tag) are
    always kept; earlier source context goes first, then the oldest rewritten steps."""
    head = next((i + 1 for i, t in enumerate(ids) if t == special[END_TITLE]), min(2, len(ids)))
    if variant in ("contextual", "contextual_ing"):
        first_end = next((i for i, t in enumerate(ids) if t == special[END_INST]), len(ids))
        start = (
            max(_last(ids, special[INST], first_end), _last(ids, special[END_INGS], first_end)) + 1
        )
        # The target tag follows the source's <endofinst>; the rewritten steps follow it.
        return head, max(start, head), min(first_end + 2, len(ids))
    if variant in formats.GROUNDED_VARIANTS:
        # As training cuts a grounded text (rrt.modelling.batching.fit_block): BOS and the tag stay, the
        # context before the target tag goes from the left (the source recipe first, the target's title and
        # foods last), then the oldest rewritten steps; the source step being rewritten stands after them.
        tag = (
            next(
                (i for i in range(len(ids) - 1, -1, -1) if ids[i] == special[END_INGS]),
                len(ids) - 1,
            )
            + 1
        )
        return min(2, len(ids)), min(tag, len(ids)), min(tag + 1, len(ids))
    if variant == "no_context":
        return head, head, None
    if variant == "end_to_end":
        return head, len(ids) - 1, None
    # The language models without a source keep the latest rewritten steps.
    return head, max(head, len(ids) - 1), None


def fit_prompt(
    ids: list[int],
    head: int,
    tail: int,
    budget: int,
    steps_from: int | None = None,
    step_ends: set[int] | None = None,
) -> list[int] | None:
    """Drop context from the left to fit `budget`: source context between the head and the
    protected tail first, then whole rewritten steps, oldest first (they start at
    `steps_from` and end at tokens of `step_ends`); None when the rest alone is too long."""
    if len(ids) <= budget:
        return ids
    drop = len(ids) - budget
    if head + drop <= tail:
        return ids[:head] + ids[head + drop :]
    ids, drop = ids[:head] + ids[tail:], drop - (tail - head)
    if steps_from is None or not step_ends:
        return None
    steps_from -= tail - head
    # Cutting after the last separator drops every earlier rewrite: the prompt then ends on
    # the target tag, as it does for a first step.
    for cut in (i + 1 for i in range(steps_from, len(ids)) if ids[i] in step_ends):
        if cut - steps_from >= drop:
            return ids[:steps_from] + ids[cut:]
    return None


SPECIAL_NAMES = (END_TITLE, END_INGS, INST, END_INST, END_PROMPT, EOS)

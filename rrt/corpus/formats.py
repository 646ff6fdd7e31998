"""Training texts for every model variant (the paper's formats), and their parsers.

    contextual      BOS <src:non-C> title <endoftitle> ings <endofings> s1 <inst> … sn <endofinst>
                    <tgt:C> t1 <inst> … tn' <endofinst> EOS
    contextual_ing  … <tgt:C> t1 <inst> … t(n'-1) <inst> i1 <ing> … <endofprompt> tn' EOS
    no_context      BOS <src:non-C> title <endoftitle> sn <endofinst> <tgt:C> tn' EOS
    end_to_end      BOS <src:non-C> whole source recipe <tgt:C> whole target recipe EOS
    ing_predictor   BOS title <endoftitle> ings <endofings> s1 <inst> … s(n-1) <endofinst> i1 <ing> … EOS
    no_source       BOS title <endoftitle> ings <endofings> s1 <inst> … sn <endofinst> EOS

Beyond the paper, the grounded formats also give the target recipe's own title and the foods of
its ingredient lines (at rewrite time, the guide's rewritten lines), then its last few steps and
the source step being rewritten right before the output, so the model learns to write this
recipe's step with this recipe's foods. The foods are the lines' ingredient names
(rrt.recipes.ingredients.ingredient_name), without amounts: a long list of whole lines would
not leave the block room for the steps.

    grounded        BOS <src:non-C> title <endoftitle> ings <endofings> s1 <inst> … sn <endofinst>
                    ttitle <endoftitle> tfood1 <ing> … <endofings> <tgt:C> t(n'-k) <inst> … t(n'-1) <inst>
                    sn <endofprompt> tn' <endofinst> EOS
    grounded_ing    … <tgt:C> t(n'-k) <inst> … t(n'-1) <inst> sn <endofinst> i1 <ing> … <endofprompt> tn' EOS
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rrt.recipes.ingredients import ingredient_name
from rrt.recipes.paper_format import (
    BOS,
    END_INGS,
    END_INST,
    END_PROMPT,
    END_TITLE,
    EOS,
    ING,
    INST,
    NO_INGS,
    constraint_tag,
    format_recipe,
    parse_line,
)

VARIANTS = (
    "contextual",
    "contextual_ing",
    "grounded",
    "grounded_ing",
    "no_context",
    "end_to_end",
    "ing_predictor",
    "no_source",
)
PAIR_VARIANTS = (
    "contextual",
    "contextual_ing",
    "grounded",
    "grounded_ing",
    "no_context",
    "end_to_end",
)
GROUNDED_VARIANTS = ("grounded", "grounded_ing")
# Earlier target steps a grounded text carries: the steps just written, not the whole document, so
# the learned step is never cut for length (the source recipe stays whole, before them).
GROUNDED_STEPS_BEFORE = 3
RECIPE_VARIANTS = ("ing_predictor", "no_source")


@dataclass
class Parts:
    """What a training text holds, recovered by `parse_text`."""

    title: str = ""
    ingredients: list[str] = field(default_factory=list)
    source_steps: list[str] = field(default_factory=list)
    target_steps: list[str] = field(default_factory=list)
    prompt_ingredients: list[str] = field(default_factory=list)
    constraint: str = ""
    target: dict | None = None


def _tags(constraint: str) -> tuple[str, str]:
    return constraint_tag("src", constraint, False), constraint_tag("tgt", constraint, True)


def _ings(items: list[str]) -> str:
    return f" {ING} ".join(items) if items else NO_INGS


def contextual(title, ingredients, source_steps, target_steps, constraint) -> str:
    """Source steps 1..n and the aligned target steps 1..n' (the last one is learned)."""
    src, tgt = _tags(constraint)
    return (
        f"{BOS} {src} {format_recipe(title, ingredients, source_steps)} {tgt} "
        f"{f' {INST} '.join(target_steps)} {END_INST} {EOS}"
    )


def contextual_ing(
    title, ingredients, source_steps, target_steps, constraint, prompt_ingredients
) -> str:
    """As contextual, with the last target step's ingredients as a prompt before it."""
    src, tgt = _tags(constraint)
    earlier = "".join(f"{step} {INST} " for step in target_steps[:-1])
    return (
        f"{BOS} {src} {format_recipe(title, ingredients, source_steps)} {tgt} "
        f"{earlier}{_ings(prompt_ingredients)} {END_PROMPT} {target_steps[-1]} {EOS}"
    )


def grounded_foods(ingredient_lines: list[str]) -> list[str]:
    """The foods a grounded text names for the target's ingredient lines: each line's ingredient name, once."""
    return list(dict.fromkeys(name for name in map(ingredient_name, ingredient_lines) if name))


def _grounded_head(
    title, ingredients, source_steps, target_title, target_ingredients, target_steps, constraint
) -> str:
    # Everything before the source step repeated: the source recipe, the target's title and foods, its
    # last few steps before the learned one.
    src, tgt = _tags(constraint)
    earlier = "".join(f"{step} {INST} " for step in target_steps[:-1][-GROUNDED_STEPS_BEFORE:])
    return (
        f"{BOS} {src} {format_recipe(title, ingredients, source_steps)} "
        f"{target_title} {END_TITLE} {_ings(grounded_foods(target_ingredients))} {END_INGS} {tgt} {earlier}"
    )


def grounded(
    title, ingredients, source_steps, target_title, target_ingredients, target_steps, constraint
) -> str:
    """The source recipe up to step n, the target's title and ingredient lines, its last few steps, then
    source step n again and its rewrite (the last target step, learned)."""
    return (
        _grounded_head(
            title,
            ingredients,
            source_steps,
            target_title,
            target_ingredients,
            target_steps,
            constraint,
        )
        + f"{source_steps[-1]} {END_PROMPT} {target_steps[-1]} {END_INST} {EOS}"
    )


def grounded_ing(
    title,
    ingredients,
    source_steps,
    target_title,
    target_ingredients,
    target_steps,
    constraint,
    prompt_ingredients,
) -> str:
    """As grounded, with the learned step's ingredients as a prompt between source step n and its rewrite."""
    return (
        _grounded_head(
            title,
            ingredients,
            source_steps,
            target_title,
            target_ingredients,
            target_steps,
            constraint,
        )
        + f"{source_steps[-1]} {END_INST} {_ings(prompt_ingredients)} {END_PROMPT} {target_steps[-1]} {EOS}"
    )


def no_context(title, source_step, target_step, constraint) -> str:
    """One source step and its rewrite, with only the title as context."""
    src, tgt = _tags(constraint)
    return f"{BOS} {src} {title} {END_TITLE} {source_step} {END_INST} {tgt} {target_step} {EOS}"


def end_to_end(source: dict, target: dict, constraint: str) -> str:
    """The whole source recipe, then the whole target recipe."""
    src, tgt = _tags(constraint)
    return (
        f"{BOS} {src} {format_recipe(source['title'], source['ingredients'], source['steps'])} {tgt} "
        f"{format_recipe(target['title'], target['ingredients'], target['steps'])} {EOS}"
    )


def ing_predictor(title, ingredients, steps_before, next_ingredients) -> str:
    """Recipe so far, then the ingredients the next step uses (`<noings>` when none)."""
    return (
        f"{BOS} {title} {END_TITLE} {_ings(ingredients)} {END_INGS} "
        f"{f' {INST} '.join(steps_before)} {END_INST} {_ings(next_ingredients)} {EOS}"
    )


def no_source(title, ingredients, steps) -> str:
    """A plain recipe (the language model and the perplexity reference)."""
    return f"{BOS} {format_recipe(title, ingredients, steps)} {EOS}"


def _split(text: str, token: str) -> list[str]:
    return [p.strip() for p in text.split(token) if p.strip()]


def _parse_grounded(variant: str, text: str) -> Parts:
    line = parse_line(text)
    body = text.split(BOS, 1)[1]
    source_part, _, rest = body.partition(END_INST)
    title, _, after = source_part.split(">", 1)[1].partition(END_TITLE)
    ings, _, steps = after.partition(END_INGS)
    header, _, tail = rest.partition(f"<tgt:{line.target_tag}>")
    target_title, _, target_ings = header.partition(END_TITLE)
    target_ings = target_ings.partition(END_INGS)[0]
    tail = tail.split(EOS, 1)[0]
    parts = Parts(
        title.strip(),
        [] if ings.strip() == NO_INGS else _split(ings, ING),
        _split(steps, INST),
        constraint=line.target_tag,
        target={
            "title": target_title.strip(),
            "ingredients": [] if target_ings.strip() == NO_INGS else _split(target_ings, ING),
        },
    )
    head, _, last = tail.rpartition(END_PROMPT)
    if variant == "grounded":
        pieces = _split(head, INST)
        parts.target_steps = pieces[:-1] + [last.split(END_INST, 1)[0].strip()]
    else:
        before, _, prompt = head.rpartition(END_INST)
        parts.target_steps = _split(before, INST)[:-1] + [last.strip()]
        parts.prompt_ingredients = [] if prompt.strip() == NO_INGS else _split(prompt, ING)
    return parts


def parse_text(variant: str, text: str) -> Parts:
    """Recover the parts of a training text (the inverse of the formatters above)."""
    if variant in GROUNDED_VARIANTS:
        return _parse_grounded(variant, text)
    if variant in ("contextual", "contextual_ing", "end_to_end"):
        line = parse_line(text)
        parts = Parts(
            line.source.title,
            line.source.ingredients,
            line.source.steps,
            constraint=line.target_tag,
        )
        if variant == "end_to_end" and line.target is not None:
            parts.target = {
                "title": line.target.title,
                "ingredients": line.target.ingredients,
                "steps": line.target.steps,
            }
            return parts
        tail = text.split(f"<tgt:{line.target_tag}>", 1)[1].split(EOS, 1)[0]
        if variant == "contextual":
            parts.target_steps = _split(tail.split(END_INST, 1)[0], INST)
        else:
            prompt, last = tail.split(END_PROMPT, 1)
            pieces = _split(prompt, INST)
            parts.target_steps = pieces[:-1] + [last.strip()]
            parts.prompt_ingredients = [] if pieces[-1] == NO_INGS else _split(pieces[-1], ING)
        return parts
    body = text.split(BOS, 1)[1].split(EOS, 1)[0]
    if variant == "no_context":
        line = parse_line(text)
        head, _, rest = body.partition(END_TITLE)
        title = head.split(">", 1)[1].strip()
        step, _, after = rest.partition(END_INST)
        return Parts(
            title,
            source_steps=[step.strip()],
            target_steps=[after.split(">", 1)[1].strip()],
            constraint=line.target_tag,
        )
    title, _, rest = body.partition(END_TITLE)
    ings, _, rest = rest.partition(END_INGS)
    steps, _, after = rest.partition(END_INST)
    parts = Parts(
        title.strip(), [] if ings.strip() == NO_INGS else _split(ings, ING), _split(steps, INST)
    )
    if variant == "ing_predictor":
        parts.prompt_ingredients = [] if after.strip() == NO_INGS else _split(after, ING)
    return parts

"""Text and recipe cleaning: mojibake, HTML, whitespace, and the paper's keep/drop rule."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from typing import Any

import ftfy
from ftfy.fixes import remove_terminal_escapes

from rrt.recipes.recipe import Recipe, Reject
from rrt.recipes.step_kinds import split_method

MIN_STEPS = 2  # the paper drops recipes with fewer than two steps
_TAG = re.compile(r"</?[A-Za-z][^<>]{0,200}>")
_SPECIAL = re.compile(r"<\|[^<>|]{1,64}\|>")  # tokenizers' special tokens, e.g. <|endoftext|>
# Whitespace and the C0 and C1 control characters: a terminal obeys the controls (a title set, a
# screen cleared), so text keeps none, and ftfy drops them only from the lines it is given.
_SPACE = re.compile(r"[\s\x00-\x1f\x7f-\x9f]+")
# The controls that text written out may still hold (a run file, a path), save tab and newline.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean_text(text: Any) -> str:
    """Fix mojibake, unescape HTML, strip tags (the paper's format tokens among them),
    tokenizers' special tokens and control characters, and collapse whitespace."""
    if text is None:
        return ""
    if not isinstance(text, str):
        text = str(text)
    if not text.isascii():  # pure ASCII holds no mojibake; ftfy is the slow part
        text = ftfy.fix_text(text, unescape_html=False)
    elif "\x1b" in text:  # a colour code is dropped whole, as ftfy drops it from the other lines
        text = remove_terminal_escapes(text)
    # Unescape twice: scraped pages often double-escape ("&amp;frac12;").
    text = html.unescape(html.unescape(_TAG.sub(" ", text)))
    text = _SPECIAL.sub(" ", _TAG.sub(" ", text))  # tags that were hidden behind entities
    return _SPACE.sub(" ", text).strip()


def visible_controls(text: str) -> str:
    """The text with each control character but tab and newline written as an escape (`\\x1b`),
    for a terminal to show rather than obey."""
    return _CONTROL.sub(lambda found: f"\\x{ord(found.group()):02x}", text)


def clean_lines(lines: Iterable[Any]) -> list[str]:
    """Clean every line and drop the ones left empty."""
    out = []
    for line in lines:
        text = clean_text(line)
        if text:
            out.append(text)
    return out


def clean_recipe(recipe: Recipe, location: str = "") -> Recipe | Reject:
    """Return the cleaned recipe, or a Reject naming the rule it broke. Method lines that are
    not instructions (serving counts, headers, notes, storage tips) move to
    metadata["non_steps"], each placed before the instruction it preceded."""
    title = clean_text(recipe.title)
    ingredients = clean_lines(recipe.ingredients)
    steps, others = split_method(clean_lines(recipe.steps))
    where = location or recipe.id
    if not title:
        return Reject(where, "no_title", "the recipe has no title", recipe.id)
    if not ingredients:
        return Reject(where, "no_ingredients", "the recipe lists no ingredients", recipe.id)
    if len(steps) < MIN_STEPS:
        told = f" (and {len(others)} line(s) that are not instructions)" if others else ""
        return Reject(
            where,
            "too_few_steps",
            f"{len(steps)} step(s){told}; at least {MIN_STEPS} needed",
            recipe.id,
        )
    metadata = dict(recipe.metadata)
    if others:
        metadata["non_steps"] = [other.to_dict() for other in others]
    return Recipe(recipe.id, title, ingredients, steps, recipe.source, metadata)

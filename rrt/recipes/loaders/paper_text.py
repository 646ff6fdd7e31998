"""Files in the paper's text format: recipes, recipe pairs and step pairs.

Ids come from a sibling `<name>_ids.tsv` when there is one (the paper's releases ship
one per file); otherwise from a hash of the recipe's content, so repeated recipes
share an id and are emitted once.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

from rrt.recipes.loaders.json_records import Record
from rrt.recipes.loaders.source import STDIN, decoded_lines, is_remote
from rrt.recipes.paper_format import PaperFormatError, PaperLine, RecipeParts, parse_line
from rrt.recipes.recipe import Recipe, RecipePair, Reject


def _ids_file(path: str) -> list[list[str]]:
    stem, _ = os.path.splitext(path)
    sibling = f"{stem}_ids.tsv"
    if is_remote(path) or path == STDIN or not os.path.exists(sibling):
        return []
    with open(sibling, encoding="utf-8") as handle:
        return [line.rstrip("\n").split("\t") for line in handle]


def _content_id(parts: RecipeParts) -> str:
    text = "\n".join([parts.title, *parts.ingredients, "", *parts.steps])
    return "paper-" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def _recipe(parts: RecipeParts, rid: str, tag: str) -> Recipe:
    meta = {"paper_tag": tag} if tag else {}
    return Recipe(
        rid or _content_id(parts), parts.title, parts.ingredients, parts.steps, "paper", meta
    )


@dataclass
class StepPair:
    """One contextual step-pair line: the source recipe up to step n and one target step."""

    source: Recipe
    source_step: int
    target_id: str
    target_step: int
    target_text: str
    source_tag: str
    target_tag: str
    alignment: str = ""


def read_paper_lines(path: str) -> Iterator[tuple[str, PaperLine | Reject, list[str]]]:
    """Parse each line, pairing it with its row of the ids file (or an empty list)."""
    ids = _ids_file(path)
    for number, text, reason, detail in decoded_lines(path):
        where = f"{path}:{number}"
        row = ids[number - 1] if number - 1 < len(ids) else []
        if text is None:
            yield where, Reject(where, reason, detail), row
        elif text.strip():
            try:
                yield where, parse_line(text), row
            except PaperFormatError as err:
                yield where, Reject(where, "invalid_paper_line", str(err)), row


def read_paper_pairs(path: str) -> Iterator[RecipePair | Reject]:
    """The recipe pairs of a paper-format file, with their constraint tags."""
    for where, line, row in read_paper_lines(path):
        if isinstance(line, Reject):
            yield line
        elif line.kind == "recipe_pair" and line.target is not None:
            source = _recipe(line.source, row[0] if len(row) > 2 else "", line.source_tag)
            target = _recipe(line.target, row[2] if len(row) > 2 else "", line.target_tag)
            yield RecipePair(source, target, line.source_tag, line.target_tag)


def read_step_pairs(path: str) -> Iterator[StepPair | Reject]:
    """The contextual step-pair instances of a paper-format file."""
    for where, line, row in read_paper_lines(path):
        if isinstance(line, Reject):
            yield line
        elif line.kind == "step_pair":
            source = _recipe(line.source, row[0] if row else "", line.source_tag)
            yield StepPair(
                source=source,
                source_step=int(row[1]) if len(row) > 1 else len(line.source.steps) - 1,
                target_id=row[2] if len(row) > 2 else "",
                target_step=int(row[3]) if len(row) > 3 else -1,
                target_text=" ".join(line.target_steps),
                source_tag=line.source_tag,
                target_tag=line.target_tag,
                alignment=row[4] if len(row) > 4 else "",
            )


def read_paper_recipes(path: str) -> Iterator[Record]:
    """Every distinct whole recipe in a paper-format file; step-pair lines are rejected
    with a reason (they hold only a prefix of a recipe)."""
    seen: set[str] = set()
    for where, line, row in read_paper_lines(path):
        if isinstance(line, Reject):
            yield where, line
            continue
        if line.kind == "step_pair":
            yield (
                where,
                Reject(
                    where,
                    "step_pair_line",
                    "a contextual step-pair line holds only part of a recipe "
                    "(read it with rrt.recipes.loaders.paper_text.read_step_pairs)",
                ),
            )
            continue
        sides = [(line.source, row[0] if len(row) > 2 else "", line.source_tag)]
        if line.target is not None:
            sides.append((line.target, row[2] if len(row) > 2 else "", line.target_tag))
        for i, (parts, rid, tag) in enumerate(sides):
            recipe = _recipe(parts, rid, tag)
            if recipe.id in seen:
                yield (
                    f"{where}#{i}",
                    Reject(
                        f"{where}#{i}",
                        "duplicate_recipe",
                        "same recipe already read from this file",
                        recipe.id,
                    ),
                )
                continue
            seen.add(recipe.id)
            yield f"{where}" + ("" if i == 0 else "#target"), recipe.to_dict()

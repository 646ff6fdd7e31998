"""Hand-labelled recipe pairs and how well an aligner's links match them.

A label names a (source, target) pair of real recipes by id, says whether the two are the
same dish, which method lines are not instructions, and, per source step, the target steps a
cook would call its rewrite. Indices count the cleaned method lines (`clean_lines`) before
non-steps are set aside, so labels stay valid when the line classifier changes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from rrt.recipes.clean import clean_lines, clean_text


@dataclass
class LabelledPair:
    """One labelled pair with its recipes' cleaned method lines."""

    pair: int
    constraint: str
    same_dish: bool
    source: dict
    target: dict
    links: set[tuple[int, int]] = field(default_factory=set)
    source_not_steps: dict[int, str] = field(default_factory=dict)
    target_not_steps: dict[int, str] = field(default_factory=dict)


class LabelError(ValueError):
    """A label that does not fit the recipes it names."""


def _side(raw: dict) -> dict:
    return {
        "id": raw["id"],
        "title": clean_text(raw["title"]),
        "ingredients": clean_lines(raw["ingredients"]),
        "lines": clean_lines(raw["steps"]),
    }


def load_labels(path: str, recipes: dict[str, dict]) -> list[LabelledPair]:
    """The labelled pairs of a JSONL file, joined with raw recipes by id."""
    pairs = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            source, target = _side(recipes[row["source_id"]]), _side(recipes[row["target_id"]])
            if (len(source["lines"]), len(target["lines"])) != (
                row["source_steps"],
                row["target_steps"],
            ):
                raise LabelError(
                    f"pair {row['pair']}: the recipes' method lines changed since labelling"
                )
            pairs.append(
                LabelledPair(
                    row["pair"],
                    row["constraint"],
                    bool(row["same_dish"]),
                    source,
                    target,
                    {(int(i), j) for i, js in row["links"].items() for j in js},
                    {int(i): k for i, k in row["source_not_steps"].items()},
                    {int(i): k for i, k in row["target_not_steps"].items()},
                )
            )
    return pairs


@dataclass
class LinkCounts:
    """Predicted links against labelled ones, summed over pairs."""

    right: int = 0
    predicted: int = 0
    labelled: int = 0

    def add(self, predicted: set[tuple[int, int]], labelled: set[tuple[int, int]]) -> None:
        """Count one pair's links."""
        self.right += len(predicted & labelled)
        self.predicted += len(predicted)
        self.labelled += len(labelled)

    def __add__(self, other: LinkCounts) -> LinkCounts:
        """The counts of both, as of one set of pairs."""
        return LinkCounts(
            self.right + other.right,
            self.predicted + other.predicted,
            self.labelled + other.labelled,
        )

    @property
    def precision(self) -> float:
        """Share of predicted links that are labelled."""
        return self.right / self.predicted if self.predicted else 0.0

    @property
    def recall(self) -> float:
        """Share of labelled links that are predicted."""
        return self.right / self.labelled if self.labelled else 0.0

    @property
    def f1(self) -> float:
        """Harmonic mean of precision and recall."""
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def line_index(lines: list[str], steps: list[str]) -> list[int]:
    """For each instruction kept from a method, its index among the method's lines."""
    out, at = [], 0
    for step in steps:
        at = lines.index(step, at)
        out.append(at)
        at += 1
    return out

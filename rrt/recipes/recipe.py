"""The recipe record every stage passes around, and the rejects that explain what was dropped."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Recipe:
    """One recipe: a title, ingredient lines and instruction steps."""

    id: str
    title: str
    ingredients: list[str]
    steps: list[str]
    source: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (the JSONL line `rrt convert` writes)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Recipe:
        """Inverse of `to_dict`; unknown keys go into metadata."""
        known = {"id", "title", "ingredients", "steps", "source", "metadata"}
        meta = dict(row.get("metadata") or {})
        meta.update({k: v for k, v in row.items() if k not in known})
        return cls(
            id=str(row["id"]),
            title=row["title"],
            ingredients=list(row["ingredients"]),
            steps=list(row["steps"]),
            source=row.get("source", "") or "",
            metadata=meta,
        )


@dataclass
class RecipePair:
    """A source recipe that violates a constraint and a target that obeys it (or the reverse)."""

    source: Recipe
    target: Recipe
    source_tag: str
    target_tag: str

    @property
    def constraint(self) -> str:
        """The constraint named by the tags, without its `non-` prefix."""
        return self.target_tag.removeprefix("non-")


@dataclass
class Reject:
    """A record that could not become a clean recipe, with where it came from and why."""

    location: str
    reason: str
    detail: str = ""
    record_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (one line of a rejects file)."""
        return asdict(self)

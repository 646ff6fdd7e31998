"""Corpus survey: per constraint, how many recipes obey it, what breaks it, and how many
the substitution guide repairs (what `make demo` prints)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from rrt.recipes.recipe import Recipe
from rrt.recipes.substitutions import substitute_recipe
from rrt.recipes.tagger import tag_recipe


@dataclass
class ConstraintSurvey:
    """Counts for one constraint over a corpus."""

    valid: int = 0
    invalid: int = 0
    repaired: int = 0
    terms: Counter = field(default_factory=Counter)
    unrepaired: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """JSON form written to survey.json."""
        return {
            "valid": self.valid,
            "invalid": self.invalid,
            "repaired": self.repaired,
            "repair_rate": round(self.repaired / self.invalid, 4) if self.invalid else None,
            "top_terms": dict(self.terms.most_common(10)),
            "unrepaired_ids": self.unrepaired[:50],
        }


def survey(recipes: Iterable[Recipe], constraints: list[str]) -> dict:
    """Tag every recipe, substitute the invalid ones and re-tag them."""
    started = time.perf_counter()
    rows = {c: ConstraintSurvey() for c in constraints}
    count = 0
    for recipe in recipes:
        count += 1
        tags = tag_recipe(recipe, constraints)
        for constraint in constraints:
            row = rows[constraint]
            if tags.valid[constraint]:
                row.valid += 1
                continue
            row.invalid += 1
            row.terms.update(v.term for v in tags.violations[constraint])
            rewritten = substitute_recipe(recipe, constraint).recipe
            if tag_recipe(rewritten, [constraint]).valid[constraint]:
                row.repaired += 1
            else:
                row.unrepaired.append(recipe.id)
    seconds = time.perf_counter() - started
    return {
        "recipes": count,
        "seconds": round(seconds, 3),
        "recipes_per_second": round(count / seconds, 1) if seconds else None,
        "constraints": {c: rows[c].to_dict() for c in constraints},
    }


def format_survey(result: dict) -> str:
    """The survey as an aligned text table."""
    lines = [f"{'constraint':<13} {'valid':>6} {'invalid':>8} {'repaired':>9}  top violating terms"]
    for name, row in result["constraints"].items():
        rate = f"{row['repair_rate']:.0%}" if row["repair_rate"] is not None else "-"
        terms = ", ".join(list(row["top_terms"])[:5])
        lines.append(f"{name:<13} {row['valid']:>6} {row['invalid']:>8} {rate:>9}  {terms}")
    lines.append(
        f"{result['recipes']} recipes in {result['seconds']:.1f}s "
        f"({result['recipes_per_second']} recipes/s)"
    )
    return "\n".join(lines)

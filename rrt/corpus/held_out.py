"""Recipes held out of every split: id lists such as the technique set (data/technique_set/),
kept for evaluation so no model ever trains on them."""

from __future__ import annotations

import csv


def read_held_out(paths: list[str]) -> frozenset[str]:
    """The recipe ids of tab-separated lists with an `id` column; a missing file or column is a
    ValueError naming it."""
    ids: set[str] = set()
    for path in paths:
        try:
            with open(path, encoding="utf-8", newline="") as handle:
                reader = csv.DictReader(handle, delimiter="\t")
                if "id" not in (reader.fieldnames or []):
                    raise ValueError(f"held-out list {path} has no id column (tab-separated)")
                ids.update(row["id"].strip() for row in reader if (row["id"] or "").strip())
        except FileNotFoundError:
            raise ValueError(f"held-out list not found: {path} (data.held_out)") from None
        except UnicodeDecodeError:
            raise ValueError(f"held-out list {path} is not UTF-8 text") from None
    return frozenset(ids)

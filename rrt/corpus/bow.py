"""Bags of words for PPLM, one per constraint: the paper's lists, or lists built from a corpus.

The paper kept the words seen at least 5 times in recipes that fit a constraint and never in
recipes that break it (`build_bags`). Its lists ship with rrt (`rrt/data/pplm_bow/`, MIT,
from the paper's repository, `LICENSE` beside them); `load_bag` reads either kind of folder.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable
from importlib import resources

PAPER = "paper"
_WORD = re.compile(r"[a-z][a-z'-]*")


def paper_folder() -> str:
    """The folder of the paper's lists inside the package."""
    return str(resources.files("rrt").joinpath("data", "pplm_bow"))


def load_bag(source: str, constraints: list[str]) -> list[str]:
    """The words of every constraint's list in `source` (`paper` or a folder of <constraint>.txt)."""
    folder = paper_folder() if source == PAPER else source
    words: list[str] = []
    for constraint in constraints:
        path = os.path.join(folder, f"{constraint}.txt")
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"no bag of words for {constraint} in {folder} ({constraint}.txt)"
            )
        with open(path, encoding="utf-8") as handle:
            words += [line.strip() for line in handle if line.strip()]
    return list(dict.fromkeys(words))


def recipe_words(title: str, ingredients: Iterable[str], steps: Iterable[str]) -> set[str]:
    """The lowercase words of a recipe."""
    return set(_WORD.findall(" ".join([title, *ingredients, *steps]).lower()))


def build_bags(
    recipes: Iterable[tuple[set[str], dict[str, bool]]], constraints: list[str], min_count: int = 5
) -> dict[str, list[str]]:
    """Per constraint, the words in at least `min_count` recipes that fit it and in none that
    break it; `recipes` gives each recipe's words and its validity per constraint."""
    fits = {c: Counter() for c in constraints}
    breaks: dict[str, set[str]] = {c: set() for c in constraints}
    for words, valid in recipes:
        for constraint in constraints:
            if valid[constraint]:
                fits[constraint].update(words)
            else:
                breaks[constraint] |= words
    return {
        c: sorted(w for w, n in fits[c].items() if n >= min_count and w not in breaks[c])
        for c in constraints
    }


def write_bags(bags: dict[str, list[str]], folder: str) -> None:
    """One <constraint>.txt per bag, a word a line."""
    os.makedirs(folder, exist_ok=True)
    for constraint, words in bags.items():
        with open(os.path.join(folder, f"{constraint}.txt"), "w", encoding="utf-8") as handle:
            handle.write("".join(w + "\n" for w in words))

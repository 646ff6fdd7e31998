"""The words that go with a food (`widen`): the same as a search of the whole line back and on,
and read within a bounded reach, so a line of many foods costs time linear in its length."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from rrt.recipes.line_foods import ABSORB_AFTER, ABSORB_BEFORE, WORDS_REACH, line_foods, widen
from rrt.recipes.tagger import Violation

_BEFORE = {
    c: re.compile(r"(?:(?:" + "|".join(map(re.escape, w)) + r")[\s,]+)+$", re.IGNORECASE)
    for c, w in ABSORB_BEFORE.items()
}
_AFTER = {
    c: re.compile(r"(?:\s+(?:" + "|".join(map(re.escape, w)) + r"))+\b", re.IGNORECASE)
    for c, w in ABSORB_AFTER.items()
}


def widen_whole_line(line: str, start: int, end: int, category: str) -> tuple[int, int]:
    """`widen` by searching everything before the term and matching everything after it."""
    if category in _BEFORE:
        found = _BEFORE[category].search(line[:start])
        start = found.start() if found else start
    if category in _AFTER:
        found = _AFTER[category].match(line[end:])
        end = end + found.end() if found else end
    return start, end


# Words that go with foods (some glued into other words), foods, and words that go with none.
WORDS = st.sampled_from(
    [
        "whole",
        "Skim",
        "goat's",
        "raw",
        "sweet",
        "bittersweet",
        "medium-sweet",
        "large",
        "boneless",
        "skinless",
        "breast",
        "thighs",
        "meat",
        "fillets",
        "milk",
        "chicken",
        "salmon",
        "eggs",
        "dry",
        "wine",
        "of",
        "2%",
    ]
)
GAPS = st.sampled_from([" ", "  ", ", ", ",", "-", " (", "\n"])


@settings(max_examples=100, deadline=None)
@given(
    words=st.lists(st.tuples(WORDS, GAPS), min_size=1, max_size=10),
    at=st.integers(min_value=0),
    category=st.sampled_from(sorted(set(ABSORB_BEFORE) | set(ABSORB_AFTER))),
)
def test_widen_is_the_whole_line_search_within_its_reach(words, at, category):
    line = "".join(word + gap for word, gap in words)
    spans = [m.span() for m in re.finditer(r"\S+", line)]
    start, end = spans[at % len(spans)]
    assert len(line) <= WORDS_REACH  # far longer than any food's words: the whole line is in reach
    assert widen(line, start, end, category) == widen_whole_line(line, start, end, category)


class CountedLine(str):
    """A line that counts the characters read out of it: what widen's patterns are given to search."""

    read = 0

    def __getitem__(self, key):
        part = str.__getitem__(self, key)
        if isinstance(key, slice):
            self.read += len(part)
        return part


def _characters_read(repeats: int) -> int:
    line = CountedLine("bacon " * repeats)
    hits = [
        (Violation("bacon", "steps", 0, line, (at, at + 5), "meat"), "meat")
        for at in range(0, len(line), 6)
    ]
    line_foods(line, hits)
    return line.read


def test_a_line_of_many_foods_is_read_in_time_linear_in_its_length():
    few, many = _characters_read(300), _characters_read(2_400)
    # Linear is 8 times (a little more, as the first foods have less to read back); searching the
    # whole line back from every food read about 64 times as much.
    assert many <= 9 * few, (few, many)

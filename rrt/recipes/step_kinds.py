"""Which lines of a recipe's method are instructions, and which are serving counts, section
headers, notes or storage tips.

Scraped methods mix them: "Makes 1 serving.", "For the sauce:", "Enjoy!", "Store leftovers in
an airtight container for up to 5 days." A line that is not an instruction is neither rewritten
nor aligned (it would absorb links and teach the rewriter to emit headers), but it stays with
its recipe, placed before the instruction it preceded, so a section keeps its heading.

Every rule needs a strong cue: a real step lost to a wrong guess costs more than a header kept.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

KINDS = ("serving", "header", "note", "storage")
STEP = "step"

_SERVING = re.compile(
    r"^(?:this recipe\s+)?(?:makes|serves|yields?|servings?)\b[\s:]*(?:about\s+|approx\w*\s+)?\d",
    re.IGNORECASE,
)
_NOTE = re.compile(
    r"^(?:\W*(?:notes?|tips?|cook'?s notes?|chef'?s notes?|recipe notes?|nutrition(?:al)?(?: info\w*)?"
    r"|variations?|substitutions?|optional)\s*[:\-–—]|adapted from\b|recipe (?:from|by|adapted)\b"
    r"|photo(?:graph)?s? (?:by|credit)|https?://|©)",
    re.IGNORECASE,
)
_ENJOY = re.compile(r"^(?:\w+\s+and\s+)?enjoy\b|\benjoy[!.]*$", re.IGNORECASE)
_STORE_VERB = re.compile(
    r"\b(?:store[sd]?|storing|keeps?|kept|freezes?|frozen|refrigerated?|leftovers?|reheat\w*)\b",
    re.IGNORECASE,
)
# How long it keeps, or what is kept: a step's own timings are minutes and hours.
_STORE_SPAN = re.compile(
    r"\b(?:leftovers|(?:up to|for about|for up to|for|about)\s+\d+(?:\s*-\s*\d+)?\s*"
    r"(?:days?|weeks?|months?))\b",
    re.IGNORECASE,
)
_STORE_START = re.compile(
    r"^(?:to store|storage|storing|leftovers|make ahead|to reheat|to freeze)\b", re.IGNORECASE
)
_SECTION_START = re.compile(
    r"^(?:for (?:the )?\w|to (?:make|serve|assemble|finish)\b|make the\b|making the\b"
    r"|assembl\w*\b|meanwhile,? make\b|prepare the\b|preparing the\b)",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_END = re.compile(r"[.!?][\"')\]*]*$")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")


@dataclass
class NonStep:
    """A method line that is not an instruction: its kind, text, and the instruction it preceded."""

    kind: str
    text: str
    before: int

    def to_dict(self) -> dict:
        """Plain form for a table row."""
        return asdict(self)


def _short(line: str, words: int) -> bool:
    return len(line.split()) <= words and len(line) <= 70


def _unpunctuated(line: str) -> bool:
    """A short line with no final sentence mark: how a heading looks."""
    return _short(line, 7) and not _END.search(line.strip())


def _headed(line: str) -> bool:
    """A heading by its own look: a colon at the end, capitals throughout, or a section phrase."""
    text = line.strip().rstrip("*").strip()
    if text.endswith(":") and _short(text, 10):
        return True
    letters = "".join(_WORD.findall(text))
    if _unpunctuated(text) and len(letters) >= 3 and letters.isupper():
        return True
    return _unpunctuated(text) and bool(_SECTION_START.match(text))


def line_kind(line: str) -> str:
    """The kind of one method line on its own: `step`, or serving, note or storage (headers
    need their neighbours, see `classify`)."""
    text = line.strip()
    if _SERVING.match(text) and _short(text, 10):
        return "serving"
    if _NOTE.search(text) or (_ENJOY.search(text) and _short(text, 5)):
        return "note"
    if _STORE_START.match(text) or _about_storage(text):
        return "storage"
    return STEP


def _about_storage(text: str) -> bool:
    """Every sentence is about keeping the dish (or a few words), and one says how long or how:
    a method step that mentions a container in passing stays a step."""
    sentences = [s for s in _SENTENCE.split(text) if s.strip()]
    told = [bool(_STORE_VERB.search(s) and _STORE_SPAN.search(s)) for s in sentences]
    return any(told) and all(_STORE_VERB.search(s) or len(s.split()) <= 4 for s in sentences)


def classify(lines: list[str]) -> list[str]:
    """The kind of every method line, headers found from the lines around them.

    A heading precedes the text it heads, so the last line is never one. A short unpunctuated
    line counts as a heading only when the method uses such lines as headings at least twice,
    each followed by a longer instruction; a method written wholly in short unpunctuated lines
    keeps them all as steps."""
    kinds = [line_kind(line) for line in lines]
    last = len(lines) - 1
    for i, line in enumerate(lines[:-1]):
        if kinds[i] == STEP and _headed(line):
            kinds[i] = "header"
    weak = [
        i
        for i in range(last)
        if kinds[i] == STEP
        and _unpunctuated(lines[i])
        and not _unpunctuated(lines[i + 1])
        and len(lines[i + 1]) > len(lines[i])
    ]
    if len(weak) >= 2:
        for i in weak:
            kinds[i] = "header"
    return kinds


def split_method(lines: list[str]) -> tuple[list[str], list[NonStep]]:
    """(instructions, other lines), each other line placed before the instruction it preceded."""
    steps: list[str] = []
    others: list[NonStep] = []
    for line, kind in zip(lines, classify(lines)):
        if kind == STEP:
            steps.append(line)
        else:
            others.append(NonStep(kind, line, len(steps)))
    return steps, others

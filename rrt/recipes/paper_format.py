"""The paper's text format: special tokens, constraint tags, and parsing of its lines.

A line is a whole recipe, a recipe pair (source recipe, tag, target recipe) or a
contextual step pair (source recipe up to step n, tag, one target step). Both tag
spellings are read (`<src:non-vegan>` and `<source:non-vegan>`); `<src:…>` is written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

BOS, EOS = "<|startoftext|>", "<|endoftext|>"
END_TITLE, ING, END_INGS = "<endoftitle>", "<ing>", "<endofings>"
INST, END_INST, END_PROMPT, NO_INGS = "<inst>", "<endofinst>", "<endofprompt>", "<noings>"
END_RECIPE = "<endofrecipe>"
STRUCTURE_TOKENS = [BOS, EOS, END_TITLE, ING, END_INGS, INST, END_INST, END_PROMPT, NO_INGS]

TAG_PATTERN = re.compile(r"<(src|tgt|source|target):(non-)?([a-z][a-z-]*)>")


def constraint_tag(role: str, constraint: str, obeys: bool) -> str:
    """The tag we emit, e.g. `<src:non-vegan>` or `<tgt:vegan>`."""
    if role not in ("src", "tgt"):
        raise ValueError(f"role must be 'src' or 'tgt', not {role!r}")
    return f"<{role}:{'' if obeys else 'non-'}{constraint}>"


def constraint_tokens(constraints: list[str]) -> list[str]:
    """Every tag token for these constraints, both roles and both directions."""
    return [
        constraint_tag(r, c, ok)
        for c in constraints
        for r in ("src", "tgt")
        for ok in (False, True)
    ]


@dataclass
class RecipeParts:
    """Title, ingredient lines and steps as written in one side of a line."""

    title: str = ""
    ingredients: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)


@dataclass
class PaperLine:
    """One parsed line: its kind, its tags (without `non-` stripped) and its parts."""

    kind: str  # "recipe", "recipe_pair" or "step_pair"
    source: RecipeParts
    source_tag: str = ""  # e.g. "non-vegan"
    target_tag: str = ""
    target: RecipeParts | None = None
    target_steps: list[str] = field(default_factory=list)


class PaperFormatError(ValueError):
    """A line that is not in the paper's text format."""


def _split(text: str, token: str) -> list[str]:
    return [part.strip() for part in text.split(token) if part.strip()]


def parse_recipe_parts(text: str) -> RecipeParts:
    """Parse `title <endoftitle> ing <ing> … <endofings> step <inst> … <endofinst>`."""
    text = text.replace(END_RECIPE, " ")
    if END_TITLE not in text:
        raise PaperFormatError("missing <endoftitle>")
    title, rest = text.split(END_TITLE, 1)
    ings, _, steps = rest.partition(END_INGS) if END_INGS in rest else ("", "", rest)
    steps = steps.split(END_INST, 1)[0]
    ingredients = [] if ings.strip() == NO_INGS else _split(ings, ING)
    return RecipeParts(title.strip(), ingredients, _split(steps, INST))


def parse_line(line: str) -> PaperLine:
    """Parse one line of the paper's text format (any of its three kinds)."""
    text = line.strip()
    if not text.startswith(BOS):
        raise PaperFormatError("line does not start with <|startoftext|>")
    text = text[len(BOS) :].split(EOS, 1)[0]
    tags = list(TAG_PATTERN.finditer(text))
    src_tag = next((m for m in tags if m.group(1) in ("src", "source")), None)
    tgt_tag = next((m for m in tags if m.group(1) in ("tgt", "target")), None)
    if tgt_tag is None:
        start = src_tag.end() if src_tag else 0
        return PaperLine("recipe", parse_recipe_parts(text[start:]), _tag_value(src_tag))
    if src_tag is None or src_tag.start() > tgt_tag.start():
        raise PaperFormatError("target tag without a source tag before it")
    source = parse_recipe_parts(text[src_tag.end() : tgt_tag.start()])
    rest = text[tgt_tag.end() :]
    line_out = PaperLine("step_pair", source, _tag_value(src_tag), _tag_value(tgt_tag))
    if END_TITLE in rest:
        line_out.kind, line_out.target = "recipe_pair", parse_recipe_parts(rest)
    else:
        line_out.target_steps = _split(rest.replace(END_RECIPE, " ").split(END_INST, 1)[0], INST)
    return line_out


def _tag_value(match: re.Match | None) -> str:
    return "" if match is None else (match.group(2) or "") + match.group(3)


def format_recipe(title: str, ingredients: list[str], steps: list[str]) -> str:
    """`title <endoftitle> ings <endofings> steps <endofinst>` (no BOS/EOS)."""
    ings = f" {ING} ".join(ingredients) if ingredients else NO_INGS
    return f"{title} {END_TITLE} {ings} {END_INGS} {f' {INST} '.join(steps)} {END_INST}"

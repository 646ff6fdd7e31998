"""Dietary tagger: which constraints a recipe obeys, and every span that breaks one.

A term counts as a violation unless something says it is not that food: an exception
phrase around it ("coconut milk"), a kitchen thing it names ("cheese grater", "butter paper",
"fish mould": a utensil, wrapping or mould noun right after it), a shape, size or colour it
lends its name to ("egg-shaped", "walnut-sized", "the size of a walnut"), a plant-based modifier before it
("vegan butter"), a "-free"/"substitute" after it, a negation before it ("in place of
peanuts"), quotes around it ('Honey' Mustard), an offered alternative ("beef broth (or
water)"), an "optional" on its ingredient line, or, in the title and steps, a reference to
an ingredient line that names it in a harmless form (ingredients say "vegan butter", a step
says "melt the butter"). A title term counts only when an ingredient line of the same
food category is harmful too: "Parsnip Lobster Rolls" names a stand-in.

A list shares its head: in "ranch or blue cheese dressing" and "chicken or beef broth" each
member before the head names that head's food ("ranch dressing", "chicken broth"), so the
member's mention takes the longer term; its span stays the member's words. A member that is a
food on its own takes the shared head only after "or" or "/" ("the chicken and beef broth" is
chicken and a broth), or when the head is plural. A derived word ("buttered", "cheesy") says the
food is in the dish, so it names no kitchen thing ("a buttered pan"). A dish term (pesto,
custard) in a step counts where an ingredient line names that dish in a harmful form or the
step says it is bought ("spread with store-bought pesto").
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from rrt.recipes.lexicon import (
    CATEGORIES,
    CONSTRAINT_CATEGORIES,
    CONSTRAINTS,
    FILLED_MOULDS,
    KITCHEN_NOT_BEFORE,
    LIKENESS_SUFFIXES,
    LIKENESS_WORDS,
    MOULDS,
    NEGATIONS,
    NOT_A_MEASURE,
    OPTIONAL_MARKERS,
    SAFE_ALTERNATIVES,
    SIZE_COMPARISONS,
    SUFFIX_NEUTRALISERS,
    SYNONYMS,
    UTENSILS,
    WRAPPINGS,
    Category,
)
from rrt.recipes.recipe import Recipe

_CLAUSE_BREAK = re.compile(r"[.,;:()!?\[\]/]")
_WORD = re.compile(r"[\w'’-]+")
_STOP = {"and", "or", "with", "plus", "&", "then", "into", "on", "in", "over", "of", "to", "for"}
_QUOTES = "'\"‘’“”"
STRONG_WINDOW = 3
LOOKBACK = 160  # characters before a term that can hold what makes it harmless
_FIELD_ORDER = {"title": 0, "ingredients": 1, "steps": 2}
_LETTERS = re.compile(r"[^\W\d_]+")
_ALTERNATIVE = re.compile(r"\bor\b|/", re.IGNORECASE)
_CUT_WORD = re.compile(r"^[\w'’-]+")
_SAFE_ALTERNATIVE = re.compile(
    r"\b(?:" + "|".join(re.escape(a) for a in SAFE_ALTERNATIVES) + r")\b"
)
_LIKENESS = re.compile(
    r"(?:-(?:"
    + "|".join(LIKENESS_SUFFIXES)
    + r")|\s+(?:"
    + "|".join(LIKENESS_WORDS)
    + r")|\s+(?:shape|size)(?=\s*(?:[^\w\s]|$)))\b",
    re.IGNORECASE,
)
_KITCHEN = re.compile(
    r"(?:\s+|-)(?:(?P<mould>"
    + "|".join(MOULDS)
    + ")|"
    + "|".join(UTENSILS + WRAPPINGS)
    + r")(?:s|es)?(?![\w-])(?!\s+(?:"
    + "|".join(KITCHEN_NOT_BEFORE)
    + r")\b)",
    re.IGNORECASE,
)
_MEASURE = re.compile(
    r"\b(?:"
    + "|".join(re.escape(c) for c in SIZE_COMPARISONS)
    + r")(?:\s+(?!(?:"
    + "|".join(NOT_A_MEASURE)
    + r")\b)[\w'’-]+){0,2}\s+$",
    re.IGNORECASE,
)
# Mentions that name a thing or a measure, not the food: a step's bare mention cannot refer back to them.
_NOT_THE_FOOD = {"tool", "likeness", "size"}
# Words right before a dish that say it is bought, not made from the recipe's lines ("store-bought pesto").
_BOUGHT = re.compile(
    r"\b(?:store[\s-]?bought|prepared|jarred|bottled|ready[\s-]made|premade|pre-made)\s+(?:[\w'-]+\s+)?$",
    re.IGNORECASE,
)
# What joins the members of a list that share a head; "or" and "/" offer one food or another.
_LIST_JOIN = re.compile(
    r"\s*(?:,\s*(?:(?:or|and)\s+)?|(?<!\d)/(?!\d)|&)\s*|\s+(?:or|and)\s+", re.IGNORECASE
)
_LIST_BREAK = re.compile(r"[.;:()!?\[\]]")
# The join before a list's last member names it as one: "or", "and", "/" or "&", not a bare comma.
_LIST_END = re.compile(r"\b(?:or|and)\b|/|&", re.IGNORECASE)
LIST_ITEMS = 4  # members looked at before one head
LIST_ITEM_WORDS = 3  # a longer stretch between joins is no list item
_NEGATED = re.compile(
    r"\b(?:" + "|".join(re.escape(n) for n in NEGATIONS) + r")(?:\s+[\w'/½¼¾-]+){0,2}\s+$",
    re.IGNORECASE,
)


@dataclass
class Mention:
    """One occurrence of a lexicon term in a text, harmless or not."""

    category: str
    term: str
    start: int
    end: int
    neutral: bool
    why: str = ""


@dataclass
class Violation:
    """A span that breaks a constraint: its term, where it is and the line it is on."""

    term: str
    field: str
    index: int
    text: str
    span: tuple[int, int]
    category: str

    def to_dict(self) -> dict:
        """JSON form used by `rrt tag`: where the span is, not the line (TagResult gives each line once)."""
        out = asdict(self)
        del out[
            "text"
        ]  # a line of n mentions would be written n times: output growing with its square
        out["span"] = list(self.span)
        return out


@dataclass
class TagResult:
    """Validity per constraint and the violations behind every `False`."""

    id: str
    valid: dict[str, bool] = field(default_factory=dict)
    violations: dict[str, list[Violation]] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON form printed by `rrt tag`: violations point at `lines`, which holds each line they are on once."""
        lines = {(v.field, v.index): v.text for vs in self.violations.values() for v in vs}
        order = sorted(lines, key=lambda where: (_FIELD_ORDER[where[0]], where[1]))
        return {
            "id": self.id,
            "valid": self.valid,
            "violations": {c: [v.to_dict() for v in vs] for c, vs in self.violations.items() if vs},
            "lines": [{"field": f, "index": i, "text": lines[f, i]} for f, i in order],
        }


def _phrase_pattern(phrase: str) -> str:
    words = [re.escape(w) for w in re.split(r"[\s-]+", phrase.strip())]
    body = r"[\s-]+".join(words)
    if phrase[-1:].isalpha():
        body += r"(?:s|es)?" if not phrase.endswith("y") else r"(?:s|es)?|" + body[:-1] + "ies"
        body = f"(?:{body})"
    return body


def _alternation(phrases: Iterable[str], exact: Iterable[str] = ()) -> re.Pattern | None:
    # Exact phrases imply no plural: "fish slice" is a tool, "fish slices" are food.
    patterns = {p: _phrase_pattern(p) for p in phrases}
    patterns.update(
        (p, r"[\s-]+".join(re.escape(w) for w in re.split(r"[\s-]+", p.strip()))) for p in exact
    )
    ordered = sorted(patterns, key=len, reverse=True)
    if not ordered:
        return None
    return re.compile(
        r"(?<!\w)(?:" + "|".join(patterns[p] for p in ordered) + r")(?!\w)", re.IGNORECASE
    )


def normalise_term(text: str) -> str:
    """Lowercase, single-spaced form of a phrase (the key terms are compared by)."""
    return re.sub(r"[\s-]+", " ", text.lower()).strip()


def _split_words(text: str) -> frozenset[str]:
    return frozenset(_LETTERS.findall(text.lower()))


# Every category's pre-check reads a line's words: split a line once, not once per category. The
# caches hold a bounded number of lines of bounded length (under 512 x 512 + 16 x 64 Ki characters),
# so a stream of long steps cannot pile up in them; a longer line is split once per category.
_short_line_words = functools.lru_cache(maxsize=512)(_split_words)  # 1 line in 170 is longer
_long_line_words = functools.lru_cache(maxsize=16)(_split_words)


def _letter_words(text: str) -> frozenset[str]:
    if len(text) <= 512:
        return _short_line_words(text)
    return _long_line_words(text) if len(text) <= 64 * 1024 else _split_words(text)


class _CategoryMatcher:
    def __init__(self, category: Category):
        self.category = category
        self.terms = _alternation(category.terms)
        self.exceptions = _alternation(category.exceptions, exact=category.tools)
        self.tools = {normalise_term(t) for t in category.tools}
        # A noun adjunct is singular: "egg pan" names a pan, "the eggs pan by pan" names eggs.
        keys = {normalise_term(t) for t in category.terms}
        # A derived word names no thing: a buttered pan is butter.
        self.singular = {
            t for t in keys if not (t.endswith("s") and {t[:-1], t[:-2], t[:-3] + "y"} & keys)
        } - {normalise_term(t) for t in category.derived}
        # Heads a list may share: the last word of each term of two or more words, by form, with the
        # words before it and the term they make ("dressing" -> {"ranch": "ranch dressing"}).
        self.shared: dict[str, dict[str, str]] = {}
        self.plural_heads: set[str] = set()
        for term in category.terms:
            *lead, head = normalise_term(term).split()
            if not lead or len(head) < 3:
                continue
            key = normalise_term(term)
            plurals = {head + "s", head + "es"} | (
                {head[:-1] + "ies"} if head.endswith("y") else set()
            )
            self.plural_heads |= plurals - {head}
            for form in {head} | plurals:
                self.shared.setdefault(form, {})[" ".join(lead)] = SYNONYMS.get(key, key)
        self.head_words = set(self.shared)
        self.heads = (
            re.compile(
                r"(?<![\w-])(?:"
                + "|".join(sorted(map(re.escape, self.shared), key=len, reverse=True))
                + r")(?![\w-])",
                re.IGNORECASE,
            )
            if self.shared
            else None
        )
        self.filled_moulds = {normalise_term(t) for t in FILLED_MOULDS}
        self.modifiers = {normalise_term(m) for m in category.modifiers}
        self.adjacent = {normalise_term(m) for m in category.adjacent}
        self.dish_terms = {normalise_term(t) for t in category.dish_terms}
        self.canonical: dict[str, str] = {}
        for term in category.terms:
            key = normalise_term(term)
            for form in (
                key,
                key + "s",
                key + "es",
                key[:-1] + "ies" if key.endswith("y") else key,
            ):
                self.canonical.setdefault(form, key)
        # Cheap pre-check: a line none of whose words starts a term cannot match.
        self.first_words = set()
        for term in category.terms:
            first = re.split(r"[\s-]+", normalise_term(term))[0]
            self.first_words |= {first, first + "s", first + "es", first[:-1] + "ies"}
        self.suffix = re.compile(
            r"[\s-]*(?:" + "|".join(SUFFIX_NEUTRALISERS) + r")\b", re.IGNORECASE
        )

    def term_of(self, matched: str) -> str:
        key = normalise_term(matched)
        if key not in self.canonical:
            # Case-insensitive matching folds more than lower() does ("ſalmon", "mİlk"): ask the patterns.
            key = next(
                (
                    normalise_term(t)
                    for t in self.category.terms
                    if re.fullmatch(_phrase_pattern(t), matched, re.IGNORECASE)
                ),
                key,
            )
        key = self.canonical.get(key, key)
        return SYNONYMS.get(key, key)

    def _modified(self, text: str, start: int, whole_title: bool = False) -> str:
        # Negations, modifiers and glued prefixes sit within a few words of the term; reading
        # only that far back keeps a line of many mentions linear (a whole clause would not).
        before = text[max(0, start - LOOKBACK) : start]
        if start > LOOKBACK:
            before = _CUT_WORD.sub("", before)
        if _NEGATED.search(before):
            return "negated"
        if _MEASURE.search(before):
            return "size"
        # The hyphenated word the term ends ("non-dairy") counts as a modifier too.
        glued = re.search(r"([\w'-]+)-$", before)
        if glued:
            word = _WORD.match(text, start)
            joined = normalise_term(glued.group(1) + " " + (word.group(0) if word else ""))
            if {normalise_term(glued.group(1)), joined} & (self.modifiers | self.adjacent):
                return "modifier"
        clause = _CLAUSE_BREAK.split(before)[-1].lower()
        words = [normalise_term(w) for w in _WORD.findall(clause)]
        if whole_title:
            # "Vegan Butternut Squash Mac and Cheese": a title's diet word covers the dish.
            grams = set(words) | {" ".join(words[i : i + 2]) for i in range(len(words) - 1)}
            if grams & self.modifiers:
                return "modifier"
        words = words[-STRONG_WINDOW:]
        if words and (words[-1] in self.adjacent or " ".join(words[-2:]) in self.adjacent):
            return "modifier"
        window: list[str] = []
        for word in reversed(words):
            if word in _STOP:
                break
            window.insert(0, word)
        grams = set(window) | {" ".join(window[i : i + 2]) for i in range(len(window) - 1)}
        return "modifier" if grams & self.modifiers else ""

    def scan(self, text: str, whole_title: bool = False) -> list[Mention]:
        if self.terms is None or not text:
            return []
        words = _letter_words(text)
        if self.first_words.isdisjoint(words) and self.head_words.isdisjoint(words):
            return []
        matches = list(self.terms.finditer(text))
        if not matches and (self.heads is None or not self.heads.search(text)):
            return []
        # Exception spans come in order and never overlap, so the one that may hold a match is the
        # last to start at or before it: both lists are walked once, together.
        shields = [m.span() for m in self.exceptions.finditer(text)] if self.exceptions else []
        shield = -1
        found = []
        for match in matches:
            start, end = match.span()
            while shield + 1 < len(shields) and shields[shield + 1][0] <= start:
                shield += 1
            term = self.term_of(match.group(0))
            why = ""
            if shield >= 0 and end <= shields[shield][1]:
                why = (
                    "tool"
                    if normalise_term(text[slice(*shields[shield])]) in self.tools
                    else "exception"
                )
            elif self.suffix.match(text, end):
                why = "free_or_substitute"
            elif _LIKENESS.match(text, end):
                why = "likeness"
            elif (
                (kitchen := _KITCHEN.match(text, end))
                and normalise_term(match.group(0)) in self.singular
                and not (kitchen.group("mould") and term in self.filled_moulds)
            ):
                why = "tool"  # a singular food word naming a thing: "butter knife", not "nuts pan"
            elif (
                start > 0
                and end < len(text)
                and text[start - 1] in _QUOTES
                and text[end] in _QUOTES
            ):
                why = "quoted"
            else:
                why = self._modified(text, start, whole_title)
            previous = found[-1] if found else None
            if not why and previous and previous.neutral and not text[previous.end : start].strip():
                why = "compound"  # "cashew ricotta cheese": the head shares its modifier's fate
            found.append(Mention(self.category.name, term, start, end, bool(why), why))
        added = self._list_members(text, shields, found, whole_title)
        return sorted(found + added, key=lambda m: m.start) if added else found

    def _list_members(
        self, text: str, shields: list[tuple[int, int]], found: list[Mention], whole_title: bool
    ) -> list[Mention]:
        """Members of a list before a head they share ("ranch" of "ranch or blue cheese dressing"):
        a member already found takes the longer term, a member that is no term alone is added."""
        if self.heads is None or self.head_words.isdisjoint(_letter_words(text)):
            return []
        at = {m.start: m for m in found}
        spans = [(m.start, m.end) for m in found]
        added: list[Mention] = []
        for head in self.heads.finditer(text):
            k = bisect.bisect_right(shields, (head.start(), len(text))) - 1
            if k >= 0 and shields[k][0] <= head.start() and shields[k][1] > head.end():
                continue  # no head here: "wine" of "white wine vinegar"
            before = text[max(0, head.start() - LOOKBACK) : head.start()]
            clause = _LIST_BREAK.split(before)[-1]
            base = head.start() - len(clause)
            joins = list(_LIST_JOIN.finditer(clause))[-LIST_ITEMS:]
            if not joins or len(clause[joins[-1].end() :].split()) > LIST_ITEM_WORDS:
                continue
            if not _LIST_END.search(joins[-1].group(0)):
                continue  # a bare comma ends no list: "until golden brown, adding more butter"
            said = head.group(0).casefold()
            shared = self.shared.get(said)
            if shared is None:
                continue  # matched only by folding case further than casefold does
            plural = said in self.plural_heads
            for i in range(len(joins) - 1, -1, -1):
                lead = joins[i - 1].end() if i else 0
                item = clause[lead : joins[i].start()]
                offers = bool(re.search(r"\bor\b|/", joins[i].group(0), re.IGNORECASE))
                words = list(_WORD.finditer(item))[-2:]
                for size in (2, 1):
                    if len(words) < size:
                        continue
                    term = shared.get(" ".join(w.group(0).casefold() for w in words[-size:]))
                    if term is None:
                        continue
                    start, end = base + lead + words[-size].start(), base + lead + words[-1].end()
                    if start in at and at[start].end == end:
                        if offers or plural:
                            at[start].term = term  # "chicken or beef broth": a chicken broth
                    elif not self._covered(spans, shields, start, end):
                        why = self._modified(text, start, whole_title)
                        added.append(Mention(self.category.name, term, start, end, bool(why), why))
                    break
                if len(item.split()) > LIST_ITEM_WORDS:
                    break  # the words before the list's first member
        return added

    @staticmethod
    def _covered(
        spans: list[tuple[int, int]], shields: list[tuple[int, int]], start: int, end: int
    ) -> bool:
        for taken in (spans, shields):
            k = bisect.bisect_right(taken, (start, 1 << 62)) - 1
            if k >= 0 and taken[k][1] > start:
                return True
        return False

    def scan_field(self, text: str, field_name: str, lenient: bool = True) -> list[Mention]:
        """Scan one recipe line; when lenient, offered alternatives are harmless, and so are
        optional ingredient lines."""
        mentions = self.scan(text, whole_title=field_name == "title")
        if not lenient or not mentions:
            return mentions
        lowered = text.lower()
        optional = field_name == "ingredients" and any(m in lowered for m in OPTIONAL_MARKERS)
        offers = _Alternatives(text, mentions)
        for mention in mentions:
            if mention.neutral:
                continue
            if optional:
                mention.neutral, mention.why = True, "optional"
            elif offers.offered_besides(mention):
                mention.neutral, mention.why = True, "alternative"
                offers.now_harmless(mention)
        return mentions


class _Alternatives:
    """The "or" and "/" segments of a line and which of them offer a harmless alternative (a
    safe food, or a mention already harmless). Built once per line and updated as mentions turn
    harmless, so a line of many mentions costs time linear in its length."""

    def __init__(self, text: str, mentions: list[Mention]):
        self.bounds = [0] + [m.end() for m in _ALTERNATIVE.finditer(text)] + [len(text) + 1]
        self.harmless = [0] * (len(self.bounds) - 1)
        for k, (start, end) in enumerate(zip(self.bounds, self.bounds[1:])):
            words = normalise_term(re.sub(r"[^\w\s-]", " ", text[start:end]))
            self.harmless[k] = int(_SAFE_ALTERNATIVE.search(words) is not None)
        for mention in mentions:
            if mention.neutral:
                self.harmless[self._segment(mention)] += 1
        self.offering = sum(1 for n in self.harmless if n)

    def _segment(self, mention: Mention) -> int:
        return bisect.bisect_right(self.bounds, mention.start) - 1

    def offered_besides(self, mention: Mention) -> bool:
        """Whether a segment other than the mention's own offers a harmless alternative."""
        return self.offering - (1 if self.harmless[self._segment(mention)] else 0) > 0

    def now_harmless(self, mention: Mention) -> None:
        """Count a mention that has just turned harmless in its segment."""
        k = self._segment(mention)
        self.offering += not self.harmless[k]
        self.harmless[k] += 1


@functools.cache
def _matcher(category: str) -> _CategoryMatcher:
    return _CategoryMatcher(CATEGORIES[category])


def parse_constraints(spec: str | Iterable[str]) -> list[str]:
    """`all`, `vegan`, `vegan,nut-free` or a list → validated constraint names."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    names: list[str] = []
    for item in (i.strip().lower() for i in items):
        if item == "all":
            names += [c for c in CONSTRAINTS if c not in names]
        elif item in CONSTRAINTS:
            names += [item] if item not in names else []
        elif item:
            raise ValueError(
                f"unknown constraint {item!r}; choose from: all, {', '.join(CONSTRAINTS)}"
            )
    if not names:
        raise ValueError("no constraint given")
    return names


def scan_text(text: str, category: str) -> list[Mention]:
    """Every mention of a category's terms in a text, each marked harmless or not."""
    return _matcher(category).scan(text)


def _fields(recipe: Recipe) -> list[tuple[str, int, str]]:
    rows = [("title", 0, recipe.title)]
    rows += [("ingredients", i, line) for i, line in enumerate(recipe.ingredients)]
    rows += [("steps", i, line) for i, line in enumerate(recipe.steps)]
    return rows


def _head(term: str) -> str:
    return term.rsplit(" ", 1)[-1]


def category_violations(recipe: Recipe, category: str, lenient: bool = True) -> list[Violation]:
    """Violations of one food category anywhere in a recipe (lenient: optional items and
    offered alternatives do not count; the substitution guide replaces them all the same)."""
    matcher = _matcher(category)
    mentions = [
        (f, i, line, m)
        for f, i, line in _fields(recipe)
        for m in matcher.scan_field(line, f, lenient)
    ]
    harmful = {m.term for f, _, _, m in mentions if f == "ingredients" and not m.neutral}
    harmless = {
        m.term
        for f, _, _, m in mentions
        if f == "ingredients" and m.neutral and m.why not in _NOT_THE_FOOD
    }
    harmful_heads, harmless_heads = {_head(t) for t in harmful}, {_head(t) for t in harmless}
    harmful_dishes = harmful & matcher.dish_terms
    out = []
    for field_name, index, line, mention in mentions:
        if mention.neutral:
            continue
        if field_name == "title" and not harmful:
            continue  # a title names the dish; with no such ingredient it names a stand-in
        if field_name != "ingredients":
            if mention.term in matcher.dish_terms and (
                field_name == "title"
                or (
                    mention.term not in harmful_dishes
                    and not _BOUGHT.search(line[max(0, mention.start - 40) : mention.start])
                )
            ):
                continue  # a dish a line does not name as bought is made from the listed ingredients
            if _head(mention.term) in harmless_heads and _head(mention.term) not in harmful_heads:
                continue  # refers back to an ingredient named in a harmless form
        out.append(
            Violation(mention.term, field_name, index, line, (mention.start, mention.end), category)
        )
    return out


def tag_recipe(
    recipe: Recipe, constraints: Iterable[str] = CONSTRAINTS, lenient: bool = True
) -> TagResult:
    """Validity of a recipe for each constraint, with the violations found. Strict
    (`lenient=False`) also counts optional items and offered alternatives: a training target
    must not name a forbidden food at all, or the rewriter learns to write it."""
    result = TagResult(recipe.id)
    cache: dict[str, list[Violation]] = {}
    for constraint in constraints:
        found = []
        for cat in CONSTRAINT_CATEGORIES[constraint]:
            if cat not in cache:
                cache[cat] = category_violations(recipe, cat, lenient)
            found += cache[cat]
        result.violations[constraint] = sorted(
            found, key=lambda v: (_FIELD_ORDER[v.field], v.index, v.span)
        )
        result.valid[constraint] = not found
    return result


def text_violations(text: str, constraints: Iterable[str]) -> list[Mention]:
    """Harmful mentions in a lone text (a generated step), for the given constraints."""
    cats = {c for con in constraints for c in CONSTRAINT_CATEGORIES[con]}
    return [m for cat in sorted(cats) for m in scan_text(text, cat) if not m.neutral]

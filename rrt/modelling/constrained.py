"""Constrained decoding: make it impossible for a sampled step to name a forbidden food.

The engine keeps, per row, the step text written so far (free of completed violations),
samples a token and asks the guard about `text + piece(token)`:

    guard = ViolationGuard(tokenizer, ["vegan", "nut-free"], stop_ids={eos_id, inst_id})
    verdict = guard.check(text, token_id)
    Verdict.OK            -> accept the token
    Verdict.BAN_TOKEN     -> a violation ends inside this token's piece: ban it, resample
    Verdict.BAN_WORD_END  -> the violating word is already written and this token would end
                             it: take the word back (`guard.violation_start(text)`), or ban
                             every id in `guard.word_end_ids` for this row, so only a letter
                             can follow ("egg" -> "eggplant", "butter" -> "buttery")

A violation is what `rrt.recipes.tagger.text_violations` reports, so its harmless mentions stay
allowed ("eggplant", "nutmeg", "coconut milk", "peanut butter" for dairy-free). It counts
only once its last word is complete: followed by a non-word character (the tagger's `\\w`
boundary) or by a stop or other special token, which ends the step. "Add the eg" and
"Add the egg" (before "plant") are fine.

Limits, by design:
- Exceptions decided by the words that FOLLOW a term are blocked conservatively: once
  "egg" is complete, "egg replacer", "egg-free", "oyster crackers" or "butter substitute"
  can no longer be written; the model must word it another way.
- Once a term's word is complete, only letters may follow, and a model would glue some on
  ("chickenocks"). So the decode loops take such a word back instead (rrt.modelling.guarded_row),
  up to a number of times a row; past that, selection's `no_disguised_food` rule sees the glued word.
- A byte-level token holding part of a multi-byte character reads as U+FFFD, so a term
  spelled through such fragments ("crème" as "cr", 0xC3, 0xA8, "me") is invisible here.
  Run `guard_text` on the finally decoded text as the last resort.

A closed set of foods (`guard.closed(held)`, `rewrite.closed_foods`): a food that the recipe does not
hold (rrt.recipes.foods.unlisted_foods: not in the rewritten title and ingredient lines, the source
recipe or the pantry) is refused and taken back exactly as a forbidden food is, for any number of
constraints, so a guarded step cannot name peanuts in a taco recipe.

Cost: pieces and word-end flags are computed once per tokenizer and stop set (`token_tables`) and
shared by all its guards, closed ones too; `shared_guard` keeps a tokenizer's guards by their set of
constraints, the least recently used dropped past GUARDS_KEPT;
the tagger runs only when a token ends a word that is the last word of some lexicon term (about
one token in twenty), the food matcher when it ends the last word of some food name.
"""

from __future__ import annotations

import copy
import enum
import functools
import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from rrt.recipes.foods import known_foods, unlisted_foods
from rrt.recipes.lexicon import CATEGORIES, CONSTRAINT_CATEGORIES, CONSTRAINTS
from rrt.recipes.tagger import normalise_term, parse_constraints, text_violations

_WORD = re.compile(r"\w+")
# A tokenizer's token tables cover its whole vocabulary, so they are made once and shared by all its
# guards; what a guard holds beyond them is its constraints' term words. Guards are kept per
# tokenizer by their set of constraints, which a request chooses: the bound keeps what requests can
# make small, and a guard that was dropped costs only its term words to make again.
GUARDS_KEPT = 32
TABLES_KEPT = 4  # stop sets per tokenizer (one per model variant that decodes with it)


class Verdict(str, enum.Enum):
    """What the engine does with a sampled token."""

    OK = "ok"
    BAN_TOKEN = "ban_token"
    BAN_WORD_END = "ban_word_end"


def _word_char(char: str) -> bool:
    # Python's `\w`, the boundary the tagger's term patterns use.
    return char.isalnum() or char == "_"


def _last_word_start(text: str) -> int:
    # Where the word running to the end of `text` starts (its length when it ends in a non-word character).
    start = len(text)
    while start and _word_char(text[start - 1]):
        start -= 1
    return start


def _forms(word: str) -> set[str]:
    # The plural forms the tagger's term patterns accept.
    forms = {word, word + "s", word + "es"}
    if word.endswith("y"):
        forms.add(word[:-1] + "ies")
    return forms


def term_last_words(constraints: Iterable[str]) -> frozenset[str]:
    """Lowercase last words (with plurals) of every lexicon term the constraints forbid."""
    categories = {c for con in constraints for c in CONSTRAINT_CATEGORIES[con]}
    return frozenset().union(*map(_category_last_words, categories))


@functools.cache
def _category_last_words(category: str) -> frozenset[str]:
    # Per category, so a guard of a new set of constraints is a union of sets made once.
    words: set[str] = set()
    for term in CATEGORIES[category].terms:
        last = _WORD.findall(normalise_term(term))
        if last:
            words |= _forms(last[-1])
    return frozenset(words)


@dataclass
class TokenTables:
    """What a guard reads of each token id of one tokenizer and stop set: its text piece ('' for a
    token that ends the step's text), whether it ends the word in progress, whether it may complete
    one, and the ids that end the step's text (stops, special tokens, ids past the tokenizer)."""

    pieces: list[str]
    word_end: list[bool]
    crosses: list[bool]
    word_end_ids: list[int]
    ends_text: frozenset[int]


def _decoded_tables(tokenizer, stop_ids: frozenset[int], vocab: int) -> TokenTables:
    specials = set(tokenizer.all_special_ids) | {
        i for i, t in tokenizer.added_tokens_decoder.items() if t.special
    }
    # A special token ends the step text it follows; ids with no text are treated like them.
    ends_text = frozenset(stop_ids | specials | set(range(len(tokenizer), vocab)))
    # The backend decoder turns byte-level symbols into text without HF's space clean-up.
    pieces = tokenizer.backend_tokenizer.decode_batch(
        [[i] for i in range(len(tokenizer))], skip_special_tokens=False
    )
    pieces += [""] * (vocab - len(tokenizer))
    pieces = ["" if i in ends_text else p for i, p in enumerate(pieces)]
    word_end = [i in ends_text or not _word_char(p[:1] or "x") for i, p in enumerate(pieces)]
    crosses = [i in ends_text or not all(map(_word_char, p)) for i, p in enumerate(pieces)]
    return TokenTables(
        pieces, word_end, crosses, [i for i in range(vocab) if word_end[i]], ends_text
    )


class _Recent(OrderedDict):
    """Values by key, the least recently used dropped past `bound`."""

    def __init__(self, bound: int):
        super().__init__()
        self.bound = bound

    def get_or_make(self, key, make):
        """The kept value of `key`, made (and the oldest dropped past the bound) when missing."""
        if key in self:
            self.move_to_end(key)
            return self[key]
        value = self[key] = make()
        while len(self) > self.bound:
            self.popitem(last=False)
        return value


# Kept per tokenizer and dropped with it: its token tables by (stops, vocabulary) and its guards.
_KEPT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_KEEPING = threading.RLock()  # a replica's engine thread and a driver's may make guards at once


def _kept(tokenizer) -> tuple[_Recent, _Recent]:
    if tokenizer not in _KEPT:
        _KEPT[tokenizer] = (_Recent(TABLES_KEPT), _Recent(GUARDS_KEPT))
    return _KEPT[tokenizer]


def token_tables(tokenizer, stop_ids: Iterable[int], vocab_size: int | None = None) -> TokenTables:
    """The token tables of this tokenizer and stop set, decoded once and shared by its guards
    (`vocab_size`: a model's padded vocabulary, when larger than the tokenizer's)."""
    stops, vocab = frozenset(stop_ids), max(len(tokenizer), vocab_size or 0)
    with _KEEPING:
        tables, _ = _kept(tokenizer)
        return tables.get_or_make((stops, vocab), lambda: _decoded_tables(tokenizer, stops, vocab))


def shared_guard(
    tokenizer,
    constraints: str | Iterable[str],
    stop_ids: Iterable[int],
    vocab_size: int | None = None,
) -> ViolationGuard:
    """The kept guard of this set of constraints (in any order) and stops on this tokenizer, made
    when missing; the GUARDS_KEPT most recently used of a tokenizer are kept."""
    wanted = set(parse_constraints(constraints))
    named = [c for c in CONSTRAINTS if c in wanted]  # one order, whatever the caller's
    stops = frozenset(stop_ids)
    with _KEEPING:
        _, guards = _kept(tokenizer)
        return guards.get_or_make(
            (tuple(named), stops, vocab_size),
            lambda: ViolationGuard(tokenizer, named, stops, vocab_size),
        )


class ViolationGuard:
    """Per-token verdicts that keep a sampled step free of the constraints' forbidden foods."""

    def __init__(
        self,
        tokenizer,
        constraints: str | Iterable[str],
        stop_ids: set[int],
        vocab_size: int | None = None,
    ):
        self.constraints = parse_constraints(constraints)
        self.stop_ids = set(stop_ids)
        self.tables = token_tables(tokenizer, self.stop_ids, vocab_size)
        self.word_end_ids: list[int] = self.tables.word_end_ids
        self._last_words = term_last_words(self.constraints)
        self.held: frozenset[str] | None = None

    def closed(self, held: frozenset[str]) -> ViolationGuard:
        """This guard that also refuses any food outside `held` (rrt.recipes.foods.recipe_food_words);
        it shares this guard's token tables."""
        guard = copy.copy(self)
        guard.held = frozenset(held)
        guard._last_words = self._last_words | food_last_words()
        return guard

    def violations(self, text: str) -> list:
        """What the guard refuses in a text (`refused`)."""
        return refused(text, self.constraints, self.held)

    def piece(self, token_id: int) -> str:
        """Decoded text of one token ('' for special and stop tokens)."""
        return self.tables.pieces[token_id]

    def ends_word(self, token_id: int) -> bool:
        """Whether this token ends the word in progress (it starts with a non-word character)."""
        return self.tables.word_end[token_id]

    def check(self, text: str, token_id: int) -> Verdict:
        """Verdict on appending this token to a step text that has no completed violation."""
        tables = self.tables
        if not tables.crosses[token_id]:
            return Verdict.OK  # letters only: no word is completed, nothing new can be judged
        complete = token_id in tables.ends_text
        candidate = text + tables.pieces[token_id]
        if not self._completes_term_word(text, candidate, complete):
            return Verdict.OK
        found = [m for m in self.violations(candidate) if complete or m.end < len(candidate)]
        open_word = _last_word_start(candidate)
        if not complete and self.held is not None and open_word < len(candidate):
            # A word still open may yet make a longer name ("sesame" + " seeds") or not ("seedswe"): the
            # foods before it are judged as if it never came, so "sesame" alone is refused as well.
            found += unlisted_foods(candidate[:open_word], self.held)
        if not found:
            return Verdict.OK
        if tables.word_end[token_id] and any(m.end == len(text) for m in found):
            return Verdict.BAN_WORD_END
        return Verdict.BAN_TOKEN

    def violation_start(self, text: str) -> int:
        """Where the violation that ends at the end of `text` starts (its word's start if none does)."""
        starts = [m.start for m in self.violations(text) if m.end == len(text)]
        return min(starts) if starts else _last_word_start(text)

    def _completes_term_word(self, text: str, candidate: str, complete: bool) -> bool:
        # The words this token completes: the one in progress at the end of `text`, and any
        # finished inside the piece. Only a term's last word can complete a violation.
        start = _last_word_start(text)
        stop = len(candidate)
        if not complete:
            while stop > start and _word_char(candidate[stop - 1]):
                stop -= 1  # the word still open at the end is not complete yet
        return any(w.lower() in self._last_words for w in _WORD.findall(candidate, start, stop))


@functools.cache
def food_last_words() -> frozenset[str]:
    """Lowercase last words (with plurals) of every known food name (rrt.recipes.foods)."""
    return frozenset(form for name in known_foods().names for form in _forms(name[-1]))


def refused(text: str, constraints: list[str], held: frozenset[str] | None = None) -> list:
    """What a guard refuses in a text: forbidden foods (the tagger's spans) and, with `held`, the foods
    outside it (rrt.recipes.foods.unlisted_foods); each has `start` and `end`."""
    found = list(text_violations(text, constraints)) if constraints else []
    if held is not None:
        found += unlisted_foods(text, held)
    return found


def guard_text(
    text: str, constraints: str | Iterable[str], held: frozenset[str] | None = None
) -> str:
    """The text cut just before its first violation, or (with `held`) its first food outside it (all of
    it when it has none)."""
    constraints = parse_constraints(constraints) if constraints else []
    while True:
        found = refused(text, constraints, held)
        if not found:
            return text
        # Cutting can expose a term an exception covered ("goat cheese" -> "goat"): cut again.
        text = text[: min(m.start for m in found)].rstrip()

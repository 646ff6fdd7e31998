"""Best-of-N selection: score the sampled rewrites of one recipe step by the paper's rules
and keep the best.

    ctx = step_context(source_recipe, step_index=2, constraints=["vegan"])
    index, scores = select_best(candidates, ctx)   # scores[i]: every rule plus "total"

Each rule scores a candidate in [0, 1] (1 = passes) and has a weight; the total is the
weighted sum. `no_violation` weighs more than all other rules together, so a compliant
candidate always beats a violating one. `no_disguised_food` weighs more than the rules below it
together: a word outside the dictionary that begins or ends with a forbidden food ("chickenocks",
"beefbreed", "cheddarsweet") names that food to a reader, though the tagger's word boundaries miss
it. A model writes such words, and constrained decoding did often before it took refused words
back (rrt.modelling.guarded_row). `dictionary_words` and `ingredient_overlap` are graded (fractions), the others pass or
fail. An empty candidate is no rewrite at all and scores 0 on every rule, even `no_violation`,
so it loses to any non-empty text. Ties go to the lowest index, so a selection is reproducible.

Two rule sets (`rewrite.selection`, `serve.selection`): `paper` is the paper's rules above;
`grounded` adds, beyond the paper, that a step stays the user's recipe. Its tiers, each weighing
more than every rule below it together:
    no_violation, no_disguised_food   as in `paper`
    no_invented_food  1 when the step names no food its recipe does not hold (rrt.recipes.foods:
                      the rewritten title and ingredient lines, the source recipe, the pantry)
    well_formed       1 when the step starts with a capital, ends like a sentence and every word is
                      a dictionary word (or the recipe's): a made-up word may name a food no list
                      holds ("zorax"), so it is a defect, not a matter of style
    closeness         ROUGE-L recall of the source step's words in the candidate (0-1, rouge-score,
                      as the evaluation measures closeness), weight 16
    same_job          1 when the step does its source step's kind of work (rrt.corpus.cooking_actions)
    in_proportion     in place of the paper's `short`: under MAX_CHARS characters or LENGTH_SLACK
                      times its source step's, whichever is more; a faithful rewrite of a long step
                      is long, and the 100-character rule cost the most closeness
                      (benchmarks/RESULTS.md, what moved the grounded rows)
then the paper's form rules and ingredient overlap, weight 1 each.
"""

from __future__ import annotations

# rouge_score (a second to import) is imported where used, so jobs/rewrite.py and jobs/evaluate.py
# start without it; enchant is imported in _english, which turns a missing enchant C library into
# DictionaryMissing.
import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from rrt.corpus.cooking_actions import same_job as does_same_job
from rrt.recipes.foods import unlisted_foods
from rrt.recipes.ingredients import ingredient_name, step_ingredients
from rrt.recipes.tagger import parse_constraints, text_violations

MAX_CHARS = 100
LENGTH_SLACK = 1.5  # how much longer than its source step a grounded rewrite may run
BAD_CHARS = frozenset("%*$#^=+")
DICTIONARY_LANGUAGE = "en_US"
DICTIONARY_PACKAGES = "libenchant-2-2 hunspell-en-us"
_TAG = re.compile(r"<[^<>\s]*>|<\||\|>")  # whole special tokens and broken halves of `<|...|>`
_SENTENCE_END = re.compile(r"[.!?…][)\]\"'’”]*$")
_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")  # letters only: numbers are not dictionary words
# Words longer than this are rare in recipes (site names run together) and are checked afresh each
# time: cached, they would let the text a client sends grow the caches by size, not count.
MAX_CACHED_WORD = 24
_WITHOUT = ("less", "free")  # "eggless", "dairyfree" name the food's absence
_PIECE = 3  # the shortest food a disguised word is searched for ("egg", "ham")


class DictionaryMissing(RuntimeError):
    """The English dictionary behind `dictionary_words` is not installed."""


@dataclass
class StepContext:
    """What a candidate step is judged against: constraints, the source step and the recipe."""

    constraints: list[str]
    source_step: str
    ingredient_names: list[str]
    source_words: frozenset[str] = frozenset()
    held_foods: frozenset[str] | None = (
        None  # words a named food may use (rrt.recipes.foods); None: not checked
    )
    rules: str = "paper"  # the rule set: paper | grounded (SELECTIONS)

    @functools.cached_property
    def known_words(self) -> frozenset[str]:
        """Words accepted besides the dictionary: the source recipe's and the ingredient names'."""
        return _known_words(tuple(self.ingredient_names), frozenset(self.source_words))

    @functools.cached_property
    def source_ingredients(self) -> frozenset[int]:
        """Indices of the ingredients the source step mentions (computed once per step)."""
        return frozenset(m.index for m in step_ingredients(self.source_step, self.ingredient_names))


@functools.lru_cache(maxsize=256)
def _known_words(ingredient_names: tuple[str, ...], source_words: frozenset[str]) -> frozenset[str]:
    # The same for every step of a recipe, and a recipe's steps are scored one after another.
    names = {w for name in ingredient_names for w in _WORD.findall(name)}
    return frozenset(w.lower().replace("’", "'") for w in names | set(source_words))


@functools.cache
def _english():
    # One Dict per process: opening it loads the whole hunspell dictionary.
    try:
        import enchant
    except ImportError as err:  # pyenchant says so when the enchant C library is absent
        raise DictionaryMissing(
            f"pyenchant needs the enchant C library: apt-get install {DICTIONARY_PACKAGES} ({err})"
        ) from err
    try:
        return enchant.Dict(DICTIONARY_LANGUAGE)
    except enchant.errors.DictNotFoundError as err:
        raise DictionaryMissing(
            f"no {DICTIONARY_LANGUAGE} dictionary for pyenchant:"
            f" apt-get install {DICTIONARY_PACKAGES} ({err})"
        ) from err


def dictionary_missing() -> str:
    """Why the English dictionary cannot load ("" when it can)."""
    try:
        _english()
    except DictionaryMissing as err:
        return str(err)
    return ""


@functools.cache
def recipe_words() -> frozenset[str]:
    """Cooking words that en_US lacks (rrt/data/recipe_words.txt): tahini, sauté, tempeh..."""
    text = resources.files("rrt").joinpath("data", "recipe_words.txt").read_text(encoding="utf-8")
    return frozenset(
        line.strip().lower()
        for line in text.splitlines()
        if line.strip() and not line.startswith("#")
    )


def _unless_long(cached: Callable, word: str, *rest) -> Any:
    """cached(word, *rest), past its cache for a word longer than MAX_CACHED_WORD."""
    return (cached if len(word) <= MAX_CACHED_WORD else cached.__wrapped__)(word, *rest)


@functools.lru_cache(maxsize=65_536)  # many times the distinct words of the sample corpora
def _known_word(word: str) -> bool:
    return word.lower() in recipe_words() or _english().check(word)


def is_english(word: str) -> bool:
    """Whether a word is in the en_US dictionary or the recipe word list."""
    return _unless_long(_known_word, word)


def no_violation(text: str, ctx: StepContext) -> float:
    """1 when the text names no food its constraints forbid."""
    return float(not text_violations(text, ctx.constraints))


@functools.lru_cache(maxsize=65_536)
def _glued_food(word: str, constraints: tuple[str, ...]) -> bool:
    # A food and "less"/"free" is its absence; otherwise every split into a head and a tail of
    # _PIECE letters or more, each judged by the tagger.
    if any(
        word.endswith(without) and text_violations(word[: -len(without)], constraints)
        for without in _WITHOUT
    ):
        return False
    for cut in range(_PIECE, len(word) - 1):
        head, tail = word[:cut], word[cut:]
        if text_violations(head, constraints) or (
            len(tail) >= _PIECE and text_violations(tail, constraints)
        ):
            return True
    return False


def disguised_foods(text: str, ctx: StepContext) -> list[str]:
    """The words outside the dictionary (and the source recipe) that begin or end with a food the
    constraints forbid: "chickenocks", "meatStephanie"."""
    constraints = tuple(ctx.constraints)
    found = []
    for word in _WORD.findall(text):
        lower = word.replace("’", "'").lower()
        if (
            len(lower) > _PIECE
            and lower not in ctx.known_words
            and not is_english(word)
            and _unless_long(_glued_food, lower, constraints)
        ):
            found.append(word)
    return found


def no_disguised_food(text: str, ctx: StepContext) -> float:
    """1 when no word outside the dictionary hides a forbidden food (`disguised_foods`)."""
    return float(not disguised_foods(text, ctx))


def short(text: str, ctx: StepContext) -> float:
    """1 when the step is under MAX_CHARS characters."""
    return float(len(text) < MAX_CHARS)


def in_proportion(text: str, ctx: StepContext) -> float:
    """1 when the step is under MAX_CHARS characters or LENGTH_SLACK times its source step's."""
    return float(len(text) < max(MAX_CHARS, LENGTH_SLACK * len(ctx.source_step.strip())))


def clean_chars(text: str, ctx: StepContext) -> float:
    """1 when the step has none of `% * $ # ^ = +` and no leftover special token."""
    return float(BAD_CHARS.isdisjoint(text) and not _TAG.search(text))


def capitalised(text: str, ctx: StepContext) -> float:
    """1 when the step starts (after spaces) with a capital letter."""
    return float(text.lstrip()[:1].isupper())


def ends_with_punctuation(text: str, ctx: StepContext) -> float:
    """1 when the step ends like a sentence: . ! ? or … , perhaps before a closing quote or bracket."""
    return float(bool(_SENTENCE_END.search(text.rstrip())))


def dictionary_words(text: str, ctx: StepContext) -> float:
    """Fraction of the step's words found in en_US, the recipe word list or the source recipe."""
    words = [w.replace("’", "'") for w in _WORD.findall(text)]
    if not words:
        return 0.0
    return sum(w.lower() in ctx.known_words or is_english(w) for w in words) / len(words)


def well_formed(text: str, ctx: StepContext) -> float:
    """1 when the step is capitalised, ends like a sentence and every word is a known word."""
    return float(
        all(
            rule(text, ctx) == 1.0
            for rule in (capitalised, ends_with_punctuation, dictionary_words)
        )
    )


def ingredient_overlap(text: str, ctx: StepContext) -> float:
    """Jaccard overlap of the ingredients the step mentions with those the source step mentions
    (1 when the source step mentions none)."""
    source = ctx.source_ingredients
    if not source:
        return 1.0
    mentioned = {m.index for m in step_ingredients(text, ctx.ingredient_names)}
    return len(source & mentioned) / len(source | mentioned)


def no_invented_food(text: str, ctx: StepContext) -> float:
    """1 when the step names no food outside the recipe's held foods (1 when they are not given)."""
    return float(ctx.held_foods is None or not unlisted_foods(text, ctx.held_foods))


@functools.cache
def _rouge():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"])


def closeness(text: str, ctx: StepContext) -> float:
    """ROUGE-L recall of the source step in the candidate (0-1; 1 when the source step is empty)."""
    if not ctx.source_step.strip():
        return 1.0
    return _rouge().score(ctx.source_step, text)["rougeL"].recall


def same_job(text: str, ctx: StepContext) -> float:
    """1 when the step does its source step's kind of work (rrt.corpus.cooking_actions.same_job)."""
    return float(does_same_job(text, ctx.source_step))


Rule = Callable[[str, StepContext], float]
RULES: dict[str, tuple[Rule, float]] = {
    "no_violation": (no_violation, 100.0),
    "no_disguised_food": (no_disguised_food, 50.0),
    "short": (short, 1.0),
    "clean_chars": (clean_chars, 1.0),
    "capitalised": (capitalised, 1.0),
    "ends_with_punctuation": (ends_with_punctuation, 1.0),
    "dictionary_words": (dictionary_words, 1.0),
    "ingredient_overlap": (ingredient_overlap, 1.0),
}
GROUNDED_RULES: dict[str, tuple[Rule, float]] = {
    "no_violation": (no_violation, 400.0),
    "no_disguised_food": (no_disguised_food, 200.0),
    "no_invented_food": (no_invented_food, 100.0),
    "well_formed": (well_formed, 40.0),
    "closeness": (closeness, 16.0),
    "same_job": (same_job, 2.0),
    "in_proportion": (in_proportion, 1.0),
    **{
        name: rule
        for name, rule in RULES.items()
        if name not in ("no_violation", "no_disguised_food", "short")
    },
}
SELECTIONS = {"paper": RULES, "grounded": GROUNDED_RULES}


def score_candidate(text: str, ctx: StepContext) -> dict[str, float]:
    """Every rule's score for one candidate step, plus their weighted "total"."""
    text = (text or "").strip()
    rules = SELECTIONS[ctx.rules]
    scores = {
        name: round(float(rule(text, ctx)) if text else 0.0, 4) for name, (rule, _) in rules.items()
    }
    scores["total"] = round(sum(scores[name] * weight for name, (_, weight) in rules.items()), 4)
    return scores


def select_best(candidates: list[str], ctx: StepContext) -> tuple[int, list[dict[str, float]]]:
    """Index of the best candidate (highest total, then lowest index) and every candidate's scores."""
    if not candidates:
        raise ValueError("select_best needs at least one candidate")
    # Sampled candidates often repeat one another; a text is scored once per step.
    known: dict[str, dict[str, float]] = {}
    for text in candidates:
        if text not in known:
            known[text] = score_candidate(text, ctx)
    scores = [dict(known[text]) for text in candidates]
    best = max(range(len(scores)), key=lambda i: (scores[i]["total"], -i))
    return best, scores


def _parts(recipe: Any) -> tuple[str, list[str], list[str]]:
    if isinstance(recipe, dict):
        return (
            recipe.get("title", ""),
            list(recipe.get("ingredients", [])),
            list(recipe.get("steps", [])),
        )
    return recipe.title, list(recipe.ingredients), list(recipe.steps)


def source_word_set(source_recipe: Any) -> frozenset[str]:
    """Lowercase words of a whole source recipe, split as the dictionary rule splits them."""
    title, ingredients, steps = _parts(source_recipe)
    words = {w.lower() for line in [title, *ingredients, *steps] for w in _WORD.findall(line)}
    return frozenset(w.replace("’", "'") for w in words)


def step_context(
    source_recipe: Any,
    step_index: int,
    constraints: str | Iterable[str],
    ingredient_names: list[str] | None = None,
) -> StepContext:
    """StepContext for one step of a Recipe (or a dict with title/ingredients/steps); ingredient
    names default to the source recipe's own."""
    _title, ingredients, steps = _parts(source_recipe)
    if ingredient_names is None:
        ingredient_names = [ingredient_name(line) for line in ingredients]
    return StepContext(
        parse_constraints(constraints),
        steps[step_index],
        list(ingredient_names),
        source_word_set(source_recipe),
    )

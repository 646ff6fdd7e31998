"""Rewrite quality as the paper measured it (Hegel et al. 2020, Table 2).

    fluency     perplexity of the rewritten steps under the No-Source LM (lower is better)
    adherence   percent of the food mentions in the rewrite that obey the constraint
                (and, apart from it, the rewritten steps that hide a forbidden food inside a
                non-word, "chickenocks", which the paper's whole-word measure does not see)
    closeness   ROUGE-L recall of the rewritten steps against the source steps, x100
    diversity   unique word trigrams over all word trigrams of a system's rewritten steps
    grounding   beyond the paper: invented-food steps, same-job steps and consistent recipes
                (rrt.evaluation.grounding)
    form rules  share of chosen steps passing the paper's form rules (capital, final
                punctuation, dictionary words), read from the scores each record holds
    decisions   how each step was decided where the rewriter records it: kept, guide or model

Every function here is pure (the LM is an argument), so each number can be checked by hand.
"""

from __future__ import annotations

# rouge_score (a second to import) and torch are imported where used: jobs/evaluate.py imports this
# module, and its --help starts without them.
import csv
import functools
import math
import re
from collections.abc import Iterable, Iterator

from rrt.corpus.formats import no_source
from rrt.evaluation.grounding import grounding_counts
from rrt.evaluation.step_flags import faulty_steps
from rrt.modelling.editing import DECISIONS
from rrt.modelling.selection import StepContext, disguised_foods, source_word_set
from rrt.recipes.foods import FoodVocabulary, food_mentions
from rrt.recipes.ingredients import ingredient_name
from rrt.recipes.paper_format import END_INGS
from rrt.recipes.tagger import parse_constraints, text_violations

_WORD = re.compile(r"\w+(?:['’]\w+)*")


# ---- diversity and closeness -------------------------------------------------------------


def words(text: str) -> list[str]:
    """Lowercase regex words of a text (apostrophes kept inside a word)."""
    return _WORD.findall(text.lower())


def trigrams(text: str) -> list[tuple[str, str, str]]:
    """Word trigrams of one text, in order."""
    ws = words(text)
    return list(zip(ws, ws[1:], ws[2:]))


def trigram_diversity(steps: Iterable[str]) -> float | None:
    """Unique over all word trigrams across these steps (trigrams never cross a step); None if none."""
    grams = [g for step in steps for g in trigrams(step)]
    return len(set(grams)) / len(grams) if grams else None


@functools.cache
def _rouge():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"])


def rouge_l_recall(rewrite_steps: list[str], source_steps: list[str]) -> float:
    """ROUGE-L recall (x100) of the rewritten steps against the source steps, each side joined."""
    if not rewrite_steps or not source_steps:
        return 0.0
    score = _rouge().score(" ".join(source_steps), " ".join(rewrite_steps))["rougeL"]
    return 100.0 * score.recall


# ---- dietary adherence -------------------------------------------------------------------


def names_from_lines(lines: Iterable[str]) -> set[str]:
    """The ingredient names of these ingredient lines (the corpus's food vocabulary)."""
    return {ingredient_name(line) for line in lines if line}


def read_foods(path: str) -> list[str]:
    """The `name` column of FooDB's food.csv; ValueError when the file has none."""
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        if not reader.fieldnames or "name" not in reader.fieldnames:
            raise ValueError(f"{path} has no 'name' column (expected FooDB's food.csv)")
        names = [row["name"] for row in reader if row.get("name")]
    if not names:
        raise ValueError(f"{path} lists no food names")
    return names


def mention_verdicts(
    text: str, vocabulary: FoodVocabulary, constraints: list[str]
) -> list[tuple[int, int, bool]]:
    """(start, end, obeys) for every food mention of a text. The tagger reads each mention in its
    context ("peanut butter" is not dairy, "vegan butter" is fine); a harmful span the vocabulary
    misses still counts, so a small vocabulary can never hide a violation."""
    harmful = [(m.start, m.end) for m in text_violations(text, constraints)]
    out = []
    for start, end in food_mentions(text, vocabulary):
        hits = [(a, b) for a, b in harmful if a < end and start < b]
        # One food, one mention: "butter" inside a harmful "peanut butter" takes the tagger's span.
        out.append(
            (min([start] + [a for a, _ in hits]), max([end] + [b for _, b in hits]), not hits)
        )
    for a, b in harmful:
        if not any(s < b and a < e for s, e, _ in out):
            out.append((a, b, False))
    return sorted(out)


def adherence_counts(
    ingredients: list[str], steps: list[str], constraint: str, vocabulary: FoodVocabulary
) -> tuple[int, int]:
    """(obeying, all) food mentions over a rewrite's ingredient lines and steps."""
    constraints = parse_constraints(constraint)
    verdicts = [
        v
        for text in [*ingredients, *steps]
        for v in mention_verdicts(text, vocabulary, constraints)
    ]
    return sum(1 for v in verdicts if v[2]), len(verdicts)


def percent(part: int, whole: int) -> float | None:
    """part / whole x100; None when there is nothing to count."""
    return 100.0 * part / whole if whole else None


# ---- fluency -----------------------------------------------------------------------------


def fit_block(context: list[int], steps: list[int], block: int) -> tuple[list[int], int]:
    """(ids, context length) that fit the block. The context keeps its first token (BOS) and the
    tokens right before the steps, and at least half the block when the steps are long; step
    tokens past the block are cut."""
    if len(context) + len(steps) <= block:
        return context + steps, len(context)
    keep_context = min(len(context), max(block - len(steps), block // 2, 2))
    kept = (
        context
        if keep_context == len(context)
        else context[:1] + context[len(context) - keep_context + 1 :]
    )
    return kept + steps[: block - keep_context], keep_context


def encode_recipe(tokenizer, recipe: dict, block: int) -> tuple[list[int], int, int]:
    """(ids, context length, step tokens dropped) of a recipe in the No-Source format; the scored
    tokens are those after `<endofings>` (steps, separators and the end token)."""
    text = no_source(
        recipe.get("title", ""), list(recipe.get("ingredients") or []), list(recipe["steps"])
    )
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    marker = tokenizer.convert_tokens_to_ids(END_INGS)
    if marker not in ids:
        raise ValueError(f"the LM's tokenizer does not keep {END_INGS} as one token")
    cut = ids.index(marker) + 1
    fitted, context = fit_block(ids[:cut], ids[cut:], block)
    return fitted, context, len(ids) - cut - (len(fitted) - context)


def step_nll(
    lm, tokenizer, recipes: list[dict], block: int, batch_size: int = 8, device: str = "cpu"
) -> list[dict]:
    """Summed negative log-likelihood and count of the step tokens of each recipe (a recipe with no
    steps scores 0 tokens). Batches are right-padded and masked."""
    import torch

    encoded = [
        encode_recipe(tokenizer, r, block) if r.get("steps") else ([], 0, 0) for r in recipes
    ]
    results = [{"nll": 0.0, "tokens": 0, "dropped_tokens": dropped} for _, _, dropped in encoded]
    order = [
        i for i in sorted(range(len(encoded)), key=lambda i: len(encoded[i][0])) if encoded[i][0]
    ]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    lm.eval()
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            width = max(len(encoded[i][0]) for i in chunk)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            scored = torch.zeros((len(chunk), width), dtype=torch.bool)
            for row, i in enumerate(chunk):
                seq, context, _ = encoded[i]
                ids[row, : len(seq)] = torch.tensor(seq)
                scored[row, context : len(seq)] = True
            attention = (
                torch.arange(width)[None, :]
                < torch.tensor([len(encoded[i][0]) for i in chunk])[:, None]
            )
            logits = lm(
                input_ids=ids.to(device), attention_mask=attention.long().to(device)
            ).logits.float()
            # Token t is predicted from position t-1.
            nll = torch.nn.functional.cross_entropy(
                logits[:, :-1].transpose(1, 2), ids[:, 1:].to(device), reduction="none"
            ).cpu()
            mask = scored[:, 1:]
            for row, i in enumerate(chunk):
                results[i]["nll"] = float(nll[row][mask[row]].sum())
                results[i]["tokens"] = int(mask[row].sum())
    return results


def perplexity(nll: float, tokens: int) -> float | None:
    """exp(total NLL / scored tokens); None when no token was scored."""
    return math.exp(nll / tokens) if tokens else None


def hidden_food_steps(steps: list[str], source: dict, constraint: str) -> int:
    """Rewritten steps with a forbidden food inside a word outside the dictionary and the source
    recipe ("chickenocks"; rrt.modelling.selection.disguised_foods); needs the dictionary."""
    if not constraint:
        return 0
    names = [ingredient_name(line) for line in source.get("ingredients") or []]
    ctx = StepContext(parse_constraints(constraint), "", names, source_word_set(source))
    return sum(bool(disguised_foods(step, ctx)) for step in steps)


# ---- per recipe and per system -----------------------------------------------------------


def recipe_measures(record: dict, vocabulary: FoodVocabulary, count_hidden: bool) -> dict:
    """Adherence counts, ROUGE-L recall, the grounding counts (rrt.evaluation.grounding) and (with
    `count_hidden`, else None) the steps hiding a forbidden food of one rewrite record (rewrites.jsonl schema)."""
    rewrite, source = record.get("rewrite") or {}, record.get("source") or {}
    steps = list(rewrite.get("steps") or [])
    constraint = record.get("constraint") or ""
    obeying, mentions = adherence_counts(
        list(rewrite.get("ingredients") or []), steps, constraint, vocabulary
    )
    return {
        "obeying": obeying,
        "mentions": mentions,
        "empty": not steps,
        "rouge_l_recall": rouge_l_recall(steps, list(source.get("steps") or [])),
        **grounding_counts(record),
        "flagged_steps": sum(faulty_steps(record)),
        "hidden_food_steps": hidden_food_steps(steps, source, constraint) if count_hidden else None,
    }


GROUNDING_KEYS = (
    "steps",
    "invented_steps",
    "same_job_steps",
    "paired_steps",
    "title_consistent",
    "consistent",
    "flagged_steps",
)


def grounding_summary(measures: list[dict]) -> dict:
    """Invented-food steps, same-job steps (% of steps) and consistent recipes, title and whole (% of
    recipes) over some recipes' `recipe_measures`."""
    total = {key: sum(int(m.get(key, 0)) for m in measures) for key in GROUNDING_KEYS}
    return {
        "invented_food_steps": percent(total["invented_steps"], total["steps"]),
        "same_job": percent(total["same_job_steps"], total["paired_steps"]),
        "title_consistency": percent(total["title_consistent"], len(measures)),
        "consistency": percent(total["consistent"], len(measures)),
        "flagged_steps": percent(total["flagged_steps"], total["steps"]),
    }


def summarise(records: list[dict], measures: list[dict]) -> tuple[dict, dict, dict, dict]:
    """(system metrics, adherence per constraint, grounding per constraint, counts) of one system from its
    per-recipe rows (`recipe_measures` plus `nll`/`tokens`/`dropped_tokens` from `step_nll`) and its
    records (form rules, step decisions). Adherence pools all mentions; a recipe with no food
    mention adds nothing to it and is counted apart."""
    nll, tokens = sum(m["nll"] for m in measures), sum(m["tokens"] for m in measures)
    obeying, mentions = sum(m["obeying"] for m in measures), sum(m["mentions"] for m in measures)
    per_constraint: dict[str, list[int]] = {}
    by_constraint: dict[str, list[dict]] = {}
    for record, m in zip(records, measures):
        counts = per_constraint.setdefault(record.get("constraint") or "", [0, 0])
        counts[0] += m["obeying"]
        counts[1] += m["mentions"]
        by_constraint.setdefault(record.get("constraint") or "", []).append(m)
    steps = [s for r in records for s in (r.get("rewrite") or {}).get("steps") or []]
    ppl = perplexity(nll, tokens)
    decisions = decision_counts(records)
    recipe_percents = [percent(m["obeying"], m["mentions"]) for m in measures if m["mentions"]]
    system = {
        "perplexity": ppl,
        "adherence": percent(obeying, mentions),
        "rouge_l_recall": sum(m["rouge_l_recall"] for m in measures) / len(measures)
        if measures
        else None,
        "trigram_diversity": trigram_diversity(steps),
        **grounding_summary(measures),
        "form_rules": form_rules_share(records),
        **decision_shares(decisions),
        "n_recipes": len(records),
    }
    counts = {
        "scored_tokens": tokens,
        "dropped_step_tokens": sum(m.get("dropped_tokens", 0) for m in measures),
        "food_mentions": mentions,
        "obeying_mentions": obeying,
        "recipes_without_mentions": sum(1 for m in measures if not m["mentions"]),
        "adherence_recipe_mean": sum(recipe_percents) / len(recipe_percents)
        if recipe_percents
        else None,
        "empty_rewrites": sum(1 for m in measures if m["empty"]),
        "rewritten_steps": len(steps),
        **{f"steps_{d}": n for d, n in decisions.items() if d != "steps"},
        "trigrams": sum(len(trigrams(s)) for s in steps),
        **{
            key: sum(int(m.get(key, 0)) for m in measures)
            for key in GROUNDING_KEYS
            if key != "steps"
        },
        # None when the dictionary was missing (not counted), not 0.
        "hidden_food_steps": None
        if any(m.get("hidden_food_steps") is None for m in measures)
        else sum(m["hidden_food_steps"] for m in measures),
    }
    grounding = {c: grounding_summary(ms) for c, ms in by_constraint.items()}
    return system, {c: percent(o, n) for c, (o, n) in per_constraint.items()}, grounding, counts


# ---- read from the records: form rules and step decisions --------------------------------

FORM_RULES = ("capitalised", "ends_with_punctuation", "dictionary_words")


def chosen_scores(records: Iterable[dict]) -> Iterator[dict]:
    """The rule scores of each step entry's chosen candidate, over some rewrite records."""
    for record in records:
        for entry in record.get("steps") or []:
            candidates = entry.get("candidates") if isinstance(entry, dict) else None
            chosen = entry.get("chosen") if isinstance(entry, dict) else None
            if candidates and isinstance(chosen, int) and 0 <= chosen < len(candidates):
                yield candidates[chosen].get("scores") or {}


def form_rules_share(records: Iterable[dict]) -> float | None:
    """% of chosen steps whose scores pass every form rule (FORM_RULES); steps scored without
    them do not count; None when no step was."""
    scored = [s for s in chosen_scores(records) if all(r in s for r in FORM_RULES)]
    passed = sum(1 for s in scored if all(s[r] == 1 for r in FORM_RULES))
    return percent(passed, len(scored))


def decision_counts(records: Iterable[dict]) -> dict[str, int]:
    """Steps per decision (kept, guide, model) and `steps` that record one; records from runs
    before decisions were written add nothing."""
    counts = dict.fromkeys(DECISIONS, 0)
    for record in records:
        for entry in record.get("steps") or []:
            decision = entry.get("decision") if isinstance(entry, dict) else None
            if decision in counts:
                counts[decision] += 1
    return {**counts, "steps": sum(counts.values())}


def decision_shares(counts: dict[str, int]) -> dict[str, float | None]:
    """% of the decided steps per decision; None for each when no step recorded a decision."""
    return {d: percent(counts.get(d, 0), counts.get("steps", 0)) for d in DECISIONS}

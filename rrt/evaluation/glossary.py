"""What the evaluation report's rows and columns mean, in one place: every system, every measure
(with the direction that is better), each step decision, and the caveats a reader needs.

    describe_system(label)   one line for a system label ("grounded_rule+constrained" included)
    MEASURES[key]            title, direction, digits and meaning of each column
"""

from __future__ import annotations

from typing import NamedTuple

# One line per rewrite system (jobs/rewrite.py --system; "human" is a study's hand rewrites).
SYSTEMS = {
    "rule_based": "the paper's Rule-Based baseline: the substitution guide swaps each forbidden "
    "food for a stand-in and leaves every other word of the source as it was",
    "retrieval": "the paper's Retrieval baseline: a valid recipe of the same dish from the pool "
    "(the guide's rewrite when the dish has none)",
    "no_source": "the paper's No-Source model: a recipe language model that writes each step "
    "without reading the source recipe",
    "end_to_end": "the paper's End-to-End model: reads the whole source recipe and writes the "
    "whole target recipe at once",
    "no_context": "the paper's No-Context model: rewrites each source step on its own, from the "
    "title and that step",
    "contextual": "the paper's Contextual model: rewrites each step reading the whole source "
    "recipe and the steps it has rewritten so far",
    "contextual_rule": "the paper's Contextual + rule ingredient prompt model: Contextual, told "
    "each step's ingredients by rule from the source step",
    "contextual_gpt2": "the paper's Contextual + next-ingredient model: Contextual, told each "
    "step's ingredients by a second model",
    "grounded": "Grounded Contextual (beyond the paper): Contextual whose prompt also holds the "
    "rewritten title and ingredient lines and the source step",
    "grounded_rule": "the product: a fine-tuned model that edits only the steps the constraint "
    "touches, the guide's version of each such step its floor (Grounded Contextual + rule "
    "ingredient prompt)",
    "ctrl": "the paper's CTRL baseline: a pretrained 1.6B model asked for the recipe with a "
    "control code, one step at a time",
    "pplm": "the paper's PPLM baseline: the No-Source model nudged token by token towards the "
    "constraint's words",
    "transformer": "the paper's Transformer baseline: a sentence-level model that rewrites each "
    "step on its own",
    "seq2seq_copy": "the paper's Seq2seq Copy baseline: a sentence-level model with a copy "
    "mechanism, one model per constraint",
    "human": "hand rewrites written by the study's readers",
}
CONSTRAINED = "with constrained decoding (a word that breaks the constraint cannot be sampled)"
PAPER_ROWS = {  # the paper's Table 2 rows and the system that rebuilds each here
    "Rule-Based": "rule_based",
    "Retrieval": "retrieval",
    "End-to-End": "end_to_end",
    "No-Context": "no_context",
    "Contextual": "contextual",
    "+ Rule ingredient prompt": "contextual_rule",
    "Human rewrite (30 vegetarian)": "human",
}


class Measure(NamedTuple):
    """One report column: its heading, which way is better ("↑", "↓" or "" for neither), the
    digits shown and one line on what it counts."""

    title: str
    direction: str
    digits: int
    meaning: str


MEASURES = {
    "perplexity": Measure(
        "perplexity",
        "↓",
        2,
        "how surprised a recipe language model (No-Source) is by the rewritten steps: fluency",
    ),
    "adherence": Measure(
        "adherence %",
        "↑",
        1,
        "share of the food mentions in the rewrite that obey the constraint",
    ),
    "rouge_l_recall": Measure(
        "ROUGE-L recall",
        "↑",
        2,
        "how much of the source steps' wording the rewrite keeps (x100): closeness to the source",
    ),
    "trigram_diversity": Measure(
        "trigram diversity",
        "↑",
        3,
        "distinct word trigrams over all trigrams of a system's steps: less repetition is higher",
    ),
    "form_rules": Measure(
        "form rules %",
        "↑",
        1,
        "share of chosen steps that start with a capital, end with punctuation and use only "
        "dictionary (or source) words",
    ),
    "invented_food_steps": Measure(
        "invented-food steps %",
        "↓",
        1,
        "share of rewritten steps naming a food neither the rewritten recipe nor the source holds",
    ),
    "same_job": Measure(
        "same job %",
        "↑",
        1,
        "share of rewritten steps doing their source step's kind of work (oven, stovetop, mix...); "
        "it disagrees with readers, who fault many steps it calls the same job",
    ),
    "flagged_steps": Measure(
        "flagged steps %",
        "↓",
        1,
        "share of rewritten steps the fault model (rrt.evaluation.step_flags, fitted on reader "
        "marks) says a reader would mark another job or no sense; it finds most steps readers "
        "fault, but flags many of Retrieval's steps that readers find OK (benchmarks/RESULTS.md)",
    ),
    "consistency": Measure(
        "consistent %",
        "↑",
        1,
        "share of recipes whose title and steps name only foods on their ingredient lines",
    ),
    "title_consistency": Measure(
        "title consistent %",
        "↑",
        1,
        "share of recipes whose title names only foods on their ingredient lines",
    ),
    "kept": Measure(
        "kept %",
        "",
        1,
        "share of steps the guide left alone, so the source step stands as it was",
    ),
    "guide": Measure("guide %", "", 1, "share of steps that are the substitution guide's version"),
    "model": Measure(
        "model %",
        "",
        1,
        "share of steps where a model sample did the same step and repaired the guide's version",
    ),
    "overall": Measure(
        "readers: overall (1-5)",
        "↑",
        2,
        "readers' mean answer to \"Is this a good recipe for someone who follows this dietary "
        'constraint?"',
    ),
    "steps_ok": Measure(
        "readers: steps OK %",
        "↑",
        1,
        "share of the steps readers marked OK: does its source step's job, sensibly, with the "
        "recipe's own foods",
    ),
    "cookable": Measure(
        "readers: cookable %",
        "↑",
        1,
        "share of rewrites readers judged a cook could follow to get the dish, within the "
        "constraint",
    ),
    "head_to_head": Measure(
        "readers: head-to-head wins %",
        "↑",
        1,
        "share of decided side-by-side comparisons this system won (the study's best system "
        "against each other; each other against the best)",
    ),
}
PAPER_MEASURES = ("perplexity", "adherence", "rouge_l_recall", "trigram_diversity")
GROUNDING_MEASURES = (
    "invented_food_steps",
    "same_job",
    "flagged_steps",
    "consistency",
    "title_consistency",
)
DECISION_MEASURES = ("kept", "guide", "model")
READER_MEASURES = ("overall", "steps_ok", "cookable", "head_to_head")
DECISION_MEANINGS = {
    "kept": "the guide left this step alone: it is the source step as it was",
    "guide": "the substitution guide's version of a step the constraint touches",
    "model": "a model sample that did the same step and repaired the guide's version",
}
CAVEAT = (
    "Rule-Based copies the source, so its closeness (ROUGE-L recall, same job) is high by "
    "construction; same job compares coarse kinds of work (oven, stovetop, mix), so it can call "
    "a step that does another job the same. Where readers' marks exist, they are the measure to "
    "trust."
)


def heading(key: str) -> str:
    """A column's heading with its direction arrow ("adherence % ↑")."""
    measure = MEASURES[key]
    return f"{measure.title} {measure.direction}".rstrip()


def describe_system(label: str) -> str:
    """One line on what a system label is; `+constrained` adds constrained decoding."""
    base, constrained = (
        (label[: -len("+constrained")], True) if label.endswith("+constrained") else (label, False)
    )
    text = SYSTEMS.get(base, f"a rewrite run of system {base!r} (no description)")
    return f"{text}, {CONSTRAINED}" if constrained else text

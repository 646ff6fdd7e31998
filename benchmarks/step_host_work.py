"""The host's work for a rewritten step: choosing among its candidates, and tokenizing its prompt.

    python benchmarks/step_host_work.py
    python benchmarks/step_host_work.py --constraints vegan,nut-free --candidates 10 --repeats 5
    python benchmarks/step_host_work.py --tokenizer out/demo/contextual_rule/model --round 8
    python benchmarks/step_host_work.py --growth

Every rewritten step's prompt is tokenized and its ten candidates are scored on the host, per
recipe, so batching recipes on a GPU does not share this work out: it bounds how much batching
can gain.

Selection:
Each step of a real recipe (../shared/data web recipes when present, else data/sample) gets as
candidates that step and the recipe's next ones, each once (real text of the same recipe, as a
sampled rewrite is; a recipe of fewer steps gives fewer), scored as the rewriter scores them
(ingredient names and source words once per recipe). Sampled candidates also repeat one another,
which the selection scores once; these do not. Prints each rule's share and the milliseconds a
step of N candidates. The same script on two commits compares them; a digest of every score
shows they chose alike.

Prompts: every step's Contextual prompt (the whole document), tokenized one at a time against a
round's prompts in one call (the rewriter's way), with the tiny tokenizer trained on the corpus
or `--tokenizer`'s; the ids must be the same. Prints the ratio of the two.

Growth (`--growth` alone): the inputs that once made a request's host work grow faster than the
request, timed (CPU time) at 1x and 8x their size: the ingredient matcher (8 ingredient names and
a step, each one word repeated), the guide on a step of one food repeated (`rrt substitute`), and
a title of one food repeated named for its diet. Prints each cost ratio (8x time / 1x time) last;
linear work is 8.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from rrt.config import load_settings
from rrt.modelling import selection
from rrt.modelling.models import TINY, load_tokenizer
from rrt.modelling.prompts import step_prompt
from rrt.modelling.selection import StepContext, select_best, source_word_set
from rrt.recipes.ingredients import ingredient_name, step_ingredients
from rrt.recipes.loaders import read_recipes
from rrt.recipes.recipe import Recipe
from rrt.recipes.substitutions import substitute_recipe
from rrt.recipes.tagger import parse_constraints
from rrt.recipes.titles import name_diet
from testing.shared_data import web_recipes_or_sample


def steps_to_score(recipes, candidates: int) -> list[tuple]:
    """(source step, ingredient names, source words, candidate texts) for every step of every recipe."""
    jobs = []
    for recipe in recipes:
        steps = [s for s in recipe.steps if s.strip()]
        if not steps:
            continue
        names, words = (
            [ingredient_name(line) for line in recipe.ingredients],
            source_word_set(recipe),
        )
        for i, step in enumerate(steps):
            jobs.append(
                (
                    step,
                    names,
                    words,
                    [steps[(i + k) % len(steps)] for k in range(min(candidates, len(steps)))],
                )
            )
    return jobs


def choose_all(jobs: list[tuple], constraints: list[str]) -> list:
    """The best candidate and every score, for each step."""
    return [
        select_best(texts, StepContext(constraints, step, names, words))
        for step, names, words, texts in jobs
    ]


def rule_seconds(jobs: list[tuple], constraints: list[str]) -> dict[str, float]:
    """Seconds each rule takes over every candidate of every step."""
    spent = dict.fromkeys(selection.RULES, 0.0)
    for step, names, words, texts in jobs:
        ctx = StepContext(constraints, step, names, words)
        for name, (rule, _) in selection.RULES.items():
            started = time.perf_counter()
            for text in texts:
                rule(text.strip(), ctx)
            spent[name] += time.perf_counter() - started
    return spent


def prompt_seconds(tokenizer, prompts: list[str], size: int, repeats: int) -> tuple[float, float]:
    """Fastest seconds to tokenize every prompt one at a time, and in rounds of `size`; the ids must agree."""
    alone = [tokenizer.encode(text, add_special_tokens=False) for text in prompts]
    rounds = [prompts[i : i + size] for i in range(0, len(prompts), size)]
    together = [
        ids for batch in rounds for ids in tokenizer(batch, add_special_tokens=False)["input_ids"]
    ]
    if alone != together:
        raise SystemExit("a round tokenized together gave other ids than one prompt at a time")
    one, many = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        for text in prompts:
            tokenizer.encode(text, add_special_tokens=False)
        one.append(time.perf_counter() - started)
        started = time.perf_counter()
        for batch in rounds:
            tokenizer(batch, add_special_tokens=False)
        many.append(time.perf_counter() - started)
    return min(one), min(many)


GROWTH = 8  # how many times the base size the large inputs are


def growth_cases(scale: int) -> dict[str, Callable[[], object]]:
    """The work that once grew faster than its input, at `scale` times a base size."""
    names = [ingredient_name("1 teaspoon " + "salt " * (12 * scale - i)) for i in range(8)]
    step = "Add the " + "salt " * 25 * scale
    recipe = Recipe("growth", "Bacon", ["1 pound bacon"], ["bacon " * 625 * scale])
    title = "Egg " * 25 * scale
    return {
        "ingredient matcher": lambda: step_ingredients(step, names),
        "guide on a step": lambda: substitute_recipe(recipe, "vegetarian"),
        "diet named in a title": lambda: name_diet(title, "egg-free"),
    }


def growth_seconds(repeats: int) -> dict[str, tuple[float, float]]:
    """Fewest CPU seconds of each growth case at 1x and at GROWTH times the size (CPU time, as
    other work on a shared machine stretches a wall clock, and more so for the longer run)."""
    small, large = growth_cases(1), growth_cases(GROWTH)
    spent = {}
    for name, work in small.items():
        work()  # fills the word caches both sizes share
        times = []
        for case in (work, large[name]):
            runs = []
            for _ in range(repeats):
                started = time.process_time()
                case()
                runs.append(time.process_time() - started)
            times.append(min(runs))
        spent[name] = (times[0], times[1])
    return spent


def print_growth(repeats: int) -> None:
    """Time every growth case at 1x and 8x; print the cost ratios last."""
    spent = growth_seconds(repeats)
    for name, (small, large) in spent.items():
        print(f"  {name:<22} 1x {1000 * small:9.2f} ms, {GROWTH}x {1000 * large:10.2f} ms")
    print(
        f"cost ratio, {GROWTH}x input / 1x (linear: {GROWTH}): "
        + ", ".join(f"{name} {large / small:.1f}" for name, (small, large) in spent.items())
    )


def main(argv: list[str] | None = None) -> int:
    """Score every real step's candidates and tokenize every step's prompt; print the prompt ratio last."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--constraints", default="vegan", help="constraints the candidates are judged by"
    )
    parser.add_argument("--candidates", type=int, default=10, help="candidates per step")
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed passes over every step (the fastest counts)"
    )
    parser.add_argument(
        "--tokenizer",
        default=TINY,
        help="a model folder or name whose tokenizer encodes the "
        "prompts (default: the tiny one, trained on the corpus)",
    )
    parser.add_argument(
        "--round", type=int, default=8, help="prompts tokenized in one call (recipes in a round)"
    )
    parser.add_argument(
        "--growth",
        action="store_true",
        help="only time the growth cases at 1x and 8x their size",
    )
    args = parser.parse_args(argv)
    try:
        constraints = parse_constraints(args.constraints)
    except ValueError as err:
        parser.error(str(err))
    if min(args.candidates, args.repeats, args.round) < 1:
        parser.error("--candidates, --repeats and --round must be at least 1")
    if args.growth:
        print_growth(args.repeats)
        return 0
    corpus = web_recipes_or_sample()
    recipes = list(read_recipes([corpus]))
    jobs = steps_to_score(recipes, args.candidates)
    sources = [
        {"title": r.title, "ingredients": list(r.ingredients), "steps": list(r.steps)}
        for r in recipes
    ]
    prompts = [
        step_prompt("contextual", source, n, source["steps"][:n], constraints[0])
        for source in sources
        for n in range(len(source["steps"]))
    ]
    try:
        tokenizer = load_tokenizer(
            args.tokenizer, prompts[::10], load_settings().train.tiny.vocab_size
        )
    except (OSError, ValueError) as err:
        parser.error(f"no tokenizer at {args.tokenizer}: {err}")
    chosen = choose_all(jobs, constraints)  # also fills the dictionary's and the matchers' caches
    digest = hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()[:16]
    passes = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        choose_all(jobs, constraints)
        passes.append(time.perf_counter() - started)
    spent = rule_seconds(jobs, constraints)
    total = sum(spent.values())
    # Milliseconds for a step of N candidates: short recipes give fewer, so time is per candidate.
    scored = sum(len(texts) for *_, texts in jobs)
    per_step = 1000 * args.candidates / scored
    print(
        f"{len(jobs)} steps of {os.path.relpath(corpus, ROOT)}, {scored} candidates,"
        f" constraints {','.join(constraints)}; scores digest {digest}"
    )
    for name, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<22} {per_step * seconds:6.3f} ms a step ({100 * seconds / total:4.1f}%)")
    print(
        "passes: "
        + ", ".join(f"{per_step * s:.3f}" for s in passes)
        + f" ms a step of {args.candidates}"
    )
    print(
        f"selection, ms a step of {args.candidates} candidates (fastest pass): {per_step * min(passes):.3f}"
    )
    one, many = prompt_seconds(tokenizer, prompts, args.round, args.repeats)
    print(
        f"prompts: {len(prompts)}, tokenizer {args.tokenizer}; ms a prompt one at a time "
        f"{1000 * one / len(prompts):.3f}, in rounds of {args.round} {1000 * many / len(prompts):.3f}"
    )
    print(f"prompt tokenizing, one at a time / rounds of {args.round}: {one / many:.2f}")
    print_growth(args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())

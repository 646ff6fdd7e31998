"""Recipe pairs within a dish, their step alignments, and the training rows they yield.

For each constraint, every recipe of the dish that breaks it (source) is aligned with
the recipes that obey it (targets, at most `candidates_per_source` sampled); the `pairs_per_source`
best-aligned targets are kept. Each kept pair's step links become step pairs. A recipe with
more than MAX_ALIGNED_STEPS steps is not aligned; the run counts it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from dataclasses import asdict, dataclass
from typing import Any

from rrt.config import DataSettings
from rrt.corpus import formats
from rrt.corpus.alignment import (
    AlignSettings,
    TranslationTable,
    align_steps,
    calibrated_scores,
    kept_links,
    load_link_model,
)
from rrt.corpus.dish import dish_similarity, titles_agree
from rrt.recipes.ingredients import ingredient_name, step_ingredients

# Aligning two recipes costs about the product of their step counts, in time and memory, so a
# recipe far longer than any real one (a whole cookbook read as one method) would hold its dish's
# task for minutes; it is left unpaired and counted instead.
MAX_ALIGNED_STEPS = 100


@dataclass
class PairSettings:
    """How many pairs to form per source recipe, and how large a dish may get."""

    pairs_per_source: int
    candidates_per_source: int
    max_dish_recipes: int
    min_dish_similarity: float
    title_extra_words: int | None  # None: titles need not agree (rrt.corpus.dish.titles_agree)
    seed: int

    @classmethod
    def from_config(cls, data: DataSettings, **changes) -> PairSettings:
        """The pairing settings of the `data` block, with any changes."""
        names = [f.name for f in dataclasses.fields(cls)]
        return cls(**{name: changes.get(name, getattr(data, name)) for name in names})


def valid_column(constraint: str) -> str:
    """Column name of a constraint's validity flag (`valid_dairy_free`)."""
    return "valid_" + constraint.replace("-", "_")


def _rng(*keys: str) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha1("|".join(keys).encode()).digest()[:8], "big"))


def cap_dish(recipes: list[dict], settings: PairSettings) -> tuple[list[dict], list[dict]]:
    """(kept, dropped): a seeded sample when a dish has too many recipes for one worker."""
    recipes = sorted(recipes, key=lambda r: r["id"])
    if len(recipes) <= settings.max_dish_recipes:
        return recipes, []
    rng = _rng(str(settings.seed), recipes[0]["dish"])
    kept = set(rng.sample(range(len(recipes)), settings.max_dish_recipes))
    return (
        [r for i, r in enumerate(recipes) if i in kept],
        [r for i, r in enumerate(recipes) if i not in kept],
    )


def link_scores(source: dict, target: dict, table: TranslationTable, align: AlignSettings):
    """(link scores 0-100, per-word log-likelihood) of two recipes' steps: the HMM's posterior,
    or the link model's calibrated score when `align.calibrated`."""
    scores, loglik = align_steps(list(source["steps"]), list(target["steps"]), table, align)
    if align.calibrated:
        scores = calibrated_scores(
            list(source["steps"]), list(target["steps"]), scores, table, align, load_link_model()
        )
    return scores, loglik


def dish_likeness(source: dict, target: dict, constraint: str, settings: PairSettings) -> float:
    """How alike two recipes are as one dish for a constraint (`rrt.corpus.dish.dish_similarity`), 0 when
    their titles name different dishes (`settings.title_extra_words`; None: titles not checked)."""
    if settings.title_extra_words is not None and not titles_agree(
        source["title"], target["title"], settings.title_extra_words, constraint
    ):
        return 0.0
    return dish_similarity(source, target)


def pair_dish(
    recipes: list[dict],
    constraints: list[str],
    table: TranslationTable,
    settings: PairSettings,
    align: AlignSettings,
    unlike: list[dict] | None = None,
    too_long: list[dict] | None = None,
) -> list[dict]:
    """Recipe pairs of one dish for every constraint, each with its step alignment. Candidate
    targets whose title names another dish (`settings.title_extra_words`) or that are less alike
    than `settings.min_dish_similarity` are not paired; each goes to `unlike` (source, target,
    constraint, similarity) so the run can count them. A recipe of more than MAX_ALIGNED_STEPS
    steps is not paired at all; it goes to `too_long` (id, dish, steps, reason)."""
    over = [r for r in recipes if len(r["steps"]) > MAX_ALIGNED_STEPS]
    if over:
        recipes = [r for r in recipes if len(r["steps"]) <= MAX_ALIGNED_STEPS]
        if too_long is not None:
            too_long.extend(
                {
                    "id": r["id"],
                    "dish": r["dish"],
                    "steps": len(r["steps"]),
                    "reason": f"too_many_steps (over {MAX_ALIGNED_STEPS})",
                }
                for r in over
            )
    cache: dict[tuple[str, str], Any] = {}
    similar: dict[tuple[str, str, str], float] = {}
    pairs = []
    for constraint in constraints:
        column = valid_column(constraint)
        sources = [r for r in recipes if not r[column]]
        targets = [r for r in recipes if r[column]]
        for source in sources:
            alike = []
            for target in targets:
                key = (source["id"], target["id"], constraint)
                if key not in similar:
                    similar[key] = dish_likeness(source, target, constraint, settings)
                if similar[key] >= settings.min_dish_similarity:
                    alike.append(target)
                elif unlike is not None:
                    unlike.append(
                        {
                            "source_id": source["id"],
                            "target_id": target["id"],
                            "constraint": constraint,
                            "similarity": round(similar[key], 3),
                        }
                    )
            candidates = alike
            if len(alike) > settings.candidates_per_source:
                candidates = _rng(str(settings.seed), source["id"], constraint).sample(
                    alike, settings.candidates_per_source
                )
            scored = []
            for target in candidates:
                key = (source["id"], target["id"])
                if key not in cache:
                    cache[key] = link_scores(source, target, table, align)
                scores, loglik = cache[key]
                scored.append((loglik, target["id"], target, scores))
            scored.sort(key=lambda item: (-item[0], item[1]))
            for loglik, _, target, scores in scored[: settings.pairs_per_source]:
                links = kept_links(scores, align.link_threshold, align.max_fanout)
                pairs.append(
                    {
                        "source_id": source["id"],
                        "target_id": target["id"],
                        "constraint": constraint,
                        "split": source["split"],
                        "dish": source["dish"],
                        "pair_score": round(loglik, 4),
                        "alignment": [asdict(link) for link in links],
                        "source_title": source["title"],
                        "source_ingredients": list(source["ingredients"]),
                        "source_steps": list(source["steps"]),
                        "target_title": target["title"],
                        "target_ingredients": list(target["ingredients"]),
                        "target_steps": list(target["steps"]),
                    }
                )
    return pairs


@dataclass
class KeptPair:
    """What `pair_dish` keeps of one (source, target) recipe pair: the constraints it pairs them
    for with the step links it keeps, or, when it pairs them for none, why not."""

    constraints: list[str]
    alignment: list[dict]  # the pair's `alignment` column: source_step, target_steps, scores
    why_not: str | None


def kept_pair(
    source: dict,
    target: dict,
    constraints: list[str],
    table: TranslationTable,
    settings: PairSettings,
    align: AlignSettings,
) -> KeptPair:
    """The pipeline's verdict on two recipe rows (`rrt.corpus.recipe_table.recipe_row`): pair_dish
    run on them alone, as prepare_data runs it on their dish."""
    if source["dish"] != target["dish"]:
        return KeptPair(
            [],
            [],
            f"different dishes: dish keys {source['dish']!r} and {target['dish']!r} "
            "(prepare_data pairs recipes of one dish key only, data.dish_key)",
        )
    # Ids of their own: two files may give both recipes one id, and the pairs are told apart by id.
    rows = [{**source, "id": "source"}, {**target, "id": "target"}]
    unlike: list[dict] = []
    too_long: list[dict] = []
    pairs = [
        p
        for p in pair_dish(rows, constraints, table, settings, align, unlike, too_long)
        if p["source_id"] == "source"
    ]
    if pairs:
        return KeptPair([p["constraint"] for p in pairs], pairs[0]["alignment"], None)
    if too_long:
        sides = ", ".join(f"the {r['id']} has {r['steps']} steps" for r in too_long)
        return KeptPair([], [], f"{sides}: over {MAX_ALIGNED_STEPS}, not aligned")
    broken = [c for c in constraints if not source[valid_column(c)] and target[valid_column(c)]]
    if not broken:
        return KeptPair(
            [],
            [],
            "the target obeys no constraint that the source breaks ("
            + ", ".join(constraints)
            + ")",
        )
    likeness = max(row["similarity"] for row in unlike if row["source_id"] == "source")
    return KeptPair(
        [],
        [],
        f"not alike enough as dishes: likeness {likeness:.3f}, below data.min_dish_similarity "
        f"{settings.min_dish_similarity:g} (0 when the titles name different dishes, "
        "data.title_extra_words)",
    )


def step_pair_rows(pair: dict, variant: str) -> list[dict]:
    """Training rows of one recipe pair in one pair variant (metadata + `text`). An edit pair
    (rrt.corpus.edit_pairs) keeps every step as context but learns only its `learned_steps`."""
    meta = {
        "source_id": pair["source_id"],
        "target_id": pair["target_id"],
        "constraint": pair["constraint"],
        "split": pair["split"],
        "pair_source": pair.get("pair_source") or "aligned",
    }
    learned = pair.get("learned_steps")
    source = {
        "title": pair["source_title"],
        "ingredients": list(pair["source_ingredients"]),
        "steps": list(pair["source_steps"]),
    }
    target = {
        "title": pair["target_title"],
        "ingredients": list(pair["target_ingredients"]),
        "steps": list(pair["target_steps"]),
    }
    if variant == "end_to_end":
        return [
            {
                **meta,
                "source_step": -1,
                "target_steps": [],
                "score": pair["pair_score"],
                "text": formats.end_to_end(source, target, pair["constraint"]),
            }
        ]
    links = sorted(pair["alignment"], key=lambda link: link["source_step"])
    rewrites = [" ".join(target["steps"][j] for j in link["target_steps"]) for link in links]
    names = (
        [ingredient_name(line) for line in target["ingredients"]]
        if variant in ("contextual_ing", "grounded_ing")
        else []
    )
    rows = []
    for k, link in enumerate(links):
        n = link["source_step"]
        if learned is not None and n not in learned:
            continue
        upto = source["steps"][: n + 1]
        if variant == "contextual":
            text = formats.contextual(
                source["title"], source["ingredients"], upto, rewrites[: k + 1], pair["constraint"]
            )
        elif variant == "contextual_ing":
            prompt = [m.name for m in step_ingredients(rewrites[k], names)]
            text = formats.contextual_ing(
                source["title"],
                source["ingredients"],
                upto,
                rewrites[: k + 1],
                pair["constraint"],
                prompt,
            )
        elif variant == "grounded":
            text = formats.grounded(
                source["title"],
                source["ingredients"],
                upto,
                target["title"],
                target["ingredients"],
                rewrites[: k + 1],
                pair["constraint"],
            )
        elif variant == "grounded_ing":
            prompt = [m.name for m in step_ingredients(rewrites[k], names)]
            text = formats.grounded_ing(
                source["title"],
                source["ingredients"],
                upto,
                target["title"],
                target["ingredients"],
                rewrites[: k + 1],
                pair["constraint"],
                prompt,
            )
        elif variant == "no_context":
            text = formats.no_context(
                source["title"], source["steps"][n], rewrites[k], pair["constraint"]
            )
        else:
            raise ValueError(
                f"{variant!r} is not a step-pair variant; choose from {formats.PAIR_VARIANTS}"
            )
        rows.append(
            {
                **meta,
                "source_step": n,
                "target_steps": list(link["target_steps"]),
                "score": min(link["scores"]),
                "text": text,
            }
        )
    return rows


def recipe_rows(recipe: dict, variant: str) -> list[dict]:
    """Training rows of one recipe in a recipe variant (`no_source`, `ing_predictor`)."""
    meta = {"id": recipe["id"], "split": recipe["split"]}
    title, ingredients, steps = recipe["title"], list(recipe["ingredients"]), list(recipe["steps"])
    if variant == "no_source":
        return [{**meta, "step": -1, "text": formats.no_source(title, ingredients, steps)}]
    if variant != "ing_predictor":
        raise ValueError(
            f"{variant!r} is not a recipe variant; choose from {formats.RECIPE_VARIANTS}"
        )
    names = [ingredient_name(line) for line in ingredients]
    return [
        {
            **meta,
            "step": n,
            "text": formats.ing_predictor(
                title, ingredients, steps[:n], [m.name for m in step_ingredients(steps[n], names)]
            ),
        }
        for n in range(len(steps))
    ]

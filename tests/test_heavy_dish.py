"""A dish with thousands of versions: its recipe pairs are bounded by data.max_dish_recipes."""

from __future__ import annotations

import random

from rrt.config import load_settings
from rrt.corpus.alignment import AlignSettings, train_translation_table
from rrt.corpus.pairing import PairSettings, cap_dish, pair_dish

DATA, ALIGNMENT = load_settings().data, load_settings().alignment
STEPS = [
    "Cream the butter and sugar.",
    "Beat in the egg and vanilla.",
    "Stir in the flour and chips.",
    "Bake for 10 minutes.",
]
VEGAN = [
    "Cream the coconut oil and sugar.",
    "Beat in the flax egg and vanilla.",
    "Stir in the flour and chips.",
    "Bake for 12 minutes.",
]


def _dish(size: int) -> list[dict]:
    rng = random.Random(0)
    recipes = []
    for n in range(size):
        valid = n % 2 == 1
        steps = list(VEGAN if valid else STEPS)
        rng.shuffle(steps[1:3])
        recipes.append(
            {
                "id": f"cookie~{n}",
                "title": "Chocolate Chip Cookies",
                "dish": "chocolate chip cookie",
                "split": "train",
                "ingredients": ["1 cup flour", "1 cup chocolate chips"],
                "steps": steps,
                "valid_vegan": valid,
                "valid_nut_free": True,
            }
        )
    return recipes


def test_the_cap_is_a_setting_of_the_config():
    settings = PairSettings.from_config(DATA, seed=0)
    assert isinstance(settings.max_dish_recipes, int) and settings.max_dish_recipes >= 1
    assert settings.max_dish_recipes == DATA.max_dish_recipes


def test_a_huge_dish_is_sampled_to_the_cap_the_same_way_in_any_order():
    settings = PairSettings.from_config(DATA, max_dish_recipes=12, seed=7)
    recipes = _dish(2000)
    kept, dropped = cap_dish(recipes, settings)
    assert len(kept) == 12 and len(dropped) == 1988
    assert {r["id"] for r in kept} | {r["id"] for r in dropped} == {r["id"] for r in recipes}
    again, _ = cap_dish(list(reversed(recipes)), settings)
    assert [r["id"] for r in again] == [r["id"] for r in kept]


def test_a_capped_dish_makes_at_most_cap_x_pairs_per_source_x_constraints_pairs():
    settings = PairSettings.from_config(
        DATA,
        max_dish_recipes=12,
        pairs_per_source=2,
        candidates_per_source=4,
        min_dish_similarity=0.0,
        title_extra_words=None,
        seed=7,
    )
    kept, _ = cap_dish(_dish(2000), settings)
    table = train_translation_table([(STEPS, VEGAN)] * 4, ALIGNMENT.vocab_size, iterations=2)
    align = AlignSettings.from_config(ALIGNMENT, calibrated=False)
    pairs = pair_dish(kept, ["vegan", "nut-free"], table, settings, align)
    sources = sum(1 for r in kept if not r["valid_vegan"])
    assert 0 < len(pairs) == sources * settings.pairs_per_source <= 12 * 2 * 2
    assert {p["source_id"] for p in pairs} | {p["target_id"] for p in pairs} <= {
        r["id"] for r in kept
    }

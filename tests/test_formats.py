"""Dish keys, splits, and every variant's training text parsing back into its parts."""

from __future__ import annotations

import pytest

from rrt.corpus.dish import dish_key, split_of
from rrt.corpus.formats import PAIR_VARIANTS, RECIPE_VARIANTS, parse_text
from rrt.corpus.pairing import recipe_rows, step_pair_rows


def test_dish_key_meets_versions_of_a_dish():
    assert dish_key("Best Vegan Hot Cocoa") == dish_key("Homemade Hot Cocoa") == "hot cocoa"
    assert dish_key("Easy Dairy-Free Chocolate Chip Cookies") == "chocolate chip cookie"
    assert dish_key("Crispy Fish Tacos", "head") == dish_key("Cheesy Beef Tacos", "head") == "taco"
    assert dish_key("Dark Rum Banana Bread", "head") == "banana bread"
    with pytest.raises(ValueError):
        dish_key("x", "bogus")


def test_split_is_stable_and_roughly_80_10_10():
    assert split_of("hot cocoa", 0.8, 0.1, 0) == split_of("hot cocoa", 0.8, 0.1, 0)
    counts = {s: 0 for s in ("train", "dev", "test")}
    for i in range(5000):
        counts[split_of(f"dish {i}", 0.8, 0.1, 0)] += 1
    assert 0.77 < counts["train"] / 5000 < 0.83 and 0.08 < counts["dev"] / 5000 < 0.12


PAIR = {
    "source_id": "a",
    "target_id": "b",
    "constraint": "vegan",
    "split": "train",
    "pair_score": -3.2,
    "source_title": "Hot Cocoa",
    "source_ingredients": ["2 cups milk", "2 tablespoons cocoa"],
    "source_steps": ["Warm the milk.", "Whisk in the cocoa.", "Pour into mugs."],
    "target_title": "Vegan Hot Cocoa",
    "target_ingredients": ["2 cups oat milk", "2 tablespoons cocoa"],
    "target_steps": [
        "Warm the oat milk.",
        "Whisk in the cocoa until smooth.",
        "Taste it.",
        "Pour into mugs.",
    ],
    "alignment": [
        {"source_step": 0, "target_steps": [0], "scores": [99.0]},
        {"source_step": 1, "target_steps": [1, 2], "scores": [97.0, 80.0]},
        {"source_step": 2, "target_steps": [3], "scores": [99.5]},
    ],
}


@pytest.mark.parametrize("variant", PAIR_VARIANTS)
def test_pair_variants_parse_back(variant):
    rows = step_pair_rows(PAIR, variant)
    for row in rows:
        parts = parse_text(variant, row["text"])
        assert parts.title == PAIR["source_title"] and parts.constraint == "vegan"
        if variant == "end_to_end":
            assert (
                parts.source_steps == PAIR["source_steps"]
                and parts.target["steps"] == PAIR["target_steps"]
            )
            continue
        n = row["source_step"]
        merged = " ".join(PAIR["target_steps"][j] for j in row["target_steps"])
        assert parts.target_steps[-1] == merged
        if variant == "no_context":
            assert parts.source_steps == [PAIR["source_steps"][n]]
        else:
            assert parts.ingredients == PAIR["source_ingredients"]
            assert parts.source_steps == PAIR["source_steps"][: n + 1]
    assert len(rows) == (1 if variant == "end_to_end" else 3)


def test_ingredient_prompt_names_the_target_steps_ingredients():
    last = step_pair_rows(PAIR, "contextual_ing")[0]
    assert parse_text("contextual_ing", last["text"]).prompt_ingredients == ["oat milk"]


@pytest.mark.parametrize("variant", RECIPE_VARIANTS)
def test_recipe_variants_parse_back(variant):
    recipe = {
        "id": "a",
        "split": "dev",
        "title": "Hot Cocoa",
        "ingredients": PAIR["source_ingredients"],
        "steps": PAIR["source_steps"],
    }
    rows = recipe_rows(recipe, variant)
    assert len(rows) == (1 if variant == "no_source" else 3)
    for row in rows:
        parts = parse_text(variant, row["text"])
        assert parts.title == "Hot Cocoa" and parts.ingredients == PAIR["source_ingredients"]
    last = parse_text(variant, rows[-1]["text"])
    if variant == "ing_predictor":
        assert last.source_steps == PAIR["source_steps"][:2] and last.prompt_ingredients == []
        assert parse_text(variant, rows[0]["text"]).prompt_ingredients == ["milk"]


def test_titles_agree_only_when_they_name_one_dish():
    from rrt.corpus.dish import title_core, titles_agree

    assert title_core("Crispy Salmon Tacos") == title_core("Vegan Tofu Tacos") == {"taco"}
    assert titles_agree("Emeril's Famous Banana Cream Pie", "Vegan Banana Cream Pie")
    assert titles_agree("Small Carrot Cake", "Vegan Carrot Cake")
    assert titles_agree(
        "Chicken Pot Pie", "Chicken Pot Pie with Biscuits"
    )  # a side is not the dish
    assert not titles_agree(
        "Blueberry Muffins", "Vegan Muffins"
    )  # strictly, a flavour names another dish
    assert titles_agree("Blueberry Muffins", "Vegan Muffins", extra_words=1)
    assert not titles_agree("Chocolate Cupcakes", "Grapefruit Cupcakes", extra_words=1)
    assert not titles_agree(
        "Grilled Cheese", "Cashew Ricotta Cheese", extra_words=1
    )  # no dish word left
    # The constraint's own foods may differ: a shrimp fried rice and an egg fried rice, for vegetarian.
    assert titles_agree(
        "Shrimp Fried Rice", "Easy Egg Fried Rice", constraint="vegetarian", extra_words=1
    )
    assert not titles_agree("Mac and Cheese", "Grilled Cheese", constraint="vegan", extra_words=1)


# The paper's formats as they were before the grounded ones came: the paper's settings keep them to the byte.
PAPER_TEXTS = {
    "contextual": "<|startoftext|> <src:non-vegan> Hot Cocoa <endoftitle> 2 cups milk <ing> 2 tablespoons cocoa "
    "<endofings> Warm the milk. <inst> Whisk in the cocoa. <inst> Pour into mugs. <endofinst> "
    "<tgt:vegan> Warm the oat milk. <inst> Whisk in the cocoa until smooth. Taste it. <inst> "
    "Pour into mugs. <endofinst> <|endoftext|>",
    "contextual_ing": "<|startoftext|> <src:non-vegan> Hot Cocoa <endoftitle> 2 cups milk <ing> 2 tablespoons cocoa "
    "<endofings> Warm the milk. <inst> Whisk in the cocoa. <inst> Pour into mugs. <endofinst> "
    "<tgt:vegan> Warm the oat milk. <inst> Whisk in the cocoa until smooth. Taste it. <inst> "
    "<noings> <endofprompt> Pour into mugs. <|endoftext|>",
    "no_context": "<|startoftext|> <src:non-vegan> Hot Cocoa <endoftitle> Pour into mugs. <endofinst> <tgt:vegan> "
    "Pour into mugs. <|endoftext|>",
}


@pytest.mark.parametrize("variant", sorted(PAPER_TEXTS))
def test_the_paper_formats_are_unchanged_byte_for_byte(variant):
    assert step_pair_rows(PAIR, variant)[-1]["text"] == PAPER_TEXTS[variant]


def test_grounded_formats_hold_the_target_lines_and_repeat_the_source_step():
    text = step_pair_rows(PAIR, "grounded")[-1]["text"]
    assert text.startswith(
        PAPER_TEXTS["contextual"].split(" <tgt:vegan>")[0] + " Vegan Hot Cocoa <endoftitle> "
        "oat milk <ing> cocoa <endofings> <tgt:vegan> "
    )
    assert text.endswith(
        "<inst> Pour into mugs. <endofprompt> Pour into mugs. <endofinst> <|endoftext|>"
    )

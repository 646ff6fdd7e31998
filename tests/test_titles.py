"""Titles read as titles: short stand-ins or a diet word, clean to the tagger, precise ingredient lines."""

from __future__ import annotations

import re

import pytest
from conftest import make_recipe
from hypothesis import given, settings
from hypothesis import strategies as st

from rrt.recipes import tagger, titles
from rrt.recipes.lexicon import CONSTRAINTS
from rrt.recipes.substitutions import substitute_recipe
from rrt.recipes.tagger import tag_recipe, text_violations
from rrt.recipes.titles import (
    DIET_NAMES,
    MINOR_WORDS,
    OPENERS,
    TITLE_FOODS,
    is_title_case,
    name_diet,
    title_case,
    title_stand_in,
)
from testing.work_count import lines_run

# (source title, ingredient lines, constraints, rewritten title, an ingredient line the guide must write)
TITLES = [
    (
        "Buttermilk Pancakes",
        ["2 cups flour", "2 cups buttermilk", "2 large eggs", "3 tablespoons butter, melted"],
        "vegan",
        "Vegan Buttermilk Pancakes",
        "2 cups soymilk with 2 tablespoons lemon juice",
    ),
    (
        "Chicken Alfredo",
        [
            "1 pound boneless skinless chicken breasts",
            "8 ounces fettuccine",
            "1 cup heavy cream",
            "1/2 cup grated parmesan",
            "4 tablespoons butter",
        ],
        "vegan",
        "Vegan Tofu Alfredo",
        "1 pound tofu",
    ),
    (
        "Honey Glazed Salmon",
        ["1/4 cup honey", "4 salmon fillets", "2 tablespoons soy sauce"],
        "vegan",
        "Agave Glazed Tofu",
        "1/4 cup agave nectar",
    ),
    (
        "Tuna Salad",
        ["2 cans tuna, drained", "1/2 cup mayonnaise", "1 stalk celery, diced"],
        "vegan",
        "Chickpea Salad",
        "2 cans chickpeas, drained",
    ),
    (
        "Beef Stew",
        ["2 pounds beef, cubed", "4 cups beef broth", "3 carrots, sliced"],
        "vegetarian",
        "Seitan Stew",
        "4 cups vegetable broth",
    ),
    (
        "Bacon Wrapped Dates",
        ["12 slices bacon", "24 medjool dates"],
        "vegetarian",
        "Imitation Bacon Wrapped Dates",
        "12 slices imitation bacon",
    ),
    (
        "Buttermilk Biscuits",
        ["2 cups flour", "1 cup buttermilk", "6 tablespoons cold butter"],
        "dairy-free",
        "Dairy-Free Buttermilk Biscuits",
        "1 cup soymilk with 1 tablespoon lemon juice",
    ),
    (
        "Fettuccine Alfredo",
        ["1 pound fettuccine", "1 cup heavy cream", "1 cup grated parmesan"],
        "dairy-free",
        "Dairy-Free Fettuccine Alfredo",
        "1 cup coconut cream",
    ),
    (
        "Egg Fried Rice",
        ["3 cups cooked rice", "2 eggs, beaten", "2 tablespoons soy sauce"],
        "egg-free",
        "Eggless Egg Fried Rice",
        "2 flax eggs (2 tablespoons ground flaxseed + 6 tablespoons water)",
    ),
    (
        "Deviled Eggs",
        ["6 hard boiled eggs", "1/4 cup mayonnaise", "1 teaspoon mustard"],
        "egg-free",
        "Deviled Tofu",
        "1/4 cup vegan mayonnaise",
    ),
    (
        "Peanut Butter Cookies",
        ["1 cup peanut butter", "1 cup sugar", "1 egg"],
        "nut-free",
        "Sunflower Seed Butter Cookies",
        "1 cup sunflower seed butter",
    ),
    (
        "Walnut Brownies",
        ["1 cup chopped walnuts", "1/2 cup cocoa powder"],
        "nut-free",
        "Sunflower Seed Brownies",
        "1 cup chopped sunflower seeds",
    ),
    (
        "Pesto Pasta",
        ["1 pound penne", "1/2 cup pesto"],
        "nut-free",
        "Nut-Free Pesto Pasta",
        "1/2 cup nut-free pesto",
    ),
    (
        "Crispy Fish Tacos",
        ["1 pound cod fillets", "8 corn tortillas", "1 cup shredded cabbage"],
        "fish-free",
        "Crispy Chicken Tacos",
        "1 pound chicken",
    ),
    (
        "Beer Battered Fish",
        ["1 cup beer", "1 cup flour", "1 pound cod fillets"],
        "fish-free",
        "Beer Battered Chicken",
        "1 pound chicken",
    ),
    (
        "Beer Battered Fish",
        ["1 cup beer", "1 cup flour", "1 pound cod fillets"],
        "alcohol-free",
        "Non-Alcoholic Beer Battered Fish",
        "1 cup non-alcoholic beer",
    ),
    (
        "Beer Battered Fish",
        ["1 cup beer", "1 cup flour", "1 pound cod fillets"],
        "alcohol-free,fish-free",
        "Non-Alcoholic Beer Battered Chicken",
        "1 cup non-alcoholic beer",
    ),
    (
        "Penne alla Vodka",
        ["1 pound penne", "1/4 cup vodka", "1 can crushed tomatoes"],
        "alcohol-free",
        "Penne alla Non-Alcoholic Vodka",
        "1/4 cup water",
    ),
    (
        "Rum Cake",
        ["2 cups flour", "1/2 cup dark rum", "1 cup sugar"],
        "alcohol-free",
        "Non-Alcoholic Rum Cake",
        "1/2 cup rum extract",
    ),
    (
        "Mulled Wine",
        ["1 bottle red wine", "1 orange, sliced", "2 cinnamon sticks"],
        "alcohol-free",
        "Mulled Grape Juice",
        "1 bottle red grape juice",
    ),
]


def _rewrite(title, ingredients, constraints):
    steps = [f"Combine the {', '.join(ingredients)}.", "Cook and serve."]
    return substitute_recipe(make_recipe(ingredients, steps, title=title), constraints)


def test_the_table_covers_every_constraint():
    assert {c for row in TITLES for c in row[2].split(",")} == set(CONSTRAINTS)


@pytest.mark.parametrize(
    "title,ingredients,constraints,expected,line", TITLES, ids=[f"{r[2]}:{r[0]}" for r in TITLES]
)
def test_titles_are_short_clean_and_lines_stay_precise(
    title, ingredients, constraints, expected, line
):
    out = _rewrite(title, ingredients, constraints)
    names = constraints.split(",")
    assert out.recipe.title == expected
    # Short: no stand-in of more than three words reaches the title, and no change adds more than two.
    long_stand_ins = {
        s.to_text.lower()
        for s in out.substitutions
        if s.field != "title" and len(s.to_text.split()) > 3
    }
    assert not any(s in out.recipe.title.lower() for s in long_stand_ins)
    assert all(
        len(s.to_text.split()) - len(s.from_text.split()) <= 2
        for s in out.substitutions
        if s.field == "title"
    )
    assert not any(w in out.recipe.title.lower() for w in ("soured with", "replacer", "extract"))
    # Clean to the tagger, in the recipe and read on its own.
    tags = tag_recipe(out.recipe, names)
    assert all(tags.valid.values()), tags.to_dict()
    assert not text_violations(out.recipe.title, names)
    # The cook still reads the precise stand-in.
    assert line in out.recipe.ingredients


def test_title_casing_follows_the_source():
    ingredients = ["2 cups buttermilk", "1 cup flour"]
    assert (
        _rewrite("Buttermilk pancakes with syrup", ingredients, "vegan").recipe.title
        == "Vegan buttermilk pancakes with syrup"
    )
    assert (
        _rewrite("BUTTERMILK PANCAKES", ingredients, "vegan").recipe.title
        == "VEGAN BUTTERMILK PANCAKES"
    )
    assert (
        _rewrite("Chicken with rice", ["1 pound chicken"], "vegetarian").recipe.title
        == "Tofu with rice"
    )
    assert (
        _rewrite("Ground Beef Tacos", ["1 pound ground beef"], "vegetarian").recipe.title
        == "Plant-Based Ground Meat Tacos"
    )


def test_diet_word_follows_openers_and_covers_each_food():
    out = _rewrite("Easy Homemade Buttermilk Pancakes", ["2 cups buttermilk"], "vegan")
    assert out.recipe.title == "Easy Homemade Vegan Buttermilk Pancakes"
    out = _rewrite("30-Minute Chicken Alfredo", ["1 pound chicken", "1 cup heavy cream"], "vegan")
    assert out.recipe.title == "30-Minute Vegan Tofu Alfredo"
    assert (
        _rewrite("How to Bake Eggs", ["4 eggs"], "egg-free").recipe.title
        == "How to Bake Eggless Eggs"
    )
    out = _rewrite("Buttermilk Pancakes with Egg", ["2 cups buttermilk", "1 egg"], "vegan")
    assert out.recipe.title == "Vegan Buttermilk Pancakes with Vegan Egg"
    assert not text_violations(out.recipe.title, ["vegan"])


def test_title_changes_are_recorded_and_applied_once():
    out = _rewrite("Chicken Alfredo", ["1 pound chicken", "1 cup heavy cream"], "vegan")
    titled = [(s.from_text, s.to_text) for s in out.substitutions if s.field == "title"]
    assert titled == [("Chicken", "Tofu"), ("Tofu Alfredo", "Vegan Tofu Alfredo")]
    again = substitute_recipe(out.recipe, "vegan")
    assert again.recipe == out.recipe and not again.substitutions


def test_dish_names_get_the_diet_and_untouched_recipes_keep_their_title():
    out = _rewrite(
        "Chicken with Tzatziki", ["1 pound chicken thighs", "1 cup greek yogurt"], "vegan"
    )
    assert out.recipe.title == "Tofu with Vegan Tzatziki" and not text_violations(
        out.recipe.title, ["vegan"]
    )
    out = _rewrite(
        "Creamy Basil Pesto Pasta (Vegan and gluten-free)", ["1/2 cup pesto"], "nut-free"
    )
    assert out.recipe.title == "Nut-Free Creamy Basil Pesto Pasta (Vegan and gluten-free)"
    out = _rewrite("No Bake Strawberry Cheesecake Bars", ["1 cup cream cheese"], "dairy-free")
    assert (
        out.recipe.title == "No Bake Strawberry Dairy-Free Cheesecake Bars"
    )  # not "No Dairy-Free Bake"
    # A recipe the guide leaves alone keeps its title, even one naming a food it stands in for.
    assert (
        _rewrite("Parsnip Lobster Rolls", ["4 parsnips"], "vegan").recipe.title
        == "Parsnip Lobster Rolls"
    )


@pytest.mark.parametrize(
    "stand_in,original,expected",
    [
        ("soymilk soured with lemon juice", "Buttermilk", None),
        ("soured soymilk", "Buttermilk", None),
        ("flax egg", "Egg", None),
        ("egg replacer", "Egg", None),
        ("water", "Vodka", None),
        ("rice vinegar with sugar", "Mirin", None),
        ("agave nectar", "Honey", "agave"),
        ("chickpeas", "Tuna", "chickpea"),
        ("sunflower seeds", "Walnuts", "sunflower seeds"),
        ("hearts of palm", "Crab", "hearts of palm"),
        ("plant-based ground meat", "Ground Beef", "plant-based ground meat"),
    ],
)
def test_title_stand_in(stand_in, original, expected):
    assert title_stand_in(stand_in, original) == expected


def test_case_helpers_and_name_diet():
    assert is_title_case("Penne alla Vodka") and not is_title_case("Chicken with rice")
    assert title_case("hearts of palm") == "Hearts of Palm"
    assert title_case("non-alcoholic beer") == "Non-Alcoholic Beer"
    assert name_diet("Tofu Alfredo", "vegan") == (
        "Vegan Tofu Alfredo",
        [("Tofu Alfredo", "Vegan Tofu Alfredo")],
    )
    assert name_diet("Mac and Cheese", "dairy-free")[0] == "Mac and Dairy-Free Cheese"
    assert name_diet("Tofu Curry", "vegan") == ("Tofu Curry", [])


# ---------------------------------------------------------------- naming the diet, turn by turn

_TOKEN = re.compile(r"[\w'’-]+")


def _opener(word: str) -> bool:
    return word.lower() in OPENERS or word[:1].isdigit()


def _phrase_start(title: str, at: int) -> bool:
    before = title[:at].rstrip()
    if not before or not before[-1].isalnum():
        return True
    previous = _TOKEN.findall(before)[-1]
    return previous.lower() != "to" and (_opener(previous) or previous.lower() in MINOR_WORDS)


def _heads(title: str, start: int) -> list[int]:
    heads: list[int] = []
    for word in reversed(list(_TOKEN.finditer(title[:start]))[-2:]):
        if (
            title[word.end() : (heads or [start])[-1]].strip()
            or _opener(word.group())
            or word.group().lower() in MINOR_WORDS
        ):
            break
        heads.append(word.start())
    return [at for at in heads[::-1] if _phrase_start(title, at)] + [start]


def _with_diet_word(title: str, constraint: str, at: int) -> str:
    word, rest = DIET_NAMES[constraint], title[at:]
    if title.isupper():
        word = word.upper()
    elif at == 0 and not is_title_case(title):
        word = word[:1].upper() + word[1:]
        first = rest.split(" ", 1)[0]
        rest = rest[:1].lower() + rest[1:] if first[1:] == first[1:].lower() else rest
    elif rest[:1].isupper():
        word = title_case(word)
    return title[:at] + word + " " + rest


def name_diet_whole_title(title: str, constraint: str) -> tuple[str, list[tuple[str, str]]]:
    """name_diet as it was: each turn tags the whole title and covers its last uncovered food."""
    made = []
    for _ in range(len(title.split()) + 1):
        found = text_violations(title, [constraint])
        if not found:
            break
        food = max(found, key=lambda m: m.start)
        for at in _heads(title, food.start):
            new = _with_diet_word(title, constraint, at)
            moved = food.start + len(new) - len(title)
            if not any(m.start == moved for m in text_violations(new, [constraint])):
                made.append((title[at : food.end], new[at : moved + food.end - food.start]))
                title = new
                break
        else:
            break
    return title, made


TITLE_WORDS = st.sampled_from(
    ["Egg", "eggs", "Bacon", "Milk", "cheese", "Easy", "and", "with", "Salad", "Vegan", "Tofu"]
    + ["Fried", "Rice", "HAM", "Walnut", "to", "Butter", "30-Minute", "the", "Fish", "Tacos"]
)


@settings(max_examples=60, deadline=None)
@given(
    words=st.lists(
        st.tuples(TITLE_WORDS, st.sampled_from([" ", " ", ", ", ": ", " & "])), max_size=8
    ),
    constraint=st.sampled_from(sorted(DIET_NAMES)),
)
def test_name_diet_names_a_real_sized_title_as_it_was_named_turn_by_turn(words, constraint):
    title = "".join(word + gap for word, gap in words).strip(" ,:&")
    assert name_diet(title, constraint) == name_diet_whole_title(title, constraint)


def _naming(foods: int):
    title = "Egg " * foods
    return lambda: name_diet(title, "egg-free")


def test_naming_work_grows_with_the_title_not_with_its_foods_times_its_length():
    small, large = _naming(TITLE_FOODS), _naming(8 * TITLE_FOODS)
    small()
    assert not text_violations(large()[0], ["egg-free"])  # every food covered, piece by piece
    few = lines_run(small, [titles, tagger])
    # Linear is 8 times, and one more reading of the whole title to find its foods; tagging the
    # whole title once for each of its foods ran about 64 times the lines.
    many = lines_run(large, [titles, tagger], limit=10 * few)
    assert many <= 10 * few, (few, many)

"""Dietary tagger: tricky cases, the hierarchy of constraints, and quality on real recipes."""

from __future__ import annotations

import pytest
from conftest import SAMPLE, WEB_RECIPES, make_recipe, needs_shared_data
from hypothesis import given
from hypothesis import strategies as st

from rrt.config import load_settings
from rrt.recipes.lexicon import CONSTRAINTS
from rrt.recipes.loaders import read_recipes
from rrt.recipes.recipe import Recipe
from rrt.recipes.tagger import parse_constraints, tag_recipe, text_violations

# (ingredient line, constraint, expected validity): exceptions and their violating twins.
TRICKY = [
    ("1 large eggplant, cubed", "egg-free", True),
    ("2 large eggs", "egg-free", False),
    ("Egg replacer equal to 2 eggs", "egg-free", True),
    ("1 egg, beaten", "egg-free", False),
    ("1/2 cup vegan mayonnaise", "egg-free", True),
    ("1/2 cup mayonnaise", "egg-free", False),
    ("2 beefsteak tomatoes, sliced", "vegetarian", True),
    ("1 pound beef steak", "vegetarian", False),
    ("8 ounces oyster mushrooms", "fish-free", True),
    ("2 tablespoons oyster sauce", "fish-free", False),
    ("1 cup oyster crackers", "fish-free", True),
    ("12 fresh oysters", "fish-free", False),
    ("1 butternut squash, peeled", "nut-free", True),
    ("1/2 cup chopped walnuts", "nut-free", False),
    ("1/4 teaspoon ground nutmeg", "nut-free", True),
    ("1/4 cup pine nuts", "nut-free", False),
    ("1 can coconut milk", "dairy-free", True),
    ("1 cup whole milk", "dairy-free", False),
    ("1 cup oat milk", "dairy-free", True),
    ("1 cup soy milk", "dairy-free", True),
    ("1 cup almond milk", "dairy-free", True),
    ("1 cup almond milk", "nut-free", False),
    ("2 tablespoons peanut butter", "dairy-free", True),
    ("2 tablespoons peanut butter", "nut-free", False),
    ("2 tablespoons butter", "dairy-free", False),
    ("1 teaspoon cream of tartar", "dairy-free", True),
    ("1 cup heavy cream", "dairy-free", False),
    ("1 can ginger ale", "alcohol-free", True),
    ("1 bottle pale ale", "alcohol-free", False),
    ("2 ounces cocoa butter", "dairy-free", True),
    ("4 cups vegetable broth", "vegetarian", True),
    ("4 cups chicken broth", "vegetarian", False),
    ("1 tablespoon Worcestershire sauce", "fish-free", False),
    ("1 tablespoon Worcestershire sauce", "vegetarian", False),
    ("2 tablespoons fish sauce", "fish-free", False),
    ("1 envelope unflavored gelatin", "vegetarian", False),
    ("2 tablespoons agar agar powder", "vegetarian", True),
    ("3 tablespoons honey", "vegan", False),
    ("3 tablespoons honey", "vegetarian", True),
    ("1/4 cup dry marsala", "alcohol-free", False),
    ("2 tablespoons mirin", "alcohol-free", False),
    ("1/4 cup dry sherry", "alcohol-free", False),
    ("2 tablespoons sherry vinegar", "alcohol-free", True),
    ("1 tablespoon red wine vinegar", "alcohol-free", True),
    ("1/2 cup red wine", "alcohol-free", False),
    ("1 cup vegan butter", "vegan", True),
    ("1 cup dairy-free cream cheese", "dairy-free", True),
    ("1 cup non-dairy whipped cream", "dairy-free", True),
    ("1 1/2 cups kidney beans", "vegetarian", True),
    ("1 pound chicken liver", "vegetarian", False),
    ("2 cups water chestnuts", "nut-free", True),
    ("1/2 cup chestnuts", "nut-free", False),
    ("1 tablespoon nutritional yeast", "nut-free", True),
    ("1 tablespoon nutritional yeast", "dairy-free", True),
    ("2 crab apples", "fish-free", True),
    ("8 ounces lump crab meat", "fish-free", False),
    ("1 Scotch bonnet pepper", "alcohol-free", True),
    ("2 tablespoons Scotch whisky", "alcohol-free", False),
    ("1 cup goat cheese", "vegetarian", True),
    ("1 cup goat cheese", "dairy-free", False),
    ("1 pound ground goat", "vegetarian", False),
    ("8 ounces tofu bacon", "vegetarian", True),
    ("4 slices bacon", "vegetarian", False),
    ("1 cup coconut yogurt", "dairy-free", True),
    ("1 cup Greek yogurt", "dairy-free", False),
    ("2 tablespoons flax egg", "egg-free", True),
    ("1 cup non-alcoholic wine", "alcohol-free", True),
    ("1 cup mini marshmallows", "vegetarian", False),
    ("1 cup vegan marshmallows", "vegetarian", True),
    ("1 teaspoon anchovy paste", "fish-free", False),
    ("1/2 cup prepared pesto", "nut-free", False),
    ("1/2 cup nut-free pesto", "nut-free", True),
    ("2 cups fresh fettuccine", "egg-free", False),
    ("2 cups dried spaghetti", "egg-free", True),
    ("8 ounces egg noodles", "egg-free", False),
]


@pytest.mark.parametrize("line,constraint,expected", TRICKY)
def test_tricky_ingredient_lines(line, constraint, expected):
    result = tag_recipe(make_recipe([line, "1 pinch salt"]), [constraint])
    assert result.valid[constraint] is expected, result.to_dict()


def test_violation_record_names_term_field_line_and_span():
    recipe = make_recipe(["1 cup flour", "2 tablespoons honey"], ["Stir in the honey.", "Bake."])
    out = tag_recipe(recipe, ["vegan"]).to_dict()
    first = out["violations"]["vegan"][0]
    assert {k: first[k] for k in ("term", "field", "index")} == {
        "term": "honey",
        "field": "ingredients",
        "index": 1,
    }
    assert out["lines"] == [
        {"field": "ingredients", "index": 1, "text": "2 tablespoons honey"},
        {"field": "steps", "index": 0, "text": "Stir in the honey."},
    ]
    assert out["lines"][0]["text"][slice(*first["span"])] == "honey"
    assert [v["field"] for v in out["violations"]["vegan"]] == ["ingredients", "steps"]


def test_steps_referring_to_a_harmless_ingredient_are_not_violations():
    recipe = make_recipe(
        ["1/2 cup vegan butter", "1 cup flour"], ["Melt the butter.", "Add the flour."]
    )
    assert tag_recipe(recipe, ["dairy-free"]).valid["dairy-free"]
    recipe.steps.append("Top with grated parmesan.")
    assert not tag_recipe(recipe, ["dairy-free"]).valid["dairy-free"]


def test_title_and_steps_are_tagged():
    recipe = make_recipe(
        ["1 pound chicken thighs", "1 onion"],
        ["Brown the chicken.", "Serve."],
        title="Chicken Stew",
    )
    fields = {v.field for v in tag_recipe(recipe, ["vegetarian"]).violations["vegetarian"]}
    assert fields == {"title", "ingredients", "steps"}


def test_hidden_violations():
    assert text_violations("Add a dash of Worcestershire sauce.", ["fish-free"])
    assert text_violations("Bloom the gelatin in cold water.", ["vegetarian"])
    assert text_violations("Drizzle with honey.", ["vegan"])
    assert not text_violations("Drizzle with honey.", ["vegetarian"])


def test_hierarchy_vegan_implies_vegetarian_implies_fish_free():
    for recipe in read_recipes([str(SAMPLE)]):
        valid = tag_recipe(recipe).valid
        if valid["vegan"]:
            assert valid["vegetarian"] and valid["dairy-free"] and valid["egg-free"], recipe.id
        if valid["vegetarian"]:
            assert valid["fish-free"], recipe.id


def test_parse_constraints():
    assert parse_constraints("all") == list(CONSTRAINTS)
    assert parse_constraints("vegan, nut-free") == ["vegan", "nut-free"]
    with pytest.raises(ValueError, match="unknown constraint 'keto'"):
        parse_constraints("keto")


def test_sample_corpus_matches_its_authored_diets():
    for recipe in read_recipes([str(SAMPLE)]):
        valid = tag_recipe(recipe).valid
        expected = {c: c in recipe.metadata["diets"] for c in CONSTRAINTS}
        assert valid == expected, recipe.id


def _site_says(tags: list[str], constraint: str) -> bool:
    name = constraint.replace("-", " ")
    return any(f" {name} " in f" {t.lower().replace('-', ' ')} " for t in tags)


@needs_shared_data
@pytest.mark.parametrize("constraint", ["vegan", "vegetarian"])
def test_web_recipes_tagged_by_their_site_are_valid(constraint):
    recipes = [
        r
        for r in read_recipes([str(WEB_RECIPES)])
        if _site_says(r.metadata.get("site_tags", []), constraint)
    ]
    assert len(recipes) >= 20
    valid = sum(tag_recipe(r, [constraint]).valid[constraint] for r in recipes)
    assert valid / len(recipes) >= 0.90, f"{valid}/{len(recipes)}"


def test_a_training_target_names_no_forbidden_food_even_as_optional():
    from rrt.corpus.recipe_table import recipe_row

    tacos = make_recipe(
        ["8 corn tortillas", "1 tbsp fish sauce (optional)", "1 cup cabbage"],
        steps=["Warm the tortillas.", "Season the cabbage with lime and fish sauce."],
        title="Tacos",
    )
    assert tag_recipe(tacos, ["fish-free"]).valid[
        "fish-free"
    ]  # lenient: what a rewrite must remove
    assert not tag_recipe(tacos, ["fish-free"], lenient=False).valid["fish-free"]
    assert (
        recipe_row(tacos, ["fish-free"], load_settings().data)["valid_fish_free"] is False
    )  # so never a target, only a source
    broth = make_recipe(["1 cup beef broth (or water)", "1 onion"], steps=["Simmer.", "Serve."])
    assert recipe_row(broth, ["vegetarian"], load_settings().data)["valid_vegetarian"] is False


def test_tagging_a_step_of_many_mentions_is_linear(monkeypatch):
    """A 2,000-character step of 400 mentions ("milk/milk/...") once took seconds: each mention
    read back to the start of its line and compared its "or" segments with every other's."""
    from rrt.recipes import tagger

    read, words = [], [0]

    class Recorder:
        def __init__(self, pattern):
            self.pattern = pattern

        def search(self, text, *args):
            read.append(len(text))
            return self.pattern.search(text, *args)

    plain = tagger.normalise_term

    def counted(text):
        words[0] += 1
        return plain(text)

    monkeypatch.setattr(tagger, "_NEGATED", Recorder(tagger._NEGATED))
    monkeypatch.setattr(tagger, "normalise_term", counted)
    mentions = 400
    result = tag_recipe(
        make_recipe(["1 cup water"], steps=["milk/" * (mentions - 1) + "milk", "Stir."]), ["vegan"]
    )
    assert len(result.violations["vegan"]) == mentions
    assert len(read) == mentions and max(read) <= 200  # a bounded look back per mention
    assert words[0] < 20 * mentions  # not one pass over the line per mention
    # What is harmless stays harmless: an offered alternative far along a long line still counts.
    long_line = "Stir in the milk " + "and keep stirring " * 20 + "(or water)."
    assert tag_recipe(make_recipe(["1 cup water"], steps=[long_line, "Serve."]), ["vegan"]).valid[
        "vegan"
    ]


# (step, constraint, expected validity): tools and likenesses named after a food, each with a
# violating twin that names the food itself.
KITCHEN_WORDS = [
    (
        "Grate the butter on the large side of a cheese grater.",
        "dairy-free",
        False,
    ),  # the butter still counts
    ("Grate the apples on the large side of a cheese grater.", "dairy-free", True),
    ("Grate the cheese on the large side.", "dairy-free", False),
    ("Slice it thin with a cheese slicer or a cheese knife.", "dairy-free", True),
    ("Slice the cheese thin.", "dairy-free", False),
    ("Line the sieve with cheesecloth.", "dairy-free", True),
    ("Line the sieve with cheese cloth.", "dairy-free", True),
    ("Line the sieve with cheese slices.", "dairy-free", False),
    ("Spread the jam with a butter knife.", "dairy-free", True),
    ("Spread the jam with butter.", "dairy-free", False),
    ("Smooth the top with butter paddles.", "dairy-free", True),
    ("Smooth the top with butter.", "dairy-free", False),
    ("Froth the oat drink with a milk frother.", "dairy-free", True),
    ("Froth the milk.", "dairy-free", False),
    ("Portion the dough with an ice cream scoop.", "dairy-free", True),
    ("Butterfly the squash and roast it.", "dairy-free", True),
    ("Butter the squash and roast it.", "dairy-free", False),
    ("Slice the potatoes with an egg slicer.", "egg-free", True),
    ("Slice the eggs.", "egg-free", False),
    ("Set an egg timer for ten minutes.", "egg-free", True),
    ("Boil the eggs for ten minutes.", "egg-free", False),
    ("Roll the dough into egg-shaped balls.", "egg-free", True),
    ("Roll the balls in beaten egg.", "egg-free", False),
    ("Crack the shells with a nut cracker.", "nut-free", True),
    ("Crack the nuts.", "nut-free", False),
    ("Strain the oat drink through a nut milk bag.", "nut-free", True),
    ("Pour in the nut milk.", "nut-free", False),
    ("Cook the flour until nut-brown.", "nut-free", True),
    ("Cook the flour until nut brown.", "nut-free", True),
    ("Cook the nuts until brown.", "nut-free", False),
    ("Roll the dough into walnut-sized balls.", "nut-free", True),
    ("Roll the balls in chopped walnuts.", "nut-free", False),
    ("Flip the tofu with a fish spatula.", "fish-free", True),
    ("Flip the fish.", "fish-free", False),
    ("Season with fish sauce.", "fish-free", False),  # a hidden violation, not a tool
    ("Shuck with an oyster knife.", "fish-free", True),
    ("Shuck the oysters.", "fish-free", False),
    ("Chop the squash with a meat cleaver.", "vegetarian", True),
    ("Chop the meat.", "vegetarian", False),
    ("Cut with steak knives.", "vegetarian", True),
    ("Cut the steak.", "vegetarian", False),
    ("Cook the onions until honey-colored.", "vegan", True),
    ("Drizzle with honey.", "vegan", False),
    ("Drizzle the agave with a honey dipper.", "vegan", True),
    ("Open the bottle with a wine opener.", "alcohol-free", True),
    ("Open the wine.", "alcohol-free", False),
]


@pytest.mark.parametrize("step,constraint,expected", KITCHEN_WORDS)
def test_tools_and_shapes_named_after_food_are_not_food(step, constraint, expected):
    recipe = make_recipe(["1 cup flour", "1 pinch salt"], steps=[step, "Serve."])
    assert tag_recipe(recipe, [constraint]).valid[constraint] is expected, tag_recipe(
        recipe, [constraint]
    ).to_dict()


@pytest.mark.parametrize(
    "line,constraint,expected",
    [
        ("1 piece cheesecloth, for straining", "dairy-free", True),
        ("1 cup grated cheese", "dairy-free", False),
        ("1 walnut-sized knob of ginger", "nut-free", True),
        ("1 cup walnuts", "nut-free", False),
    ],
)
def test_tool_and_shape_words_on_ingredient_lines(line, constraint, expected):
    assert (
        tag_recipe(make_recipe([line, "1 pinch salt"]), [constraint]).valid[constraint] is expected
    )


# Each allowed phrase holds a food word of a constraint, with a bare one beside it.
ALLOWED = {"oyster mushrooms": "oysters", "root beer": "beer", "chicken of the woods": "chicken"}


@given(st.lists(st.sampled_from([*ALLOWED, *ALLOWED.values(), "salt"]), min_size=1, max_size=40))
def test_a_food_inside_an_allowed_phrase_is_harmless_wherever_it_stands(pieces):
    constraints = ["fish-free", "alcohol-free", "vegetarian"]
    result = tag_recipe(
        Recipe("p", "Soup", ["1 cup water"], [", ".join(pieces) + "."]), constraints
    )
    flagged = {v.span for c in constraints for v in result.violations.get(c, [])}
    assert len(flagged) == sum(p in ALLOWED.values() for p in pieces)


# (text, constraint, the terms flagged): members of a list share its head.
SHARED_HEADS = [
    ("1/2 cup ranch or blue cheese dressing", "dairy-free", ["ranch dressing", "blue cheese"]),
    (
        "1/2 cup ranch or blue cheese dressing",
        "egg-free",
        ["ranch dressing", "blue cheese dressing"],
    ),
    ("Serve with caesar or ranch dressing.", "fish-free", ["caesar dressing"]),
    ("Serve with caesar or italian dressing.", "egg-free", ["caesar dressing"]),
    (
        "Serve with thousand island or ranch dressing.",
        "egg-free",
        ["thousand island dressing", "ranch dressing"],
    ),
    ("2 cups chicken or vegetable broth", "vegetarian", ["chicken broth"]),
    ("1 tablespoon fish or soy sauce", "fish-free", ["fish sauce"]),
    ("1 cup red or white wine", "alcohol-free", ["red wine", "white wine"]),
    ("1 tablespoon red or white wine vinegar", "alcohol-free", []),
    ("1 cup coconut or oat milk", "dairy-free", []),
    ("1 cup vegan ranch or vegan blue cheese dressing", "vegan", []),
    # "and" joins two foods when the member is a food on its own: chicken, and a broth.
    ("Add the chicken and vegetable broth.", "vegetarian", ["chicken"]),
    ("Add the sour and heavy cream.", "dairy-free", ["sour cream", "heavy cream"]),
]


@pytest.mark.parametrize("text,constraint,terms", SHARED_HEADS)
def test_list_members_share_their_head(text, constraint, terms):
    assert [m.term for m in text_violations(text, [constraint])] == terms


def test_a_dish_term_in_a_step_counts_where_a_line_names_it_bought():
    bought = make_recipe(["1/2 cup pesto", "1 pound penne"], ["Toss the penne with the pesto."])
    flagged = tag_recipe(bought, ["nut-free"]).violations["nut-free"]
    assert [(v.field, v.term) for v in flagged] == [("ingredients", "pesto"), ("steps", "pesto")]
    # Made from the listed ingredients: the step names what the lines hold.
    made = make_recipe(
        ["2 cups basil", "1/4 cup sunflower seeds", "1 pound penne"],
        ["Blend the basil and seeds into a pesto.", "Toss the penne with the pesto."],
    )
    assert tag_recipe(made, ["nut-free"]).valid["nut-free"]


def test_a_dish_a_step_says_is_bought_counts():
    recipe = make_recipe(["1 pound penne"], ["Toss the penne with store-bought pesto.", "Serve."])
    assert [v.term for v in tag_recipe(recipe, ["nut-free"]).violations["nut-free"]] == ["pesto"]
    assert not tag_recipe(recipe, ["vegan"]).valid["vegan"]
    assert tag_recipe(recipe, ["vegetarian"]).valid["vegetarian"]


def test_a_bare_comma_ends_no_list_of_foods_sharing_a_head():
    # "golden brown" is a colour, and "adding more" no member: only the butter itself is dairy.
    found = text_violations("Cook until golden brown, adding more butter", ["vegan"])
    assert [v.term for v in found] == ["butter"]
    assert {
        v.term for v in text_violations("ranch, caesar or blue cheese dressing", ["vegan"])
    } >= {
        "ranch",
        "caesar dressing",
        "blue cheese dressing",
    }

"""Cues and notes that follow from a swap: no fat to drain, no pink to lose, tofu pressed, flax eggs set."""

from __future__ import annotations

import re

import pytest
from conftest import make_recipe
from hypothesis import given
from hypothesis import strategies as st

from rrt.recipes.cook_notes import CUES, NOTES, adapt_step, adapt_steps
from rrt.recipes.substitutions import substitute_recipe
from rrt.recipes.tagger import text_violations

PRESS_TOFU = "Press the tofu for 15 minutes before you start."
FLAX_NOTE = "Stir the ground flaxseed into the water and let it stand 5 minutes to thicken."


def _adapted(lines, steps, constraint):
    guided = substitute_recipe(make_recipe(lines, steps), constraint)
    return adapt_steps(steps, guided.recipe.steps, guided.substitutions, constraint.split(","))


@pytest.mark.parametrize(
    "step,expected",
    [
        ("Brown the ground beef; drain off the fat.", "Brown the plant-based ground meat."),
        ("Brown the beef, then drain the grease from the pan.", "Brown the plant-based meat."),
        ("Drain the fat and add the onion.", "Add the onion."),
        ("Drain off the excess fat.", "No fat to drain."),
        ("Cook until no longer pink.", "Cook until heated through and browned."),
        (
            "Cook the beef until cooked through.",
            "Cook the plant-based meat until heated through and browned.",
        ),
        # Cues of other foods stay.
        ("Bake the potatoes until cooked through.", "Bake the potatoes until cooked through."),
        ("Add the onion.", "Add the onion."),
    ],
)
def test_plant_based_meat_has_no_fat_to_drain_and_no_pink(step, expected):
    [(adapted, notes)] = _adapted(["1 lb ground beef", "1 onion"], [step], "vegan")
    assert adapted == expected and notes == []
    assert not text_violations(adapted, ["vegan"])


def test_the_same_cues_stay_where_the_meat_stays():
    steps = ["Brown the ground beef; drain off the fat.", "Cook until no longer pink."]
    guided = substitute_recipe(make_recipe(["1 lb ground beef"], steps), "dairy-free")
    assert [
        s for s, _ in adapt_steps(steps, guided.recipe.steps, guided.substitutions, ["dairy-free"])
    ] == steps


def test_a_broth_swap_is_no_plant_based_meat():
    steps = ["Add the chicken broth; drain off the fat."]
    [(adapted, _)] = _adapted(["4 cups chicken broth"], steps, "vegan")
    assert adapted == "Add the vegetable broth; drain off the fat."


def test_tofu_for_fish_turns_golden_not_flaky():
    steps = [
        "Season the cod.",
        "Bake until crisp and flaky.",
        "Bake until the fish flakes easily with a fork.",
    ]
    adapted = _adapted(["1 lb cod fillets"], steps, "vegan")
    assert [s for s, _ in adapted] == [
        "Season the tofu.",
        "Bake until golden.",
        "Bake until golden.",
    ]


def test_each_note_is_said_once_where_its_stand_in_is_named():
    steps = [
        "Cut the chicken into strips.",
        "Beat the eggs.",
        "Dip the chicken in the eggs.",
        "Fry.",
    ]
    adapted = _adapted(["4 chicken breasts", "2 eggs"], steps, "vegan")
    assert [notes for _, notes in adapted] == [
        [PRESS_TOFU],
        [FLAX_NOTE],
        [],
        [],
    ]


def test_substitutions_may_come_as_records():
    said: set[str] = set()
    record = {"original": "2 eggs", "replacement": "2 flax eggs (...)", "constraint": "vegan"}
    assert adapt_step("Beat the eggs.", "Beat the flax eggs.", [record], ["vegan"], said) == (
        "Beat the flax eggs.",
        [FLAX_NOTE],
    )
    assert adapt_step("Add the eggs.", "Add the flax eggs.", [record], ["vegan"], said)[1] == []
    # A swap made for another constraint is no swap of this rewrite.
    assert adapt_step("Beat the eggs.", "Beat the flax eggs.", [record], ["egg-free"]) == (
        "Beat the flax eggs.",
        [],
    )


def test_every_cue_and_note_names_a_kind_of_swap():
    from rrt.recipes.cook_notes import SWAP_KINDS

    assert {c.kind for c in CUES} | {n.kind for n in NOTES} <= set(SWAP_KINDS)


@given(
    step=st.text(max_size=80),
    subs=st.lists(
        st.sampled_from(
            [
                ("1 lb ground beef", "1 lb plant-based ground meat"),
                ("cod", "tofu"),
                ("2 eggs", "2 flax eggs"),
                ("milk", "soymilk"),
            ]
        ),
        max_size=3,
    ),
)
def test_a_step_without_a_cue_is_kept_word_for_word(step, subs):
    records = [{"original": o, "replacement": r} for o, r in subs]
    adapted, _ = adapt_step(step, step, records, ["vegan"])
    cued = any(re.search(c.pattern, step, re.IGNORECASE) for c in CUES)
    assert adapted == step or cued


def test_a_note_waits_for_a_step_that_names_its_stand_in_and_reads_in_order():
    from rrt.recipes.cook_notes import place_notes

    steps = [
        "Add the chicken bouillon, oregano and cumin; bring to a boil.",
        "Whisk the eggs with the milk.",
        "Rub the chicken with the olive oil and season with salt.",
    ]
    adapted = _adapted(
        ["1 chicken bouillon cube", "2 eggs", "1 lb chicken breasts"], steps, "vegetarian,egg-free"
    )
    # The bouillon step names the swapped food's word, but not the tofu the note is about; the
    # tofu is pressed before the cook starts, the flax eggs are made where they are first used.
    assert [notes for _, notes in adapted] == [[PRESS_TOFU], [FLAX_NOTE], []]
    step, notes = adapted[0]
    assert place_notes(step, notes) == f"{PRESS_TOFU} {step}"
    assert place_notes("Beat the flax eggs.", [FLAX_NOTE]) == f"{FLAX_NOTE} Beat the flax eggs."


def test_the_tofu_is_pressed_before_the_first_step_not_midway():
    steps = ["Brown the chorizo in a skillet.", "Add the shrimp and cook 3 minutes."]
    adapted = _adapted(["4 oz chorizo", "4 oz shrimp"], steps, "vegan")
    assert [notes for _, notes in adapted] == [[PRESS_TOFU], []]


def test_flax_eggs_are_added_not_cracked():
    steps = ["Crack the eggs into the mixture one at a time.", "Crack 3 eggs into a bowl."]
    adapted = _adapted(["3 eggs", "1 cup flour"], steps, "egg-free")
    assert [step for step, _ in adapted] == [
        "Add the flax eggs into the mixture one at a time.",
        "Add 3 flax eggs into a bowl.",
    ]


@pytest.mark.parametrize(
    "lines,step,constraint,expected",
    [
        # Shrimp for chicken is cooked through, for tofu golden: neither turns pink and opaque.
        (
            ["1 lb shrimp"],
            "Cook until the shrimp are pink and opaque in the center (about 3 minutes).",
            "fish-free",
            "Cook until cooked through (about 3 minutes).",
        ),
        (
            ["1 lb shrimp"],
            "Cook until the shrimp are pink and opaque in the center (about 3 minutes).",
            "vegetarian",
            "Cook until golden (about 3 minutes).",
        ),
        (
            ["1 lb salmon"],
            "Roast for 15 minutes, or until the salmon easily flakes apart with a fork.",
            "fish-free",
            "Roast for 15 minutes, or until cooked through.",
        ),
        # Plant stand-ins have no bones or skin.
        (
            ["2 lb beef chuck"],
            "Remove the meat from the broth and cut into chunks. Remove any bones.",
            "vegetarian",
            "Remove the seitan from the broth and cut into chunks.",
        ),
        (
            ["1 can salmon"],
            "Drain the salmon well and if desired, remove any skin and bones from the salmon.",
            "vegan",
            "Drain the tofu well.",
        ),
        # Juice does not burn: the flambé and its gas-stove warning go.
        (
            ["1/4 cup cognac"],
            (
                "Turn off the heat if using a gas stove. Carefully pour in the Cognac and ignite with a "
                "long lighter to burn off the alcohol (optional, but fun!). Once the flame subsides, "
                "return the pan to the heat."
            ),
            "alcohol-free",
            "Carefully pour in the apple juice. After a minute, return the pan to the heat.",
        ),
        # Agar sets only once it has boiled.
        (
            ["1 tbsp gelatin"],
            "Gently warm the liquid over low heat until the gelatin dissolves.",
            "vegetarian",
            "Bring the liquid to a boil and simmer 2 minutes, stirring, until the agar dissolves.",
        ),
        # Aquafaba holds peaks later than egg whites.
        (
            ["4 egg whites"],
            "Beat the egg whites to soft peaks, about 1-2 minutes on medium-high speed.",
            "egg-free",
            "Beat the aquafaba to soft peaks, about 5 to 10 minutes on medium-high speed.",
        ),
        # An egg and yolks become one count of flax eggs.
        (
            ["1 egg", "5 egg yolks"],
            "Whisk the lemon juice, 1 egg, 5 yolks and salt until smooth.",
            "egg-free",
            "Whisk the lemon juice, 6 flax eggs and salt until smooth.",
        ),
    ],
)
def test_cues_a_swap_makes_untrue_are_rewritten(lines, step, constraint, expected):
    [(adapted, _)] = _adapted(lines, [step], constraint)
    assert adapted == expected
    assert not text_violations(adapted, [constraint])


def test_flax_eggs_are_made_not_separated():
    steps = [
        "Separate the egg yolks and whites into two bowls. Set yolks aside.",
        "Make sure there are no yolk specks in the egg whites, and make sure the bowl is clean.",
    ]
    adapted = _adapted(["4 eggs"], steps, "egg-free")
    assert adapted[0][0].startswith("Make the flax eggs.")
    assert "specks" not in adapted[1][0] and adapted[1][0].startswith("Make sure the bowl")


def test_a_cue_never_empties_a_step():
    steps = ["Skim: remove any bones."]
    [(adapted, _)] = _adapted(["2 lb beef"], steps, "vegetarian")
    assert (
        adapted
        == substitute_recipe(make_recipe(["2 lb beef"], steps), "vegetarian").recipe.steps[0]
    )


def test_aquafaba_note_only_where_a_step_whips_without_a_time():
    steps = ["Whip the egg whites to stiff peaks.", "Fold in the egg whites."]
    adapted = _adapted(["3 egg whites"], steps, "egg-free")
    assert [notes for _, notes in adapted] == [
        ["Aquafaba takes longer to whip: beat it 5 to 10 minutes for stiff peaks."],
        [],
    ]


def test_half_and_half_written_with_an_ampersand_is_dairy():
    assert text_violations("Then add 1 cup half & half.", ["dairy-free"])
    guided = substitute_recipe(
        make_recipe(["1 cup half & half"], ["Add the half & half."]), "vegan"
    )
    assert guided.recipe.steps == ["Add the oat cream."]


@pytest.mark.parametrize(
    "lines,steps,constraint,notes",
    [
        # The note goes where the stand-in takes the place of the food its source step named.
        (
            ["1 lb cod", "1 cup chicken stock"],
            ["Simmer the chicken stock.", "Sear the cod for 2 minutes a side."],
            "fish-free",
            [[], ["Cook the chicken through, until no longer pink inside (165°F)."]],
        ),
        (
            ["1 cup buttermilk"],
            ["Whisk the buttermilk into the flour."],
            "dairy-free",
            [["Stir the lemon juice into the soymilk and let it stand 5 minutes to sour."]],
        ),
        (
            ["1 cup heavy cream"],
            ["Whip the cream to stiff peaks."],
            "dairy-free",
            [["Chill the coconut cream overnight and whip only its thick top layer."]],
        ),
        # Vegan cheese melting in the oven is covered; stirred into a sauce it is not.
        (
            ["1 cup shredded cheddar cheese"],
            ["Stir in the cheddar cheese until melted.", "Top with cheddar; bake until bubbly."],
            "dairy-free",
            [
                [],
                [
                    (
                        "Vegan cheese melts slowly: cover the dish with foil for the first few minutes in the oven."
                    )
                ],
            ],
        ),
        # Tofu for chicken and for shrimp in one step: one note.
        (
            ["1 lb chicken", "1 lb shrimp"],
            ["Cook the chicken and shrimp."],
            "vegetarian",
            [[PRESS_TOFU]],
        ),
    ],
)
def test_method_notes_of_a_swap(lines, steps, constraint, notes):
    assert [n for _, n in _adapted(lines, steps, constraint)] == notes


def test_a_fish_temperature_becomes_a_chicken_one_and_light_words_stay():
    [(step, _)] = _adapted(
        ["1 lb salmon"],
        [
            "Grill the salmon until it reaches 130F; the salmon should be between 130 to 135 degrees F."
        ],
        "fish-free",
    )
    assert step == "Grill the chicken until it reaches 165°F; the chicken should be 165°F."
    light = "Add the light soy sauce and the cognac, beat until light and fluffy."
    [(step, _)] = _adapted(["2 tbsp cognac"], [light], "alcohol-free")
    assert step == light.replace("cognac", "apple juice")


def test_nut_flavourings_and_sauces_keep_their_kind():
    guided = substitute_recipe(
        make_recipe(["1 tsp almond essence"], ["Add the almond essence and the peanut sauce."]),
        "nut-free",
    )
    assert guided.recipe.steps == ["Add the vanilla essence and the sunflower seed butter sauce."]


def test_a_mass_stand_in_takes_a_singular_verb():
    steps = ["Cook until the shrimp are pink and opaque, then check the shrimp are hot."]
    [(step, _)] = _adapted(["1 lb shrimp"], steps, "fish-free")
    assert step == "Cook until cooked through, then check the chicken is hot."


def test_no_note_names_a_food_any_constraint_forbids():
    from rrt.recipes.tagger import CONSTRAINTS

    for note in NOTES:
        # Chicken stands in for fish only under fish-free; every other stand-in is plant food.
        obeyed = ["fish-free"] if note.kind == "chicken_for_fish" else CONSTRAINTS
        assert not text_violations(note.text, obeyed), note.text


def test_a_swap_repeated_in_every_step_is_read_once_a_step():
    from rrt.recipes.cook_notes import swap_kinds

    steps = ["milk/" * 199 + "milk"] * 6
    guided = substitute_recipe(make_recipe(["1 cup milk"], steps), "vegan")
    assert len(guided.substitutions) > 1000
    swap_kinds.cache_clear()
    adapt_steps(steps, guided.recipe.steps, guided.substitutions, ["vegan"])
    info = swap_kinds.cache_info()
    assert info.hits + info.misses <= len(steps)


@pytest.mark.parametrize(
    "lines,steps,constraint,expected",
    [
        # Rendered fat that a plant stand-in never gives: the sentence goes, the step stays.
        (
            ["1.5 lbs pork belly"],
            [
                "Air fry until crispy. Drain any rendered fat from the drawer halfway through cooking."
            ],
            "vegan",
            "Air fry until crispy.",
        ),
        # No skin or bones to take out before chopping.
        (
            ["1 chicken breast"],
            ["When cool enough to handle, remove skin and bones and chop or shred into pieces."],
            "vegan",
            "When cool enough to handle, chop or shred into pieces.",
        ),
        # No fillet, no skin side, and tofu crumbles where fish flakes.
        (
            ["2 lbs salmon"],
            ["Slice the filet into large chunks. Place the salmon skin-side down in the pan."],
            "vegetarian",
            "Slice the tofu into large chunks. Place the tofu in the pan.",
        ),
        (
            ["2 lbs salmon"],
            ["Flake the salmon with a fork."],
            "vegetarian",
            "Crumble the tofu with a fork.",
        ),
        (["4 cod fillets"], ["Season each fillet."], "fish-free", "Season each piece of chicken."),
    ],
)
def test_a_cue_of_the_swapped_food_s_body_goes_with_it(lines, steps, constraint, expected):
    [(adapted, _)] = _adapted(lines, steps, constraint)
    assert adapted == expected


def test_fat_and_skin_stay_where_the_meat_stays():
    steps = [
        "Air fry until crispy. Drain any rendered fat from the drawer halfway through cooking."
    ]
    assert [s for s, _ in _adapted(["1.5 lbs pork belly"], steps, "dairy-free")] == steps

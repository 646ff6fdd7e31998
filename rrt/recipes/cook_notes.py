"""Cues and method notes that follow from a swap: what a cook changes in a step besides the food.

The guide swaps foods; a cook also changes what the swap makes untrue. Plant-based meat leaves no
fat to drain, is never pink and has no bones; tofu in place of fish turns golden, not flaky, and
chicken is cooked through; tofu is pressed first; flax eggs are made, not separated, and stand to
thicken; aquafaba whips more slowly than egg whites; agar must boil; juice does not flambé. Each rule is a row of a table: the kind of
swap it follows (`SWAP_KINDS`, told from the swapped food's category and its stand-in's words), a
pattern in the step, and what the pattern becomes; notes are rows too, said once a recipe:

    adapt_step("Brown the beef; drain off the fat.", "Brown the seitan; drain off the fat.",
               substitutions, ["vegan"])  -> ("Brown the seitan.", [])
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from rrt.recipes.substitutions import Substitution
from rrt.recipes.tagger import scan_text

# Stand-ins that are no pieces of meat: a broth or a fat has no fat to drain nor pink to lose.
NOT_PIECES = ("broth", "stock", "bouillon", "oil", "shortening", "smoked tofu")


@dataclass(frozen=True)
class SwapKind:
    """A kind of swap: the food category it replaces, words one of which its stand-in holds, and
    words none of which it may hold."""

    category: str
    stand_in_words: tuple[str, ...]
    not_words: tuple[str, ...] = NOT_PIECES


PLANT_WORDS = (
    "plant-based",
    "seitan",
    "tofu",
    "tempeh",
    "jackfruit",
    "imitation",
    "vegan",
    "vegetarian",
    "meatless",
    "lentils",
    "mushrooms",
)
# Vegan cheeses a step melts (cream cheese, parmesan and feta are not melted on top of a dish).
MELTING_CHEESES = tuple(
    f"vegan {c}"
    for c in (
        "cheese",
        "cheddar",
        "mozzarella",
        "jack",
        "monterey jack",
        "pepper jack",
        "swiss",
        "provolone",
        "gruyere",
        "gruyère",
        "fontina",
        "colby",
        "american cheese",
    )
)
SWAP_KINDS = {
    "plant_meat": SwapKind("meat", PLANT_WORDS),
    "tofu_for_meat": SwapKind("meat", ("tofu",)),
    "tofu_for_fish": SwapKind("fish", ("tofu",)),
    "plant_for_fish": SwapKind("fish", PLANT_WORDS + ("chickpeas", "hearts of palm")),
    "chicken_for_fish": SwapKind("fish", ("chicken", "turkey")),
    "flax_egg": SwapKind("egg", ("flax egg", "flax eggs")),
    "aquafaba": SwapKind("egg", ("aquafaba",)),
    "tofu_for_egg": SwapKind("egg", ("tofu",)),
    "agar": SwapKind("gelatin", ("agar",)),
    "vegan_melting_cheese": SwapKind("dairy", MELTING_CHEESES),
    "soured_soymilk": SwapKind("dairy", ("soured soymilk",)),
    "coconut_cream": SwapKind("dairy", ("coconut cream", "coconut whipped cream")),
    # Any stand-in of a spirit or wine: juice, broth or extract neither burns nor cooks off.
    "no_alcohol": SwapKind(
        "alcohol",
        (
            "juice",
            "broth",
            "stock",
            "extract",
            "water",
            "vinegar",
            "non-alcoholic",
            "syrup",
            "espresso",
            "cider",
        ),
        (),
    ),
}


@dataclass(frozen=True)
class Cue:
    """A pattern in a step that a kind of swap makes untrue, and what it becomes ("" drops it;
    "{stand_in}" is the swap's stand-in, as a step names it).
    `anywhere`: the cue speaks of the swapped food even in a step that does not name it
    ("Cook until no longer pink.")."""

    kind: str
    pattern: str
    becomes: str | Callable[[re.Match], str]
    anywhere: bool = False


_FAT = (
    r"(?:off\s+|away\s+)?(?:any\s+|the\s+|all\s+|excess\s+|the\s+excess\s+)?(?:rendered\s+)?"
    r"(?:fat|grease|drippings)"
)
# "... from the drawer halfway through cooking"
_FAT_WHERE = r"(?:\s+from\s+the\s+\w+)?(?:\s+(?:halfway|partway)\s+through(?:\s+(?:cooking|the\s+cook\s+time))?)?"
# "until the shrimp are pink and opaque in the center", "until the fish flakes easily with a fork"
_FISH_DONE = (
    r"until\s+(?:(?:it|they|the\s+[\w-]+(?:\s+[\w-]+)?)\s+(?:is|are)\s+)?"
    r"(?:crisp\s+and\s+flaky|flaky|pink\s+and\s+opaque|opaque|pink)"
    r"(?:\s+(?:in\s+the\s+(?:center|centre|middle)|throughout|all\s+the\s+way\s+through))?"
    r"|until\s+(?:it|they|(?:the\s+)?[\w-]+(?:\s+[\w-]+)?)\s+(?:just\s+)?(?:easily\s+)?"
    r"(?:(?:begins?|starts?)\s+to\s+)?flakes?\b(?:\s+apart)?(?:\s+easily)?(?:\s+with\s+a\s+fork)?"
)
_MASS_ARE = r"\b(tofu|seitan|tempeh|chicken|aquafaba|jackfruit|(?:plant-based\s+)?(?:ground\s+)?meat)\s+are\b"
# A clause or sentence that takes out bones or skin: "and if desired, remove any skin and bones".
_BONES = (
    r"\s*(?:,\s*)?(?:and\s+)?(?:if\s+desired,?\s*)?remove\s+(?:any\s+|the\s+)?"
    r"(?:skin\s+and\s+bones|bones\s+and\s+skin|bones|skin)(?:\s+from\s+the\s+[\w-]+)?"
    r"(?=\s*[.!,;])"
)
_BONES_AND = (
    r"(?<![\w-])remove\s+(?:any\s+|the\s+)?(?:skin\s+and\s+bones|bones\s+and\s+skin|bones|skin)"
    r"\s+and\s+(?=(?:chop|shred|cut|slice|dice|pull|tear)\b)"
)
# "and ignite with a long lighter to burn off the apple juice (optional, but fun!)"
_FLAME = (
    r"\s*(?:,\s*)?(?:and\s+|then\s+)?(?:carefully\s+)?(?:ignite|flamb(?:e|é|ée)|set\s+(?:it\s+)?(?:alight|on\s+fire)|light\s+it)\b"
    r"[^.!?()]*(?:\([^)]*\))?"
)


def _add_counts(match: re.Match) -> str:
    return f"{int(match.group(1)) + int(match.group(2))} flax eggs"


CUES = (
    # "Brown the beef; drain off the fat." / "..., then drain the grease from the pan"
    Cue(
        "plant_meat",
        r"\s*[,;]?\s*(?:and\s+|then\s+)+drain(?:ing)?\s+" + _FAT + _FAT_WHERE,
        "",
        anywhere=True,
    ),
    Cue(
        "plant_meat",
        r"\s*[,;]\s*drain(?:ing)?\s+" + _FAT + _FAT_WHERE,
        "",
        anywhere=True,
    ),
    # "Drain the fat and add the onions." -> "Add the onions."
    Cue(
        "plant_meat",
        r"(?:(?<=^)|(?<=[.!?]\s))drain\s+" + _FAT + _FAT_WHERE + r"\s*(?:,\s*)?(?:and|then)\s+",
        "",
        anywhere=True,
    ),
    # A step that only drains the fat says there is none; a sentence of a longer step goes.
    Cue(
        "plant_meat",
        r"^\s*drain\s+" + _FAT + _FAT_WHERE + r"\s*[.!]?\s*$",
        "No fat to drain.",
        True,
    ),
    Cue(
        "plant_meat",
        r"(?:(?<=^)|(?<=[.!?]\s))drain\s+" + _FAT + _FAT_WHERE + r"\s*[.!]\s*",
        "",
        anywhere=True,
    ),
    Cue(
        "plant_meat",
        r"until\s+(?:it\s+is\s+|they\s+are\s+)?no\s+longer\s+pink(?:\s+inside|\s+in\s+the\s+(?:center|middle))?",
        "until heated through and browned",
        anywhere=True,
    ),
    Cue(
        "plant_meat",
        r"until\s+(?:the\s+)?juices\s+run\s+clear",
        "until heated through and browned",
        anywhere=True,
    ),
    Cue(
        "plant_meat",
        r"until\s+(?:it\s+is\s+|they\s+are\s+)?cooked\s+through",
        "until heated through and browned",
    ),
    # Flax eggs are mixed, not cracked: "Crack the eggs into the bowl" -> "Add the flax eggs ...".
    Cue("flax_egg", r"\bcrack(?=\s+(?:in\s+)?(?:the\s+|\d+\s+)*flax\s+egg)", "add"),
    # "until pink and cooked through": the pink goes, the rest holds for any stand-in.
    *(
        Cue(kind, r"(?<=until\s)pink\s+and\s+(?=cooked)", "", anywhere=True)
        for kind in ("chicken_for_fish", "plant_for_fish")
    ),
    Cue("tofu_for_fish", _FISH_DONE, "until golden", anywhere=True),
    Cue("plant_for_fish", _FISH_DONE, "until heated through", anywhere=True),
    Cue("chicken_for_fish", _FISH_DONE, "until cooked through", anywhere=True),
    # A fish's inside temperature is too low for chicken (oven temperatures are higher).
    Cue(
        "chicken_for_fish",
        r"(?:\bbetween\s+)?\b1[0-5]\d(?:\s*(?:°|degrees)?\s*F?\s*(?:-|–|to)\s*1[0-5]\d)?\s*(?:°\s*|degrees\s+)?F\b",
        "165°F",
    ),
    # A stand-in named as one mass takes a singular verb where the shrimp or eggs took a plural.
    *(
        Cue(kind, _MASS_ARE, r"\1 is")
        for kind in ("plant_meat", "plant_for_fish", "chicken_for_fish", "aquafaba")
    ),
    # Plant stand-ins have no bones or skin: the sentence that removes them goes.
    *(Cue(kind, _BONES, "", anywhere=True) for kind in ("plant_meat", "plant_for_fish")),
    # "remove skin and bones and chop or shred" -> "chop or shred"
    *(Cue(kind, _BONES_AND, "", anywhere=True) for kind in ("plant_meat", "plant_for_fish")),
    *(
        Cue(kind, r"\s*,?\s*skin[-\s]sides?\s+(?:down|up)", "", anywhere=True)
        for kind in ("plant_meat", "plant_for_fish")
    ),
    # A plant stand-in or chicken has no fillets, and tofu crumbles where fish flakes.
    *(
        Cue(kind, pattern, becomes, anywhere=True)
        for kind in ("plant_for_fish", "chicken_for_fish")
        for pattern, becomes in (
            (r"\beach\s+(?:fish\s+)?fill?et\b", "each piece of {stand_in}"),
            (r"\b(the|your)\s+(?:fish\s+)?fill?ets?\b", r"\1 {stand_in}"),
        )
    ),
    Cue("plant_for_fish", r"\bflake\b(?=\s+(?:the\s+|it\b|them\b))", "crumble"),
    # "Separate the eggs" with flax eggs: they are made, not separated.
    Cue(
        "flax_egg",
        r"\bseparate\s+((?:the\s+|\d+\s+)*flax\s+eggs?)(?:\s+and\s+(?:the\s+)?whites)?"
        r"(?:\s+into\s+(?:two|2|separate)\s+bowls)?",
        r"make \1",
    ),
    Cue(
        "flax_egg",
        r"there\s+(?:are|is)\s+no\s+(?:flax\s+egg|yolk)\s+specks?\s+in\s+the\s+aquafaba"
        r"(?:\s*,\s*and\s+make\s+sure\s+|\s*[.!])",
        "",
    ),
    # "1 flax egg, 5 flax eggs" (an egg and yolks): one count.
    Cue(
        "flax_egg",
        r"\b(\d+)\s+flax\s+eggs?\s*(?:,\s*|\s+and\s+)(\d+)\s+flax\s+eggs?\b",
        _add_counts,
    ),
    # Tofu in place of scrambled eggs is mashed, not beaten, and is heated through, not set.
    Cue("tofu_for_egg", r"\b(?:whisk|beat)\b(?=\s+(?:the\s+)?tofu\b)", "mash"),
    Cue(
        "tofu_for_egg",
        r"\bscramble\s+until\s+(?:softly\s+|just\s+|barely\s+|almost\s+)?set\b",
        "cook, stirring, until heated through and lightly golden",
        anywhere=True,
    ),
    Cue(
        "tofu_for_egg",
        r"\buntil\s+(?:the\s+)?(?:eggs?\s+(?:are|is)\s+)?(?:softly\s+|just\s+|barely\s+|almost\s+)?set\b",
        "until heated through",
    ),
    # Agar sets only once it has boiled; gelatin is warmed gently.
    Cue(
        "agar",
        r"gently\s+warm\s+(?:the\s+)?(\w+)\s+over\s+low\s+heat\s+until\s+(?:the\s+)?agar\s+"
        r"dissolves",
        r"bring the \1 to a boil and simmer 2 minutes, stirring, until the agar dissolves",
        anywhere=True,
    ),
    # Aquafaba takes longer than egg whites to hold peaks.
    Cue(
        "aquafaba",
        r"((?:soft|stiff|firm|glossy)\s+peaks(?:\s+form)?),?\s+(?:about|roughly|around|approximately)\s+"
        r"\d+(?:\s*(?:-|–|to)\s*\d+)?\s+minutes?",
        r"\1, about 5 to 10 minutes",
    ),
    # Juice and broth do not burn: the flambé goes, its safety step with it.
    Cue("no_alcohol", _FLAME, "", anywhere=True),
    Cue(
        "no_alcohol",
        r"(?:(?<=^)|(?<=[.!?:]\s))turn\s+off\s+the\s+heat\s+if\s+(?:you\s+are\s+)?using\s+a\s+"
        r"gas\s+(?:stove|burner|range)\s*[.!]\s*",
        "",
        anywhere=True,
    ),
    Cue(
        "no_alcohol",
        r"once\s+the\s+flames?\s+(?:has\s+|have\s+)?(?:subsides?|subsided|dies?\s+down|died\s+down|"
        r"goes?\s+out|gone\s+out)",
        "after a minute",
        anywhere=True,
    ),
    Cue(
        "no_alcohol",
        r"\s*(?:,\s*)?(?:to|and)\s+(?:burn|cook)\s+off\s+the\s+alcohol",
        "",
        anywhere=True,
    ),
)


@dataclass(frozen=True)
class Note:
    """A short method note a kind of swap calls for, said once a recipe where a step names it."""

    kind: str
    text: str
    before: bool = False  # said before its step ("... first."), not after it
    when: str = ""  # a pattern the step must hold besides its stand-in ("" for any step)
    first: bool = False  # prep that takes a while: said before the recipe's first step instead


PRESS_TOFU = "Press the tofu for 15 minutes before you start."
NOTES = (
    Note("tofu_for_meat", PRESS_TOFU, before=True, first=True),
    Note("tofu_for_fish", PRESS_TOFU, before=True, first=True),
    # Said before the step that first uses them: a flax egg is made and thickened before it goes in.
    Note(
        "flax_egg",
        "Stir the ground flaxseed into the water and let it stand 5 minutes to thicken.",
        before=True,
    ),
    Note(
        "soured_soymilk",
        "Stir the lemon juice into the soymilk and let it stand 5 minutes to sour.",
        before=True,
    ),
    Note(
        "coconut_cream",
        "Chill the coconut cream overnight and whip only its thick top layer.",
        before=True,
        when=r"\b(?:peaks?|whip(?:ped|ping)?)\b",
    ),
    Note(
        "vegan_melting_cheese",
        "Vegan cheese melts slowly: cover the dish with foil for the first few minutes in the oven.",
        before=True,
        # In the oven only: a sauce that melts it is stirred, not covered.
        when=r"^(?=.*\b(?:bake[sd]?|baking|oven|broil\w*)\b).*\b(?:melt(?:s|ed|ing)?|bubbl\w*|gooey)\b",
    ),
    Note(
        "chicken_for_fish",
        "Cook the chicken through, until no longer pink inside (165°F).",
        when=r"\b(?:cook|bake|roast|fry|sear|grill|broil|saut[eé]|poach|simmer|pan-fry)\w*\b",
    ),
    Note(
        "aquafaba",
        "Aquafaba takes longer to whip: beat it 5 to 10 minutes for stiff peaks.",
        # A step that gives its own time has it from the cue above.
        when=r"^(?!.*\bminutes?\b).*\b(?:peaks?|stiff|whip(?:ped|ping)?)\b",
    ),
)
_WHEN = {n.text: re.compile(n.when, re.IGNORECASE) for n in NOTES if n.when}
_FIRST = frozenset(n.text for n in NOTES if n.first)
_BEFORE = frozenset(n.text for n in NOTES if n.before)


def place_notes(step: str, notes: list[str]) -> str:
    """A step with its notes as sentences of their own: a note of what to do first before it,
    the others after it."""
    before = [n for n in notes if n in _BEFORE]
    return " ".join([*before, step, *(n for n in notes if n not in _BEFORE)])


_COMPILED = tuple((cue, re.compile(cue.pattern, re.IGNORECASE)) for cue in CUES)


def swap_fields(sub: Substitution | Mapping) -> tuple[str, str, str, str, int]:
    """A substitution as (original, replacement, constraint, field, index), from the guide's
    object or its record form."""
    if isinstance(sub, Mapping):
        return (
            sub["original"],
            sub["replacement"],
            sub.get("constraint", ""),
            sub.get("field", ""),
            sub.get("index", -1),
        )
    return sub.from_text, sub.to_text, sub.constraint, sub.field, sub.index


def _swap_words(sub: Substitution | Mapping) -> tuple[str, str, str]:
    return swap_fields(sub)[:3]


def _words(words: Iterable[str]) -> re.Pattern:
    return re.compile(
        r"\b(?:" + "|".join(sorted(map(re.escape, words), key=len, reverse=True)) + r")\b",
        re.IGNORECASE,
    )


_STAND_INS = {name: _words(kind.stand_in_words) for name, kind in SWAP_KINDS.items()}


@functools.lru_cache(maxsize=4096)
def swap_kinds(original: str, replacement: str) -> dict[str, list[str]]:
    """The kinds of swap one substitution is, each with the swapped food's words ("ground beef" ->
    "plant-based ground meat": plant_meat, ["ground beef"])."""
    kinds = {}
    for name, kind in SWAP_KINDS.items():
        if any(word in replacement.lower() for word in kind.not_words):
            continue
        foods = [original[m.start : m.end] for m in scan_text(original, kind.category)]
        if foods and _STAND_INS[name].search(replacement):
            kinds[name] = foods
    return kinds


def _tidy(step: str) -> str:
    step = re.sub(r"\s+([.,;!?])", r"\1", re.sub(r"\s{2,}", " ", step)).strip()
    step = re.sub(r"([,;])\s*([.!?])", r"\2", step)
    step = re.sub(r"(?<!\.)([.!?])\s*\.(?!\.)", r"\1", step)
    # A sentence whose opening words went starts with a capital.
    return re.sub(r"(^|[.!?]\s+)([a-z])", lambda m: m.group(1) + m.group(2).upper(), step)


def adapt_step(
    source_step: str,
    guided_step: str,
    substitutions: Iterable[Substitution | Mapping],
    constraints: Iterable[str],
    said: set[str] | None = None,
) -> tuple[str, list[str]]:
    """The guide's step with the cues its recipe's swaps make untrue rewritten, and the notes it
    calls for; notes in `said` are not said again, and those returned are added to it."""
    wanted = set(constraints)
    named: dict[str, bool] = {}
    shown: set[str] = set()  # kinds whose stand-in the step names
    noted: set[str] = set()  # ... in place of the food its source step named: a note is said there
    stand_in: dict[str, str] = {}  # each kind's stand-in as a step names it: the shortest
    for sub in substitutions:
        original, replacement, constraint = _swap_words(sub)
        if constraint and wanted and constraint not in wanted:
            continue
        for kind, foods in swap_kinds(original, replacement).items():
            if len(replacement) < len(stand_in.get(kind, replacement + " ")):
                stand_in[kind] = replacement
            in_source = bool(_words(foods).search(source_step))
            if _STAND_INS[kind].search(guided_step):
                shown.add(kind)
                if in_source:
                    noted.add(kind)
            named[kind] = named.get(kind, False) or kind in shown or in_source
    step = guided_step
    for cue, pattern in _COMPILED:
        if cue.kind in named and (cue.anywhere or named[cue.kind]):
            becomes = cue.becomes
            if isinstance(becomes, str) and "{stand_in}" in becomes:
                becomes = becomes.replace(
                    "{stand_in}", stand_in[cue.kind].lower().replace("\\", r"\\")
                )
            step = pattern.sub(becomes, step)
    step = _tidy(step) if step != guided_step else step
    if len(re.findall(r"\w+", step)) < 3:
        # A cue took the step's whole content ("Skim: ..."): the guide's step reads better.
        step = guided_step
    said = set() if said is None else said
    # Two kinds may share a note (tofu for meat and for fish): it is said once.
    notes = dict.fromkeys(
        n.text
        for n in NOTES
        if n.kind in noted
        and n.text not in said
        and (n.text not in _WHEN or _WHEN[n.text].search(step))
    )
    said.update(notes)
    return step, list(notes)


def adapt_steps(
    source_steps: list[str],
    guided_steps: list[str],
    substitutions: Iterable[Substitution | Mapping],
    constraints: Iterable[str],
) -> list[tuple[str, list[str]]]:
    """`adapt_step` over a recipe's steps in order, each note said once; a note of prep that
    takes a while (press the tofu) before the first step, so the cook does it before starting."""
    # A recipe repeats its swaps (a food named in every step): each distinct swap is read once.
    subs = list({_swap_words(sub): sub for sub in substitutions}.values())
    wanted, said = list(constraints), set()
    adapted = [
        adapt_step(source, guided, subs, wanted, said)
        for source, guided in zip(source_steps, guided_steps, strict=True)
    ]
    first = [n for _, notes in adapted for n in notes if n in _FIRST]
    if not first:
        return adapted
    adapted = [(step, [n for n in notes if n not in _FIRST]) for step, notes in adapted]
    adapted[0] = (adapted[0][0], first + adapted[0][1])
    return adapted

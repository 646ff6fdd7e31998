"""Constrained decoding guard: token classes, verdicts while a step is written, and a sampler
that keeps trying to write forbidden foods and never gets one through."""

from __future__ import annotations

import dataclasses
import random

import pytest
from conftest import SAMPLE

from rrt.modelling.constrained import Verdict, ViolationGuard, guard_text, term_last_words
from rrt.modelling.models import train_tiny_tokenizer
from rrt.recipes.loaders import read_recipes
from rrt.recipes.paper_format import END_INST, INST
from rrt.recipes.tagger import parse_constraints, text_violations


@pytest.fixture(scope="module")
def tokenizer():
    texts = [" ".join([r.title, *r.ingredients, *r.steps]) for r in read_recipes([str(SAMPLE)])]
    return train_tiny_tokenizer(texts, 2000)


@pytest.fixture(scope="module")
def stop_ids(tokenizer):
    return {
        tokenizer.eos_token_id,
        tokenizer.convert_tokens_to_ids(INST),
        tokenizer.convert_tokens_to_ids(END_INST),
    }


def guard(tokenizer, stop_ids, constraints):
    return ViolationGuard(tokenizer, constraints, stop_ids)


def write(g: ViolationGuard, tokenizer, text: str, stop: bool = False):
    """Feed a text's tokens one by one: (text accepted so far, rejected piece, verdict)."""
    ids = tokenizer.encode(text) + ([tokenizer.eos_token_id] if stop else [])
    written = ""
    for token_id in ids:
        verdict = g.check(written, token_id)
        if verdict is not Verdict.OK:
            return written, g.piece(token_id), verdict
        written += g.piece(token_id)
    return written, None, Verdict.OK


def test_pieces_and_word_end_classes(tokenizer, stop_ids):
    g = guard(tokenizer, stop_ids, ["vegan"])
    the, dot, inst = (tokenizer.convert_tokens_to_ids(t) for t in ("Ġthe", ".", INST))
    letters = tokenizer.encode("eggplant")[-1]
    assert g.piece(the) == " the" and g.piece(dot) == "." and g.piece(inst) == ""
    assert g.piece(tokenizer.eos_token_id) == "" and g.piece(tokenizer.pad_token_id) == ""
    ends = set(g.word_end_ids)
    assert {the, dot, inst, tokenizer.eos_token_id, tokenizer.pad_token_id} <= ends
    assert letters not in ends and g.piece(letters)[:1].isalpha()
    assert g.word_end_ids == sorted(ends)
    for token_id in range(len(tokenizer)):
        piece = g.piece(token_id)
        assert (token_id in ends) == (piece == "" or not (piece[0].isalnum() or piece[0] == "_")), (
            piece
        )


def test_last_words_cover_plurals_and_multiword_terms():
    words = term_last_words(["vegan", "nut-free"])
    assert {
        "egg",
        "eggs",
        "butter",
        "cream",
        "honey",
        "dog",
        "anchovies",
        "walnuts",
        "pesto",
    } <= words
    assert "plant" not in words and "the" not in words
    assert "eggs" not in term_last_words(["dairy-free"])


def test_whisk_the_eggs_is_stopped_when_the_word_ends(tokenizer, stop_ids):
    g = guard(tokenizer, stop_ids, ["vegan"])
    written, piece, verdict = write(g, tokenizer, "Whisk the eggs and milk.")
    assert written == "Whisk the eggs"
    assert piece.startswith(" ") and verdict is Verdict.BAN_WORD_END
    assert (
        g.check("Add the eg", tokenizer.encode("g")[0]) is Verdict.OK
    )  # an unfinished word is no violation


def test_violation_inside_one_token_bans_that_token(tokenizer, stop_ids):
    g = guard(tokenizer, stop_ids, ["vegan"])
    milk = tokenizer.convert_tokens_to_ids("Ġmilk")
    assert g.piece(milk) == " milk"
    assert (
        g.check("Whisk the flour and", milk) is Verdict.OK
    )  # " milk" may still become " milkweed"
    assert (
        g.check("Whisk the flour and milk", tokenizer.convert_tokens_to_ids("."))
        is Verdict.BAN_WORD_END
    )
    # Byte-level BPE never glues letters to punctuation, other tokenizers do: pretend " milk." is one token.
    # The tables are the tokenizer's, shared by its guards: this guard gets a changed copy of its own.
    pieces, crosses = list(g.tables.pieces), list(g.tables.crosses)
    pieces[milk], crosses[milk] = " milk.", True
    g.tables = dataclasses.replace(g.tables, pieces=pieces, crosses=crosses)
    assert g.check("Whisk the flour and", milk) is Verdict.BAN_TOKEN
    assert g.check("Whisk the flour and oat", milk) is Verdict.OK


@pytest.mark.parametrize(
    "text,constraints",
    [
        ("Slice the eggplant.", ["egg-free"]),
        ("Slice the eggplant.", ["vegan"]),
        ("Stir in peanut butter.", ["dairy-free"]),
        ("Stir in peanut butter.", ["egg-free"]),
        ("Grate nutmeg over the coconut milk.", ["vegan", "nut-free"]),
        ("Add the butternut squash and soy milk.", ["vegan", "nut-free"]),
    ],
)
def test_harmless_mentions_pass(tokenizer, stop_ids, text, constraints):
    g = guard(tokenizer, stop_ids, constraints)
    assert write(g, tokenizer, text, stop=True) == (text, None, Verdict.OK)


@pytest.mark.parametrize(
    "text,constraints,written",
    [
        ("Stir in peanut butter.", ["nut-free"], "Stir in peanut butter"),
        ("Stir in peanut butter.", ["vegan", "nut-free"], "Stir in peanut butter"),
        ("Toss with walnuts, then drizzle honey.", ["vegan", "nut-free"], "Toss with walnuts"),
        (
            "Toss with walnuts, then drizzle honey.",
            ["vegan"],
            "Toss with walnuts, then drizzle honey",
        ),
        ("Fry the bacon.", ["vegetarian", "egg-free"], "Fry the bacon"),
        ("Fry the bacon.", ["egg-free", "nut-free"], "Fry the bacon."),
    ],
)
def test_multiple_constraints(tokenizer, stop_ids, text, constraints, written):
    g = guard(tokenizer, stop_ids, constraints)
    assert write(g, tokenizer, text, stop=True)[0] == written


def test_stop_token_completes_the_last_word(tokenizer, stop_ids):
    g = guard(tokenizer, stop_ids, ["vegan"])
    assert g.check("Add butter", tokenizer.eos_token_id) is Verdict.BAN_WORD_END
    assert g.check("Add butter", tokenizer.convert_tokens_to_ids(END_INST)) is Verdict.BAN_WORD_END
    assert g.check("Add butter", tokenizer.convert_tokens_to_ids("Ġ")) is Verdict.BAN_WORD_END
    assert g.check("Add butternut", tokenizer.eos_token_id) is Verdict.OK
    assert g.check("Add salt", tokenizer.eos_token_id) is Verdict.OK
    assert write(g, tokenizer, "Add butter", stop=True) == ("Add butter", "", Verdict.BAN_WORD_END)


def test_accepts_a_constraint_spec_string(tokenizer, stop_ids):
    g = ViolationGuard(tokenizer, "vegan,nut-free", stop_ids)
    assert g.constraints == ["vegan", "nut-free"]
    with pytest.raises(ValueError):
        ViolationGuard(tokenizer, "keto", stop_ids)


def test_padded_model_vocabulary(tokenizer, stop_ids):
    g = ViolationGuard(tokenizer, ["vegan"], stop_ids, vocab_size=len(tokenizer) + 8)
    extra = len(tokenizer) + 3
    assert g.piece(extra) == "" and extra in g.word_end_ids
    assert (
        g.check("Add salt", extra) is Verdict.OK
        and g.check("Add butter", extra) is Verdict.BAN_WORD_END
    )


@pytest.mark.parametrize(
    "text,constraints,expected",
    [
        ("Whisk the eggs and milk.", "vegan", "Whisk the"),
        ("Whisk the eggs and milk.", "dairy-free", "Whisk the eggs and"),
        ("Slice the eggplant.", "vegan", "Slice the eggplant."),
        ("Add goat cheese and salt.", "vegan", "Add"),  # cutting "cheese" exposes "goat": cut again
        ("Add butter", ["vegan", "nut-free"], "Add"),
        ("", "vegan", ""),
    ],
)
def test_guard_text_cuts_before_the_first_violation(text, constraints, expected):
    assert guard_text(text, constraints) == expected
    assert not text_violations(expected, parse_constraints(constraints))


ATTACKS = [
    " eggs",
    " egg",
    " milk",
    " butter",
    " cheese",
    " honey",
    " bacon",
    " chicken",
    " walnuts",
    " peanut",
    " almond",
    " cream",
    " salmon",
    " anchovies",
    " yogurt",
    " mayo",
    " ghee",
]
CONSTRAINT_SETS = [
    ["vegan"],
    ["vegan", "nut-free"],
    ["egg-free"],
    ["dairy-free", "nut-free"],
    ["vegetarian"],
]


def sample_step(rng, tokenizer, g: ViolationGuard, stop_ids, obey: bool = True, max_tokens=40):
    """Random decoding that tries to write forbidden foods, obeying the guard's bans or not."""
    stop, specials = tokenizer.eos_token_id, set(tokenizer.all_special_ids)
    attacks = [tokenizer.encode(a) for a in ATTACKS]
    plain = [i for i in range(len(tokenizer)) if i not in specials]
    text, plan, refusals = "", [], 0
    for _ in range(max_tokens):
        banned: set[int] = set()
        while True:
            if not plan and rng.random() < 0.3:
                plan = list(rng.choice(attacks)) + [
                    rng.choice(
                        [
                            stop,
                            tokenizer.convert_tokens_to_ids("."),
                            tokenizer.convert_tokens_to_ids(","),
                        ]
                    )
                ]
            wanted = plan.pop(0) if plan else (stop if rng.random() < 0.05 else rng.choice(plain))
            token = (
                wanted
                if wanted not in banned
                else rng.choice([i for i in plain if i not in banned])
            )
            verdict = g.check(text, token) if obey else Verdict.OK
            if verdict is Verdict.OK:
                break
            refusals += 1
            plan = []  # the attack was foiled; a fresh one may start
            banned |= {token} if verdict is Verdict.BAN_TOKEN else set(g.word_end_ids)
        if token in stop_ids:
            return text, refusals
        text += g.piece(token)
    # Out of tokens: the step ends here, so its last word is complete; fall back like the engine.
    if obey and g.check(text, stop) is not Verdict.OK:
        text = guard_text(text, g.constraints, g.held)
    return text, refusals


@pytest.mark.parametrize("constraints", CONSTRAINT_SETS, ids=lambda c: "+".join(c))
def test_simulated_decoding_never_writes_a_violation(tokenizer, stop_ids, constraints):
    rng = random.Random(7)
    g = guard(tokenizer, stop_ids, constraints)
    unguarded = [sample_step(rng, tokenizer, g, stop_ids, obey=False)[0] for _ in range(100)]
    assert sum(bool(text_violations(t, constraints)) for t in unguarded) > 10  # the attacks do work

    texts, refusals = zip(*(sample_step(rng, tokenizer, g, stop_ids) for _ in range(100)))
    assert sum(refusals) > 10
    assert [t for t in texts if text_violations(t, constraints)] == []
    assert sum(len(t) for t in texts) > 100 * 20  # steps still got written


def test_prefilter_never_changes_a_verdict(tokenizer, stop_ids):
    """The last-word pre-filter only skips tagger calls that would have found nothing."""
    constraints = ["vegan", "nut-free", "alcohol-free"]
    fast, exhaustive = (
        guard(tokenizer, stop_ids, constraints),
        guard(tokenizer, stop_ids, constraints),
    )
    exhaustive._completes_term_word = lambda text, candidate, complete: True
    verdicts = []
    for recipe in list(read_recipes([str(SAMPLE)]))[:40]:
        for step in recipe.steps:
            text = ""
            for token_id in tokenizer.encode(step) + [tokenizer.eos_token_id]:
                verdicts.append(fast.check(text, token_id))
                assert verdicts[-1] is exhaustive.check(text, token_id), (
                    text,
                    fast.piece(token_id),
                )
                # The guard's premise is a text without completed violations: restart after one.
                text = text + fast.piece(token_id) if verdicts[-1] is Verdict.OK else ""
    assert Verdict.BAN_WORD_END in verdicts and Verdict.OK in verdicts


class _Numbers:
    """A stream of fixed numbers for a draw (the row's seeded generator in the engine)."""

    def __init__(self, values):
        self.values = list(values)

    def random(self):
        return self.values.pop(0)


def _one_hot(size: int, token: int):
    import torch

    logits = torch.full((size,), -30.0)
    logits[token] = 10.0
    return logits


@pytest.mark.parametrize(
    "text, constraints, word",
    [
        ("Toss the goat cheese", ["vegan"], " goat"),
        ("Whisk the eggs", ["egg-free"], " eggs"),
        ("Add chicken", ["vegetarian"], " chicken"),
        ("Butter", ["dairy-free"], "Butter"),
    ],
)
def test_a_refused_word_is_taken_back_to_the_token_that_began_it(
    tokenizer, stop_ids, text, constraints, word
):
    from conftest import sampling

    from rrt.modelling.guarded_row import TAKEN_BACK, GuardedRow

    g = guard(tokenizer, stop_ids, constraints)
    row = GuardedRow(g, prompt_token=7, prompt_column=40, position=100)
    ids = tokenizer.encode(text)
    for i, token in enumerate(ids):
        assert g.check(row.text, token) is Verdict.OK
        row.accept(token)
        row.fed(41 + i)
    assert row.text == text and g.violation_start(text) == text.index(word.strip())
    cut = next(i for i in range(len(ids)) if tokenizer.decode(ids[i:]).startswith(word))
    period = tokenizer.convert_tokens_to_ids(".")
    settings = sampling(top_k=0, top_p=1.0, temperature=1.0)
    assert row.draw(_one_hot(len(tokenizer), period), settings, _Numbers([0.5])) == TAKEN_BACK
    assert row.tokens == ids[:cut] and row.text == tokenizer.decode(ids[:cut])
    assert row.bans == {cut: {ids[cut]}} and row.taken_back == 1
    # The token before the cut (or the prompt's last) is fed again at its old position; its old
    # column and every later one are masked.
    assert row.refeed == ((ids[cut - 1] if cut else 7), 100 + cut - 1)
    assert row.hidden == ([40] if not cut else []) + list(
        range(41 + max(cut - 1, 0), 41 + len(ids))
    )
    assert row.must_redraw()
    # At that index the banned token is never drawn again, even when the model wants nothing else.
    assert row.draw(_one_hot(len(tokenizer), ids[cut]), settings, _Numbers([0.5] * 30)) not in (
        ids[cut],
        TAKEN_BACK,
    )


def test_past_its_take_backs_a_row_only_lets_letters_follow(tokenizer, stop_ids, monkeypatch):
    from conftest import sampling

    from rrt.modelling import guarded_row

    monkeypatch.setattr(guarded_row, "TAKE_BACKS", 0)
    g = guard(tokenizer, stop_ids, ["egg-free"])
    row = guarded_row.GuardedRow(g, prompt_token=7, prompt_column=40, position=100)
    for token in tokenizer.encode("Whisk the eggs"):
        row.accept(token)
    token = row.draw(
        _one_hot(len(tokenizer), tokenizer.convert_tokens_to_ids(".")),
        sampling(top_k=0, top_p=1.0, temperature=1.0),
        _Numbers([0.5] * 30),
    )
    assert token is not None and not g.ends_word(token) and row.taken_back == 0


def test_a_tokenizer_s_guards_share_its_tables_and_are_kept_by_set_within_a_bound(tokenizer):
    """A replica's rewriters (one per candidates value) and every order of a request's constraints
    get one guard; however many sets requests name, at most GUARDS_KEPT guards stay, and all read
    one copy of the tokenizer's token tables."""
    import gc
    import itertools
    import weakref

    from conftest import make_rewriter, sampling

    from rrt.modelling.constrained import GUARDS_KEPT
    from rrt.modelling.models import build_model
    from rrt.modelling.rewriter import RewriteTask
    from rrt.recipes.lexicon import CONSTRAINTS

    lm = build_model("tiny", len(tokenizer), {"n_layer": 1, "n_head": 2, "n_embd": 16})
    rewriters = [
        make_rewriter(
            "contextual",
            lm,
            tokenizer,
            256,
            sampling(candidates=n),
            constrained=True,
            closed_foods=False,
        )
        for n in (1, 2, 10)
    ]
    source = {"title": "Toast", "ingredients": ["1 tbsp butter"], "steps": ["Toast the bread."]}

    def guard_of(rewriter, constraints):
        return rewriter.start(RewriteTask("t", list(constraints), source)).guard

    orders = itertools.permutations(["vegan", "nut-free", "egg-free"])
    one = {guard_of(r, order) for order in orders for r in rewriters}
    assert len(one) == 1
    stops = next(iter(one)).stop_ids
    kept = weakref.WeakSet(one)
    del one
    sets = [c for n in (2, 3) for c in itertools.combinations(CONSTRAINTS, n)][: GUARDS_KEPT + 4]
    for k, chosen in enumerate(sets):
        kept.add(guard_of(rewriters[k % len(rewriters)], reversed(chosen)))
    gc.collect()
    assert 0 < len(kept) <= GUARDS_KEPT
    # A closed guard (rewrite.closed_foods) and one made on its own read the same tables.
    closed = make_rewriter("contextual", lm, tokenizer, 256, sampling(), constrained=True)
    also = [guard_of(closed, ["vegan"]), ViolationGuard(tokenizer, ["vegan"], stops)]
    assert len({id(g.tables) for g in [*kept, *also]}) == 1

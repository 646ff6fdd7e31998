"""The paper's special tokens: which exist, how a tokenizer gets them, and where a pretrained
model's new embedding rows start (the words each token stands for). Below both rrt.modelling.models
and rrt.modelling.pretrained, which each give a tokenizer these tokens."""

from __future__ import annotations

# torch is imported where used: the jobs import this module, and their --help starts without it.
from tokenizers import AddedToken
from tokenizers.processors import TemplateProcessing

from rrt.recipes.lexicon import CONSTRAINTS
from rrt.recipes.paper_format import (
    BOS,
    END_INGS,
    END_INST,
    END_PROMPT,
    END_TITLE,
    EOS,
    ING,
    INST,
    NO_INGS,
    STRUCTURE_TOKENS,
    TAG_PATTERN,
    constraint_tokens,
)

PAD = "<pad>"
# What each marker of the paper's format stands for, in words a pretrained model has read.
MEANINGS = {
    BOS: "Recipe:\n",
    EOS: "\n\nThe end.\n",
    END_TITLE: "\n\nIngredients:\n",
    ING: "\n-",
    END_INGS: "\n\nInstructions:\n",
    INST: "\n",
    END_INST: "\n\n",
    END_PROMPT: "\nStep:",
    NO_INGS: "none",
    PAD: " ",
}


def special_tokens() -> list[str]:
    """Every special token the formats use: structure tokens, padding, both tags per constraint."""
    return [PAD] + STRUCTURE_TOKENS + constraint_tokens(list(CONSTRAINTS))


def added_token(token: str):
    # Absorbing the spaces around a tag keeps " <inst> " one token instead of three.
    return AddedToken(token, lstrip=True, rstrip=True, special=True, normalized=False)


def add_special_tokens(tokenizer):
    """Give a pretrained tokenizer the paper's tokens as BOS, EOS, padding and extra specials."""
    extras = [added_token(t) for t in special_tokens() if t not in (BOS, EOS, PAD)]
    tokenizer.add_special_tokens(
        {
            "bos_token": added_token(BOS),
            "eos_token": added_token(EOS),
            "pad_token": added_token(PAD),
            "extra_special_tokens": extras,
        }
    )
    # The formats write BOS themselves; a tokenizer that also prepends one (Llama's) would double
    # it. Transformers 5 keeps that BOS in the backend's post-processor, not only in a flag.
    for flag in ("add_bos_token", "add_eos_token"):
        if getattr(tokenizer, flag, False):
            setattr(tokenizer, flag, False)
    if tokenizer("x")["input_ids"] != tokenizer("x", add_special_tokens=False)["input_ids"]:
        tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
            single="$A:0", pair="$A:0 $B:1"
        )
    return tokenizer


def token_meaning(token: str) -> str:
    """Plain words for what one of our added tokens marks: a tag reads as a heading."""
    if token in MEANINGS:
        return MEANINGS[token]
    match = TAG_PATTERN.fullmatch(token)
    if match is None:
        return token
    role, non, constraint = match.groups()
    diet = constraint.replace("-", " ")
    if role in ("src", "source"):
        return f"\n\nRecipe{' (not ' + diet + ')' if non else ' (' + diet + ')'}:\n"
    return f"\n\n{'Not ' + diet if non else diet.capitalize()} version:\n"


def init_added_embeddings(lm, tokenizer, first_added: int) -> int:
    """Start each token from `first_added` on at the mean embedding of the words that say what it
    marks (`token_meaning`), in the input and (when untied) the output embeddings.

    A new row at the mean of all embeddings (the library's default) means nothing to the
    pretrained model: it cannot tell a step boundary from the source/target switch and almost
    never predicts a stop. Words it already knows give every marker its role from step 0, so a
    short fine-tuning learns the task instead of the markers. Returns the rows set."""
    import torch

    tables = [lm.get_input_embeddings().weight]
    output = lm.get_output_embeddings()
    if output is not None and output.weight.data_ptr() != tables[0].data_ptr():
        tables.append(output.weight)
    done = 0
    with torch.no_grad():
        for row in range(first_added, min(len(tokenizer), tables[0].shape[0])):
            words = token_meaning(tokenizer.convert_ids_to_tokens(row))
            pieces = [
                i
                for i in tokenizer(words, add_special_tokens=False)["input_ids"]
                if i < first_added
            ]
            if not pieces:
                continue
            for table in tables:
                table[row] = table[pieces].mean(dim=0)
            done += 1
    return done

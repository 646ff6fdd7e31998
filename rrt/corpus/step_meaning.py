"""What a recipe step means, as a vector: two steps that do one job in other words ("Roll out the
dough until it is about 1/8 inch thick", "Roll the dough until thin") sit close together.

The vectors are WordLlama's static token embeddings (l2_supercat, 256 dimensions, distilled from
LLM input embeddings), which the `wordllama` wheel ships with its tokenizer: nothing is fetched at
run time, and a step costs one tokenizer call and an average of its tokens' rows, so the
aligner can afford it on every step pair of a corpus.
"""

from __future__ import annotations

import functools
from importlib import resources

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

_WEIGHTS = ("weights", "l2_supercat_256.safetensors")
_TOKENIZER = ("tokenizers", "l2_supercat_tokenizer_config.json")


@functools.cache
def _model():
    """The wheel's tokenizer and embedding matrix (read once per process)."""
    # Read the shipped files directly: wordllama's own loader looks for the tokenizer in another
    # folder than the one the wheel fills, and falls back to a download.
    root = resources.files("wordllama")
    tokenizer = Tokenizer.from_file(str(root.joinpath(*_TOKENIZER)))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    embedding = load_file(str(root.joinpath(*_WEIGHTS)))["embedding.weight"].astype(np.float32)
    return tokenizer, embedding


def step_vectors(steps: list[str]) -> np.ndarray:
    """Unit vectors (steps x 256) of steps: the mean of their tokens' embeddings; zeros for an empty step."""
    tokenizer, embedding = _model()
    out = np.zeros((len(steps), embedding.shape[1]), dtype=np.float32)
    for k, encoding in enumerate(tokenizer.encode_batch(list(steps), add_special_tokens=False)):
        if encoding.ids:
            mean = embedding[encoding.ids].mean(axis=0)
            out[k] = mean / max(float(np.linalg.norm(mean)), 1e-9)
    return out


def meaning_similarity(src_steps: list[str], tgt_steps: list[str]) -> np.ndarray:
    """Cosine similarity (source steps x target steps) of the steps' vectors."""
    if not src_steps or not tgt_steps:
        return np.zeros((len(src_steps), len(tgt_steps)))
    return (step_vectors(src_steps) @ step_vectors(tgt_steps).T).astype(float)

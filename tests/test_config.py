"""The typed settings (rrt/config.py): one default per setting, one error line per bad value."""

from __future__ import annotations

import typing

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from rrt.config import (
    DEFAULT_PATH,
    MAX_FILE_BYTES,
    MAX_MESSAGE,
    ConfigError,
    Settings,
    load_settings,
)


def _fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every setting's dotted key, descending into nested blocks."""
    keys = []
    for name, info in model.model_fields.items():
        inner = [
            a
            for a in typing.get_args(info.annotation) or [info.annotation]
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        keys += _fields(inner[0], f"{prefix}{name}.") if inner else [prefix + name]
    return keys


def test_every_setting_has_its_one_default_in_the_bundled_file():
    # The models hold no defaults: the bundled file is where each lives.
    assert not [k for k, f in Settings.model_fields.items() if not f.is_required()]
    raw = yaml.safe_load(open(DEFAULT_PATH, encoding="utf-8"))
    for key in _fields(Settings):
        node = raw
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, (
                f"{key} has no default in ray_config.yaml"
            )
            node = node[part]
    assert len(_fields(Settings)) > 100


def test_every_profile_is_valid():
    raw = yaml.safe_load(open(DEFAULT_PATH, encoding="utf-8"))
    for name in raw["profiles"]:
        assert load_settings(profile=name).profile == name
    cluster = load_settings(profile="v100x64")
    assert cluster.train.model == "gpt2-medium" and cluster.train.deepspeed.precision == "fp16"
    # The engine rows at micro-batch 8 that chose the torch engine trained packed batches.
    assert (cluster.train.engine, cluster.train.batching, cluster.train.deepspeed.micro_batch) == (
        "torch",
        "packed",
        8,
    )
    assert cluster.data.dish_key == "title" and load_settings().data.dish_key == "head"


@pytest.mark.parametrize(
    "overrides, line",
    [
        ({"train": {"epochs": 0}}, "train.epochs must be >= 1 (got 0)"),
        ({"train": {"epochs": True}}, "train.epochs must be a whole number (got True)"),
        ({"train": {"deepspeed": {"lr": 1}}}, "train.deepspeed.lr must be < 1.0 (got 1)"),
        (
            {"train": {"loss_on": "some"}},
            "train.loss_on must be one of step, target, all (got 'some')",
        ),
        ({"train": {"colour": "red"}}, "unknown setting train.colour"),
        ({"rewrite": {"top_p": 1.5}}, "rewrite.top_p must be <= 1.0 (got 1.5)"),
        (
            {"serve": {"limits": {"steps": "many"}}},
            "serve.limits.steps must be a whole number (got 'many')",
        ),
        (
            {"data": {"split": {"train": 0.9, "dev": 0.2}}},
            "data.split: train + dev must be at most 1",
        ),
        (
            {"train": {"block_size": {"sonnet": 256}}},
            "train.block_size.sonnet.[key] must be one of contextual",
        ),
        (
            {"train": {"compile": "sometimes"}},
            "train.compile must be one of auto or true or false (got 'sometimes')",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_its_key(overrides, line):
    with pytest.raises(ConfigError) as caught:
        load_settings(overrides=overrides)
    message = str(caught.value)
    assert line in message and "\n" not in message


def test_a_users_file_overrides_only_what_it_names_and_flags_win(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text(
        "train: {epochs: 5, deepspeed: {lr: 0.002}}\nprofiles: {small: {train: {epochs: 7}}}\n"
    )
    settings = load_settings(str(mine))
    assert settings.train.epochs == 5 and settings.train.deepspeed.lr == 0.002
    assert settings.train.deepspeed.micro_batch == load_settings().train.deepspeed.micro_batch
    assert load_settings(str(mine), "small").train.epochs == 7
    # A flag left out (None) keeps the file's value; a flag given wins.
    assert load_settings(str(mine), overrides={"train": {"epochs": None}}).train.epochs == 5
    assert load_settings(str(mine), overrides={"train": {"epochs": 9}}).train.epochs == 9


@pytest.mark.parametrize(
    "text, line",
    [
        ("train: [unclosed\n", "is not valid YAML"),
        ("- a list\n", "must hold a mapping"),
        ("profile: nope\n", "unknown profile 'nope'"),
    ],
)
def test_a_bad_file_is_one_line(tmp_path, text, line):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(ConfigError, match=line):
        load_settings(str(bad))
    with pytest.raises(ConfigError, match="config file not found"):
        load_settings(str(tmp_path / "absent.yaml"))


def _alias_bomb(levels: int) -> str:
    """Each level a list of nine aliases of the one before: 9**levels values once expanded."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels):
        lines.append(f"l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 9)}]")
    return "\n".join(lines) + f"\nserve:\n  port: *l{levels - 1}\n"


MALFORMED = {
    "a folder": None,
    "not UTF-8": b"serve:\n  port: \xff\xfe\n",
    "nested 5,000 deep": ("serve: " + "[" * 5000 + "]" * 5000 + "\n").encode(),
    "a 5,000-digit number": ("serve:\n  port: " + "9" * 5000 + "\n").encode(),
    "an alias bomb under serve.port": _alias_bomb(6).encode(),
    "over the size bound": b"# " + b"x" * MAX_FILE_BYTES + b"\n",
    "profiles as a list": b"profiles: [a, b]\nprofile: a\n",
    "a profile named by a list": b"profile: [a]\n",
}


@pytest.mark.parametrize("kind", list(MALFORMED))
def test_a_malformed_file_is_one_bounded_line_from_the_loader_and_the_cli(tmp_path, capsys, kind):
    from cli.main import main as rrt

    path = tmp_path / "ray_config.yaml"
    if MALFORMED[kind] is None:
        path.mkdir()
    else:
        path.write_bytes(MALFORMED[kind])
    with pytest.raises(ConfigError) as caught:
        load_settings(str(path))
    message = str(caught.value)
    assert "\n" not in message and len(message) <= MAX_MESSAGE, message[:200]
    assert rrt(["judge", "report", "--study", str(tmp_path / "s"), "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"rrt: error: {message}\n"


SETTING_KEYS = _fields(Settings)
YAML_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=10, deadline=None)
@example(placed=[("profiles", {"small": 3}), ("profile", "small")])
@given(
    st.lists(
        st.tuples(st.sampled_from([*SETTING_KEYS, "profile", "profiles", "x"]), YAML_VALUES),
        max_size=3,
    )
)
def test_any_yaml_document_is_settings_or_one_bounded_line(tmp_path_factory, placed):
    document: dict = {}
    for key, value in placed:
        *blocks, last = key.split(".")
        node = document
        for block in blocks:
            node = node.setdefault(block, {}) if isinstance(node.get(block, {}), dict) else {}
        node[last] = value
    path = tmp_path_factory.mktemp("config") / "mine.yaml"
    path.write_text(yaml.safe_dump(document))
    try:
        load_settings(str(path))
    except ConfigError as err:
        assert "\n" not in str(err) and len(str(err)) <= MAX_MESSAGE

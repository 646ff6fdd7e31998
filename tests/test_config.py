"""The typed settings (rrt/config.py): one default per setting, one error line per bad value."""

from __future__ import annotations

import typing

import pytest
import yaml
from pydantic import BaseModel

from rrt.config import DEFAULT_PATH, ConfigError, Settings, load_settings


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

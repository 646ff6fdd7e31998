"""The one configuration: `ray_config.yaml`, a profile merged over it, then CLI flags."""
from __future__ import annotations

import copy
import os
from typing import Any

import yaml

DEFAULT_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ray_config.yaml")


class ConfigError(ValueError):
    """A configuration file or value that cannot be used."""


def deep_merge(base: dict, override: dict) -> dict:
    """A copy of base with override's keys merged in, recursively."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_config(path: str | None = None, profile: str | None = None) -> dict[str, Any]:
    """Read the YAML config and merge the chosen profile (default: its `profile` key)."""
    path = path or DEFAULT_PATH
    try:
        with open(path, encoding="utf-8") as handle:
            raw = yaml.safe_load(handle) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {path} is not valid YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    profiles = raw.pop("profiles", {}) or {}
    name = profile or raw.get("profile")
    if name:
        if name not in profiles:
            raise ConfigError(f"unknown profile {name!r}; {path} defines: {', '.join(sorted(profiles)) or 'none'}")
        raw = deep_merge(raw, profiles[name])
        raw["profile"] = name
    return raw


def section(config: dict, name: str) -> dict:
    """One section of the config (an empty dict when absent)."""
    value = config.get(name) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"config section {name!r} must be a mapping")
    return value

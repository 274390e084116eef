"""Editing a Hermes home (config.yaml and .env) the way Hermes reads them.

Shared by the plugin's setup (`hermes gateway setup`) and `hdgctl`.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from .envfile import read_env_file, update_env_file

PLUGIN_NAME = "android-platform"
MODEL_KEY_ENVS = (
    "OPENROUTER_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "NOUS_API_KEY",
)


def default_home() -> Path:
    return Path(os.environ.get("HERMES_HOME") or Path.home() / ".hermes")


class HomeError(ValueError):
    """A Hermes home's file that cannot be used as it is; the message says which."""


def read_config(home: Path) -> dict[str, Any]:
    path = home / "config.yaml"
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        problem = " ".join(str(exc).split())
        raise HomeError(f"{path} is not valid YAML; fix it first ({problem})") from None
    return data if isinstance(data, dict) else {}


def write_config(home: Path, config: dict[str, Any]) -> None:
    home.mkdir(parents=True, exist_ok=True)
    path = home / "config.yaml"
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    os.replace(tmp, path)


def read_env(home: Path) -> dict[str, str]:
    """The variables the home's ``.env`` sets, parsed as Hermes parses it."""
    return read_env_file(home / ".env")


def hermes_environ(home: Path) -> dict[str, str]:
    """The environment as Hermes has it for this home: the home's ``.env`` over the shell's
    variables (Hermes loads it with override). The process's own environment is untouched."""
    return {**os.environ, **read_env(home)}


def set_env(home: Path, updates: dict[str, str], remove: Iterable[str] = ()) -> None:
    """Set keys in .env (secrets only, Hermes' policy), drop the `remove` keys, keep other
    lines; mode 0600."""
    update_env_file(home / ".env", updates, remove)


def new_token() -> str:
    return secrets.token_urlsafe(32)


def _section(parent: dict[str, Any], key: str, kind: type, where: str) -> Any:
    """``parent[key]``, created when missing or empty (a YAML key with nothing under it)."""
    value = parent.get(key)
    if value is None:
        value = parent[key] = kind()
    if not isinstance(value, kind):
        raise HomeError(f"config.yaml: {where} is a {type(value).__name__}, not a {kind.__name__}")
    return value


def enable_plugin(config: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    plugins = _section(config, "plugins", dict, "plugins")
    enabled = _section(plugins, "enabled", list, "plugins.enabled")
    if PLUGIN_NAME not in enabled:
        enabled.append(PLUGIN_NAME)
    gateway = _section(config, "gateway", dict, "gateway")
    platforms = _section(gateway, "platforms", dict, "gateway.platforms")
    android = _section(platforms, "android", dict, "gateway.platforms.android")
    android["enabled"] = True
    _section(android, "extra", dict, "gateway.platforms.android.extra").update(extra or {})
    return config


def model_configured(config: dict[str, Any], env: dict[str, str]) -> bool:
    model = config.get("model")
    if isinstance(model, str) and model.strip():  # Hermes' short form: `model: provider/name`
        return True
    if isinstance(model, dict) and (
        model.get("base_url") or model.get("provider") not in (None, "", "auto")
    ):
        return True
    return any(env.get(k) or os.environ.get(k) for k in MODEL_KEY_ENVS)

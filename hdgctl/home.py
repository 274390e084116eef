"""Editing a Hermes home (config.yaml and .env) the way Hermes reads them."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

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
    path = home / ".env"
    values: dict[str, str] = {}
    if not path.exists():
        return values
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[key.strip()] = value
    return values


@contextlib.contextmanager
def hermes_environment(home: Path) -> Iterator[dict[str, str]]:
    """``os.environ`` as Hermes has it for this home: the home's ``.env`` loaded over the
    shell's variables (Hermes loads it with override), restored afterwards."""
    dotenv = read_env(home)
    saved = {key: os.environ.get(key) for key in dotenv}
    os.environ.update(dotenv)
    try:
        yield dict(os.environ)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def set_env(home: Path, updates: dict[str, str], remove: Iterable[str] = ()) -> None:
    """Set keys in .env (secrets only, Hermes' policy), drop the `remove` keys, keep other
    lines; mode 0600."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / ".env"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    pending = dict(updates)
    dropped = set(remove) - set(updates)
    out: list[str] = []
    for line in lines:
        key = line.split("=", 1)[0].strip()
        if key in pending:
            out.append(f"{key}={pending.pop(key)}")
        elif key in dropped:
            continue
        else:
            out.append(line)
    out.extend(f"{key}={value}" for key, value in pending.items())
    tmp = path.with_suffix(".tmp")
    # A new file, private from its creation: never a moment readable by others (nor a
    # leftover file someone else may already hold open).
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("\n".join(out) + "\n")
    os.replace(tmp, path)


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

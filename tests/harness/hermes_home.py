"""A throw-away ``HERMES_HOME`` wired to the scripted model.

The config keys and their source lines in hermes-agent 0.19.0 are listed in
``tests/harness/README.md``. Everything here is a plain file write; nothing imports Hermes.
"""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

HERMES_VERSION = "0.19.0"
DEFAULT_TOOLSETS = ("terminal", "clarify", "todo")
CONTEXT_LENGTH = 131072


def deep_merge(base: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """Recursively merge ``patch`` into a copy of ``base`` (dicts merge, the rest replaces)."""
    merged = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _env_line(key: str, value: str) -> str:
    if any(ch in value for ch in " #'\"\n\t"):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'{key}="{escaped}"'
    return f"{key}={value}"


class HermesHome:
    """A temp ``HERMES_HOME`` with ``config.yaml`` + ``.env`` for tests.

    ``android_extra`` lands in ``gateway.platforms.android.extra``; ``secrets`` in ``.env``;
    ``config_overrides`` is deep-merged over the generated config last.
    """

    def __init__(
        self,
        model_base_url: str,
        *,
        path: Path | None = None,
        model: str = "scripted-model",
        android_extra: Mapping[str, Any] | None = None,
        android_enabled: bool = True,
        secrets: Mapping[str, str] | None = None,
        streaming: bool = True,
        approvals_mode: str = "manual",
        toolsets: Sequence[str] = DEFAULT_TOOLSETS,
        plugins_enabled: Sequence[str] = ("android-platform",),
        config_overrides: Mapping[str, Any] | None = None,
        isolate_user_home: bool = True,
    ) -> None:
        self._own_path = path is None
        self._path = Path(tempfile.mkdtemp(prefix="hdg-hermes-home-")) if path is None else path
        self.model_base_url = model_base_url
        self.model = model
        self.android_extra = dict(android_extra or {})
        self.android_enabled = android_enabled
        self.secrets = dict(secrets or {})
        self.streaming = streaming
        self.approvals_mode = approvals_mode
        self.toolsets = list(toolsets)
        self.plugins_enabled = list(plugins_enabled)
        self.config_overrides: dict[str, Any] = dict(config_overrides or {})
        self.isolate_user_home = isolate_user_home
        self.write()

    # -- paths -------------------------------------------------------------------------
    @property
    def path(self) -> Path:
        return self._path

    @property
    def config_path(self) -> Path:
        return self._path / "config.yaml"

    @property
    def env_path(self) -> Path:
        return self._path / ".env"

    @property
    def state_db(self) -> Path:
        return self._path / "state.db"

    @property
    def user_home(self) -> Path:
        """``HOME`` given to Hermes children so nothing lands in the real ``~``."""
        return self._path / "userhome"

    # -- content -----------------------------------------------------------------------
    def build_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "model": {
                "provider": "custom",
                "base_url": self.model_base_url,
                "default": self.model,
                "api_key": "dummy-key",
                # Explicit context length: get_model_context_length() step 0 (agent/agent_init.py L1729).
                "context_length": CONTEXT_LENGTH,
            },
            "plugins": {"enabled": list(self.plugins_enabled)},
            "gateway": {
                "platforms": {
                    "android": {
                        "enabled": self.android_enabled,
                        "extra": copy.deepcopy(self.android_extra),
                    }
                }
            },
            "streaming": {
                "enabled": self.streaming,
                "edit_interval": 0.1,
                "buffer_threshold": 10,
            },
            "display": {
                "tool_progress": "all",
                "show_reasoning": False,
                "interim_assistant_messages": True,
            },
            "approvals": {"mode": self.approvals_mode, "timeout": 60},
            "security": {
                # No tirith binary download at startup (tools/tirith_security.py L83/L642).
                "tirith_enabled": False,
                # No runtime `pip install` into the shared venv (tools/lazy_deps.py L446).
                "allow_lazy_installs": False,
            },
            "platform_toolsets": {
                "android": list(self.toolsets),
                "cli": list(self.toolsets),
            },
            # No background "self-improvement review" LLM forks after turns
            # (agent/agent_init.py L1435, L1523).
            "memory": {"nudge_interval": 0},
            "skills": {"creation_nudge_interval": 0},
            # Plain first-contact note instead of the profile-build directive
            # (gateway/run.py L12740, agent/onboarding.py L134).
            "onboarding": {"profile_build": "off"},
        }
        return deep_merge(config, self.config_overrides)

    def write(self) -> HermesHome:
        """(Re)write config.yaml, .env and the pre-seeded caches."""
        self._path.mkdir(parents=True, exist_ok=True)
        self.user_home.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            yaml.safe_dump(self.build_config(), sort_keys=False), encoding="utf-8"
        )
        self.env_path.write_text(
            "".join(_env_line(k, v) + "\n" for k, v in self.secrets.items()), encoding="utf-8"
        )
        self.env_path.chmod(0o600)
        self._seed_caches()
        return self

    def _seed_caches(self) -> None:
        now = time.time()
        # hermes_cli/banner.py check_for_updates(): a fresh cache skips the PyPI / git lookup.
        (self._path / ".update_check").write_text(
            json.dumps({"ts": now, "behind": 0, "rev": None, "ver": HERMES_VERSION}),
            encoding="utf-8",
        )
        # agent/model_metadata.py fetch_model_metadata(): a fresh (< 1 h), non-empty disk
        # cache keeps the OpenRouter /api/v1/models fetch off the network.
        cache = self._path / "cache"
        cache.mkdir(exist_ok=True)
        entry = {
            "context_length": CONTEXT_LENGTH,
            "max_completion_tokens": 4096,
            "pricing": {"prompt": "0", "completion": "0"},
        }
        (cache / "openrouter_model_metadata.json").write_text(
            json.dumps(
                {
                    "scripted-model": {"name": "scripted-model", **entry},
                    "other-model": {"name": "other-model", **entry},
                }
            ),
            encoding="utf-8",
        )

    def update_config(self, patch: Mapping[str, Any]) -> HermesHome:
        """Deep-merge ``patch`` into the overrides and rewrite the files."""
        self.config_overrides = deep_merge(self.config_overrides, patch)
        return self.write()

    def set_secrets(self, **secrets: str) -> HermesHome:
        self.secrets.update(secrets)
        return self.write()

    def read_config(self) -> dict[str, Any]:
        """config.yaml as it is on disk now (Hermes adds keys of its own, e.g. onboarding)."""
        data = yaml.safe_load(self.config_path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}

    def process_env(self) -> dict[str, str]:
        """Variables every Hermes child of this home needs."""
        env = {
            "HERMES_HOME": str(self._path),
            # Belt and braces with security.allow_lazy_installs (tools/lazy_deps.py L452).
            "HERMES_DISABLE_LAZY_INSTALLS": "1",
        }
        if self.isolate_user_home:
            env["HOME"] = str(self.user_home)
        return env

    def cleanup(self) -> None:
        if self._own_path:
            shutil.rmtree(self._path, ignore_errors=True)

    def __repr__(self) -> str:
        return f"<HermesHome {self._path}>"

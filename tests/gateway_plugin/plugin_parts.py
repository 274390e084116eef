"""What tests that drive a real Controller without a Hermes gateway share: a stand-in for
Hermes, the environment a plugin reads, and the controller itself on given files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from canonical.bus import Bus
from canonical.settings import load_settings
from gateway_plugin.controller import Controller


class IdleAgent:
    """Hermes as the controller sees it when no turn is asked of it: ready at once, no
    cron jobs (hellos, admin frames, pushes and publishing never reach the agent)."""

    async def wait_ready(self) -> None:
        return None

    def cron_jobs(self) -> list[dict[str, Any]]:
        return []


def plugin_environment(monkeypatch: pytest.MonkeyPatch, token: str) -> None:
    """The pairing token set; no admin credential or metrics port from the outer shell."""
    for name in (
        "ANDROID_ADMIN_TOKEN",
        "ANDROID_ADMIN_DEVICES",
        "ANDROID_METRICS_PORT",
        "ANDROID_SECRETS_DIR",
        "CREDENTIALS_DIRECTORY",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANDROID_TOKEN", token)


def new_controller(
    bus: Bus,
    tmp_path: Path,
    *,
    tenant: str,
    token: str,
    agent: Any = None,
    **settings: Any,
) -> Controller:
    """A controller (not started) on ``bus`` whose files live under ``tmp_path``: the
    same files each time, so a second one is the first one restarted."""
    return Controller(
        load_settings({"token": token, **settings}),
        bus,
        tenant=tenant,
        token=token,
        data_dir=tmp_path / "android",
        state_db=tmp_path / "state.db",
        agent=agent or IdleAgent(),
    )

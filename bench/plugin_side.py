"""The plugin side of the benchmarks: real ``gateway_plugin.controller.Controller``s whose
AgentPort is ``BenchAgent``, the tenants they serve, and the events they emit."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from bench.host import Json


class BenchAgent:
    """Stand-in for Hermes (AgentPort) with only what hello, sync and replay touch.

    The benchmarks measure the gateway's own paths (outbox, bus, edge); Hermes is not part
    of what they measure, so a real `hermes gateway run` is used only by turn_overhead.py.
    """

    async def wait_ready(self) -> None:
        return None

    def cron_jobs(self) -> list[Json]:
        return []


async def start_controllers(
    bus_url: str, tenants: Sequence[tuple[str, str]], data_root: Path
) -> list[Any]:
    """One real gateway_plugin Controller per (tenant, token), sharing one RedisBus (as a
    host running several Hermes gateways would not; one process keeps the bench small)."""
    from canonical.bus import open_bus
    from canonical.settings import load_settings
    from gateway_plugin.controller import Controller

    for name in ("ANDROID_ADMIN_TOKEN", "ANDROID_ADMIN_DEVICES", "ANDROID_METRICS_PORT"):
        os.environ.pop(name, None)
    bus = open_bus(bus_url)
    controllers = []
    for tenant, token in tenants:
        settings = load_settings({"token": token})
        root = data_root / tenant
        controller = Controller(
            settings,
            bus,
            tenant=tenant,
            token=token,
            data_dir=root / "android",
            state_db=root / "state.db",
            agent=BenchAgent(),
        )
        await controller.start()
        controllers.append(controller)
    return controllers


@asynccontextmanager
async def running_controllers(
    bus_url: str, tenants: Sequence[tuple[str, str]]
) -> AsyncIterator[list[Any]]:
    """``start_controllers`` in a fresh data directory; every Controller stopped on exit."""
    data_root = Path(tempfile.mkdtemp(prefix="hdg-bench-plugin-"))
    controllers = await start_controllers(bus_url, tenants, data_root)
    try:
        yield controllers
    finally:
        for controller in controllers:
            await controller.stop()


def tenant_token(index: int, run: str) -> tuple[str, str]:
    return f"bench{run}-t{index:03d}", f"bench-token-{run}-{index:04d}-" + "k" * 24


def delta_event(message_id: str, text: str) -> Json:
    """A ``message.delta`` of its own message (distinct ids: nothing coalesces)."""
    return {
        "type": "message.delta",
        "lane": ["bench", None],
        "conversation_id": "bench",
        "run_id": "run-bench",
        "message_id": message_id,
        "text": text,
    }

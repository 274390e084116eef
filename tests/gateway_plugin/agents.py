"""Stand-ins for Hermes in tests that drive a real Controller without a gateway."""

from __future__ import annotations

from typing import Any


class IdleAgent:
    """Hermes as the controller sees it when no turn is asked of it: ready at once, no
    cron jobs (hellos, admin frames, pushes and publishing never reach the agent)."""

    async def wait_ready(self) -> None:
        return None

    def cron_jobs(self) -> list[dict[str, Any]]:
        return []

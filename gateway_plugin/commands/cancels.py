"""Cancelling a run: its turn is interrupted, then stopped hard if it does not end.

The run stays open until Hermes' turn has really ended (`on_processing_complete`), so a
tool cut short is reported in it, before its end, and nothing of it comes after.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from canonical.model import Lane
from gateway_plugin.delivery.turns import Run
from gateway_plugin.ports import AgentPort

log = logging.getLogger("hdg.plugin")

# A cancelled turn still running this long after its interrupt gets Hermes' /stop, which
# abandons it (an agent that never reads its interrupt flag: a wait, a hung call).
CANCEL_GRACE_S = 30.0


class Cancels:
    """`release(lane)` lets go of what the lane's agent waits for (its clarifications);
    `background` keeps a task alive; `running` says whether the plugin still runs."""

    def __init__(
        self,
        agent: AgentPort,
        *,
        release: Callable[[Lane], None],
        background: Callable[[asyncio.Task[None]], None],
        running: Callable[[], bool],
    ) -> None:
        self.agent = agent
        self._release = release
        self._background = background
        self._running = running
        # Runs a device cancelled, by lane, until they end: their turn is stopped and
        # nothing more of it is shown. Read from agent threads (hermes_bridge refuses
        # the tools of a cancelled turn): only ever replaced or popped, never mutated.
        self.cancelled: dict[Lane, str] = {}
        self._watch: dict[Lane, asyncio.TimerHandle] = {}

    def stop(self) -> None:
        for handle in self._watch.values():
            handle.cancel()
        self._watch.clear()

    async def cancel_run(self, lane: Lane, run: Run, user_id: str) -> None:
        """Stop the run's turn at whatever point it is."""
        self.cancelled[lane] = run.run_id
        await self.agent.interrupt(lane, user_id=user_id)
        self._release(lane)
        if lane not in self._watch:
            self._watch_cancel(lane, run.run_id, user_id)

    def forget_cancel(self, lane: Lane, run_id: str) -> bool:
        """The run ended: True if it had been cancelled."""
        if self.cancelled.get(lane) != run_id:
            return False
        del self.cancelled[lane]
        handle = self._watch.pop(lane, None)
        if handle is not None:
            handle.cancel()
        return True

    def _watch_cancel(self, lane: Lane, run_id: str, user_id: str) -> None:
        loop = asyncio.get_running_loop()
        self._watch[lane] = loop.call_later(
            CANCEL_GRACE_S,
            lambda: self._background(loop.create_task(self._stop_hard(lane, run_id, user_id))),
        )

    async def _stop_hard(self, lane: Lane, run_id: str, user_id: str) -> None:
        self._watch.pop(lane, None)
        if not self._running() or self.cancelled.get(lane) != run_id:
            return
        log.warning("a cancelled turn is still running after %.0fs: stopping it", CANCEL_GRACE_S)
        if not await self.agent.stop_hard(lane, user_id=user_id):
            # No agent of this turn to stop yet: the interrupt waits for it.
            self._watch_cancel(lane, run_id, user_id)


__all__ = ["CANCEL_GRACE_S", "Cancels"]

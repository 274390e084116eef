"""An auto thread's name, upgraded by Hermes' own title generator after its first run.

The name a thread gets at once is derived from the user's words (titles.py); once the
first run ends, the model names it (derived < llm < user), and a failed call keeps the
derived name.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable

from canonical.model import Json, Lane
from gateway_plugin.channels.store import ChannelDirectory, ChannelError
from gateway_plugin.channels.titles import PendingTitles, clean_generated_title
from gateway_plugin.ports import AgentPort
from gateway_plugin.storage.thread import StorageThread

log = logging.getLogger("hdg.plugin")


class TitleUpgrades:
    """`emit` sequences and publishes the rename; `background` keeps its task alive;
    `running` says whether the plugin still runs. The rename runs on `writes`,
    channels.db's storage thread."""

    def __init__(
        self,
        agent: AgentPort,
        channels: ChannelDirectory,
        writes: StorageThread,
        *,
        emit: Callable[[list[Json]], object],
        background: Callable[[asyncio.Task[None]], None],
        running: Callable[[], bool],
    ) -> None:
        self.agent = agent
        self.channels = channels
        self.writes = writes
        self.pending = PendingTitles()
        self._emit = emit
        self._background = background
        self._running = running

    def after_run(self, lane: Lane, finished: list[Json]) -> None:
        """The lane's run ended with `finished`: name its thread if it awaits a name."""
        user_text = self.pending.take(lane)
        if user_text is None:
            return
        reply = next(
            (
                str(e.get("reply") or e.get("text") or "")
                for e in finished
                if e["type"] == "message.complete"
            ),
            "",
        )
        task = asyncio.get_running_loop().create_task(self._upgrade(lane, user_text, reply))
        self._background(task)

    async def _upgrade(self, lane: Lane, user_text: str, reply: str) -> None:
        try:
            raw = await self.agent.generate_title(user_text, reply)
        except Exception as exc:
            log.info(
                "thread title generation failed (%s); keeping the derived name", type(exc).__name__
            )
            return
        title = clean_generated_title(raw or "")
        if not title or not self._running():
            return
        try:
            rename = self.channels.rename
            entry, changed = await self.writes.run(rename, lane[0], lane[1], title, "llm")
        except (ChannelError, sqlite3.Error):
            return
        if changed:
            self._emit([entry.event("channel.renamed")])


__all__ = ["TitleUpgrades"]

"""Runs that open or close outside a device's request.

Orphans: runs a previous process accepted but never finished. Hermes resumes sessions
its restart interrupted; a resumed lane adopts its run. Otherwise the run is closed as
failed after ADOPT_WINDOW_S, with the text it had streamed: never left open.

Unannounced runs: turns Hermes started by itself (no device asked), shown only once they
produce something. Hermes also runs its processing hooks for events that produce
nothing (its start-up resume does, twice): no empty runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from canonical.model import Json, Lane
from canonical.protocol import now_iso
from gateway_plugin.delivery.outbox import Outbox
from gateway_plugin.delivery.turns import Run, TurnTracker
from gateway_plugin.storage.thread import StorageClosed

ADOPT_WINDOW_S = 30.0


class Orphans:
    """`emit` sequences and publishes events (`Controller.emit`); `running` says whether
    the plugin still runs."""

    def __init__(
        self,
        outbox: Outbox,
        turns: TurnTracker,
        *,
        emit: Callable[[list[Json], Sequence[str]], object],
        running: Callable[[], bool],
        run: Callable[..., Awaitable[Any]],
    ) -> None:
        self.outbox = outbox
        self.turns = turns
        self._emit = emit
        # Outbox reads, on the outbox's thread behind what is queued (`Sequencer.run`).
        self._run = run
        self._closing: set[asyncio.Task[None]] = set()
        self._running = running
        self.orphans: dict[Lane, Json] = {}
        # Runs Hermes started by itself, not shown yet: such a run opens with the first
        # event it produces (announce).
        self.unannounced: dict[str, list[Json]] = {}
        # Orphans a lane took up, until they produce something (on_processing_start).
        self.adopting: dict[str, Json] = {}

    async def close_stale_runs(self) -> None:
        """Runs a previous process accepted but never finished: each waits ADOPT_WINDOW_S
        for its lane to resume it, then is closed as failed."""
        for stale in await self._run(self.outbox.active_runs):
            lane = (stale["lane"][0], stale["lane"][1])
            active = self.turns.active(lane)
            if active is not None and active.run_id == stale["run_id"]:
                continue
            self.orphans[lane] = stale
            asyncio.get_running_loop().call_later(
                ADOPT_WINDOW_S, self._fail_orphan, lane, stale["run_id"]
            )

    def unfinished_lanes(self) -> set[Lane]:
        """Lanes with a run a previous process never finished (close_stale_runs): the
        only turns Hermes' start-up restore may resume."""
        return set(self.orphans)

    def announce(self, events: list[Json]) -> tuple[list[Json], list[Json]]:
        """Before `events` are sequenced: the unannounced runs they belong to open ahead
        of them; an adopted run that produces something is settled. The events, and the
        runs opened (active_runs rows, stored in the events' transaction)."""
        opened: list[Json] = []
        if self.unannounced:
            events, opened = self._announce(events)
        if self.adopting:
            for event in events:
                self.adopting.pop(str(event.get("run_id")), None)
        return events, opened

    def _announce(self, events: list[Json]) -> tuple[list[Json], list[Json]]:
        out: list[Json] = []
        opened: list[Json] = []
        for event in events:
            opening = self.unannounced.pop(str(event.get("run_id")), None)
            if opening is not None:
                run = opening[0]
                opened.append(
                    {
                        "run_id": run["run_id"],
                        "lane": run["lane"],
                        "conversation_id": run["conversation_id"],
                    }
                )
                out.extend(opening)
            out.append(event)
        return out, opened

    def on_processing_start(self, lane: Lane, conversation_id: Callable[[], str | None]) -> None:
        """A turn starts in a lane with no active run: it adopts the lane's orphan, or
        is a run Hermes started by itself."""
        orphan = self.orphans.pop(lane, None)
        if orphan is not None and self.turns.active(lane) is None:
            # Hermes resumed the turn its restart interrupted: it continues the same run
            # (its run.accepted and message.start are already in the outbox).
            self.turns.accept(
                lane, orphan["conversation_id"], run_id=orphan["run_id"], implicit=True
            )
            # Until it produces something: Hermes also runs these hooks for events that
            # produce nothing, and such a call gives the run back to wait for its turn.
            self.adopting[orphan["run_id"]] = orphan
            return
        if self.turns.active(lane) is None:
            # Hermes started a turn we did not submit (startup resume, background work):
            # shown once it produces something (announce).
            run, events = self.turns.accept(lane, conversation_id(), implicit=True)
            self.unannounced[run.run_id] = events

    def settle_silent(
        self, lane: Lane, run: Run, status: str, error: str | None
    ) -> Literal["unannounced", "adopted"] | None:
        """The run ends: which kind when nothing came of it (an unannounced run, or an
        adopted orphan that produced nothing), so there is no run to show; else None."""
        if self.unannounced.pop(run.run_id, None) is not None:
            self.turns.finish(lane, status, error, None)
            return "unannounced"
        orphan = self.adopting.pop(run.run_id, None)
        if orphan is not None:
            # The run waits on for the turn that resumes it.
            self.turns.finish(lane, status, error, None)
            self.orphans[lane] = orphan
            return "adopted"
        return None

    def _fail_orphan(self, lane: Lane, run_id: str) -> None:
        if self._orphaned(lane, run_id):
            task = asyncio.get_running_loop().create_task(self._close_orphan(lane, run_id))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def _orphaned(self, lane: Lane, run_id: str) -> bool:
        """The run is still an orphan: nobody took it up."""
        stale = self.orphans.get(lane)
        if stale is None or stale["run_id"] != run_id or not self._running():
            return False
        active = self.turns.active(lane)
        # Otherwise carried on by a command reclaimed after the restart.
        return active is None or active.run_id != run_id

    async def _close_orphan(self, lane: Lane, run_id: str) -> None:
        """Close an orphan as failed, with the text it had streamed (read off the loop)."""
        message_id = f"draft-{run_id}"
        try:
            text = await self._run(self.outbox.last_delta_text, message_id)
        except StorageClosed:
            return  # stopping: the next start closes it
        if not self._orphaned(lane, run_id):
            return
        stale = self.orphans.pop(lane)
        base = {"lane": list(lane), "conversation_id": stale["conversation_id"], "run_id": run_id}
        self._emit(
            [
                {
                    **base,
                    "type": "message.complete",
                    "message_id": message_id,
                    "role": "assistant",
                    "kind": "reply",
                    "text": text,
                    "ts": now_iso(),
                },
                {
                    **base,
                    "type": "run.finished",
                    "status": "failed",
                    "error": "interrupted by a gateway restart",
                },
            ],
            [run_id],
        )


__all__ = ["ADOPT_WINDOW_S", "Orphans"]

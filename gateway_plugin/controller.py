"""The plugin's controller: the single sequencer between Hermes and the devices.

It owns the outbox and the channel directory, consumes device commands from the bus
(`command_reader`), and turns what Hermes sends into sequenced canonical events,
published in cursor order.
No Hermes import here: Hermes is reached through `AgentPort` (see hermes_bridge).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from canonical.bus import Bus
from canonical.model import Json, Lane
from canonical.protocol import REPLY, now_iso
from canonical.settings import GatewaySettings
from gateway_plugin import upkeep
from gateway_plugin.access import admin
from gateway_plugin.access.devices import DeviceRegistry
from gateway_plugin.attachments.registry import AttachmentRegistry
from gateway_plugin.channels.search import SearchIndex
from gateway_plugin.channels.store import ChannelDirectory, ChannelEntry, ChannelError
from gateway_plugin.channels.title_upgrade import TitleUpgrades
from gateway_plugin.commands.cancels import Cancels
from gateway_plugin.commands.decisions import DecisionDesk
from gateway_plugin.commands.live_names import LiveNames
from gateway_plugin.commands.preferences import Preferences
from gateway_plugin.commands.reader import CommandReader
from gateway_plugin.commands.runs import CommandHandler
from gateway_plugin.delivery.cron import unsolicited_run
from gateway_plugin.delivery.orphans import Orphans
from gateway_plugin.delivery.outbox import Outbox
from gateway_plugin.delivery.publisher import Publisher, mark_published, take_published_upto
from gateway_plugin.delivery.replies import Replies
from gateway_plugin.delivery.sequencer import Entry, Sequencer
from gateway_plugin.delivery.turns import (
    Run,
    TurnTracker,
    classify,
    final_send,
    finished_events,
    notice_events,
)
from gateway_plugin.hermes.transcript import Transcript
from gateway_plugin.jobs import JobQueue
from gateway_plugin.loop_probe import LoopProbe
from gateway_plugin.ports import AgentPort
from gateway_plugin.push.policy import PushScheduler, push_submitter
from gateway_plugin.shutdown import UNBOUNDED, Deadline
from gateway_plugin.storage.thread import StorageClosed
from gateway_plugin.storage.threads import Storage, StorageBusy, refresh_on, run_or_busy
from gateway_plugin.storage.watch import FILE_WATCH, Watched

log = logging.getLogger("hdg.plugin")

SWITCH_INTERVAL_S = 0.001


class Controller:
    def __init__(
        self,
        settings: GatewaySettings,
        bus: Bus,
        *,
        tenant: str,
        token: str,
        data_dir: Path,
        state_db: Path,
        agent: AgentPort,
        env_file: Path | None = None,
    ) -> None:
        self.settings = settings
        # The Hermes home's .env: where a rotated pairing token is kept (admin.py).
        self.env_file = env_file
        self.bus = bus
        self.tenant = tenant
        self.token = token
        self.data_dir = data_dir
        self.agent = agent
        self.outbox = Outbox(data_dir / "outbox.db")
        # SQLite work runs on these threads; the loop only awaits (storage/threads.py).
        self.storage = Storage()
        self.channels = ChannelDirectory(
            data_dir / "channels.db", settings.home_channel, refresh_on_read=False
        )
        self.loop_probe = LoopProbe() if settings.loop_probe else None
        self.devices = DeviceRegistry(data_dir / "devices.db")
        self.attachments = AttachmentRegistry(
            data_dir / "attachments.db",
            settings.attachments_dir or data_dir / "attachments",
            tenant,
            retention_days=settings.attachment_retention_days,
            max_bytes=settings.max_upload_bytes,
        )
        self.transcript = Transcript(state_db)
        # History and search name a lane's messages as devices saw them live (read pool).
        self.live_names = LiveNames(self.transcript, self.outbox)
        self.search = SearchIndex(state_db)
        self.turns = TurnTracker()
        self.commands = CommandHandler(self)
        self.desk = DecisionDesk(self)
        self.prefs = Preferences(self)
        self.push = PushScheduler(self, None)
        self.jobs = JobQueue(
            settings,
            self.attachments.storage_root,
            pending_path=data_dir / "pending_pushes.db",
            pending_writes=self.storage.pending,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._watches: list[Watched] = []
        self.reader = CommandReader(self)
        self.running = False
        self._freeze_after_turn = False
        self.publisher = Publisher(
            bus,
            tenant,
            self.outbox,
            on_published=lambda events: self.push.on_published(events),
            running=lambda: self.running,
        )
        self.sequencer = Sequencer(
            self.outbox, ring=self.publisher.ring, publish=self.publisher.publish
        )
        self.publisher.reads = self.sequencer.run
        self.replies = Replies(bus, self.reader.note_reply, self.sequencer.durable)
        self.orphans = Orphans(
            self.outbox,
            self.turns,
            emit=lambda events, finished: self.emit(events, finished=finished),
            running=lambda: self.running,
            run=self.sequencer.run,
        )
        self._background: set[asyncio.Task[None]] = set()
        self.titles = TitleUpgrades(
            agent,
            self.channels,
            self.storage.channels,
            emit=self.emit,
            background=self.background,
            running=lambda: self.running,
        )
        self.cancels = Cancels(
            agent,
            release=self.desk.release_clarifications,
            background=self.background,
            running=lambda: self.running,
        )

    # -- lifecycle
    async def start(self) -> None:
        if self.loop_probe is not None:
            self.loop_probe.start()
        await self.storage.channels.run(self.channels.ensure_default)
        await self.prefs.restore_yolo()
        await self.jobs.start()
        self.push.submit = push_submitter(self.settings, self.jobs)
        await self.bus.register_tenant(self.tenant, self.token)
        # Before the pushes a previous process deferred come due, when Redis answers
        # (otherwise the next ack or push sets it); embedded, those pushes are queued again.
        self.background(asyncio.create_task(upkeep.resume_pushes(self), name="hdg-push-acks"))
        self.running = True
        # Runs the previous process never finished, known before Hermes' start-up restore
        # resumes their turns (it does so before the command reader may start).
        await self.orphans.close_stale_runs()
        # Events the previous process sequenced may never have been published: every
        # connected device catches up from its cursor (pheby devices, without cursors,
        # are closed to reload). Not after a stop that published everything and nothing
        # appended since: devices then stay connected across the restart. Awaited here,
        # before connect() returns, so it can never hit a device of this new process.
        published, head = await self.sequencer.run(take_published_upto, self.outbox)
        if published != str(head):
            await self.bus.publish(self.tenant, self.publisher.resync_notice())
        self._tasks = [
            asyncio.create_task(self.publisher.run(), name="hdg-publisher"),
            asyncio.create_task(upkeep.heartbeat(self), name="hdg-heartbeat"),
            asyncio.create_task(self.reader.run(), name="hdg-consumer"),
            asyncio.create_task(upkeep.outbox_retention(self), name="hdg-retention"),
            asyncio.create_task(upkeep.attachment_retention(self), name="hdg-attachment-retention"),
            asyncio.create_task(self.publisher.external_appends(), name="hdg-external-appends"),
            asyncio.create_task(upkeep.expiry_sweep(self), name="hdg-expiry-sweep"),
        ]
        # What a `hermes cron run` in another process writes: deliveries published live,
        # new channels in the directory's snapshot.
        self._watches = [
            FILE_WATCH.watch(
                "outbox.db", self.outbox.changed_elsewhere, self.publisher.appended_elsewhere
            ),
            FILE_WATCH.watch(
                "channels.db",
                self.channels.changed_elsewhere,
                refresh_on(self.storage.channels, self.channels.refresh),
            ),
        ]
        admin.attach(self)  # admin credential, log redaction, metrics
        # What Hermes and the plugin built to start is there to stay: out of the collector's
        # sight, a full collection no longer walks it (tens of ms on the shared loop). Hermes
        # builds its agent (imports, tools) on the first turn: frozen again after it.
        gc.freeze()
        self._freeze_after_turn = True
        # A thread running Python (a history page, search hits) hands the GIL back every
        # 1 ms instead of 5: the loop, woken by I/O, waits that long at most to run.
        sys.setswitchinterval(SWITCH_INTERVAL_S)

    def command_window_s(self) -> float:
        """How long a command may wait in the stream and still be carried out."""
        return self.settings.outbox_retention_hours * 3600

    async def stop(self, deadline: Deadline = UNBOUNDED) -> None:
        """Stop, waiting for the pushes being queued and the jobs running; with a
        `deadline`, no longer than it leaves (what is cut short is kept or retried)."""
        self.running = False
        self.cancels.stop()
        admin.detach(self)
        for watched in self._watches:
            FILE_WATCH.unwatch(watched)
        self._watches = []
        # The command reader and the loops end first: once the storage threads stop, a job
        # they submitted would fail. The publisher alone runs on, for publish_rest.
        publisher = [t for t in self._tasks if t.get_name() == "hdg-publisher"]
        await upkeep.cancel_all([t for t in self._tasks if t not in publisher])
        self._tasks = publisher
        await self.sequencer.drain()  # what is queued, published while pushes are open
        await self.push.close(deadline)
        await self.jobs.close(deadline)
        await self.sequencer.stop()
        everything_published = await self.publisher.publish_rest(deadline)
        if (repair := self.publisher.take_repair()) is not None:
            self._tasks.append(repair)
        await upkeep.cancel_all(self._tasks)
        self._tasks = []
        if everything_published:  # the outbox's thread is stopped: a thread of its own
            await asyncio.to_thread(mark_published, self.outbox)
        self.storage.stop()  # what is queued runs first
        self.outbox.close()
        self.channels.close()
        self.search.close()
        self.live_names.close()
        self.devices.close()
        self.attachments.close()
        if self.loop_probe is not None:
            await self.loop_probe.stop()

    # -- events out
    def emit(self, events: list[Json], *, finished: Sequence[str] = ()) -> None:
        """Queue events for the outbox's next batch (and the runs `finished` with them);
        published in cursor order once committed (`Sequencer`). Await
        `sequencer.durable()` before acknowledging them."""
        if not events and not finished:
            return
        events, opened = self.orphans.announce(events)
        self.sequencer.emit(events, opened=opened, finished=finished)

    def publish(self, events: list[Json]) -> None:
        """Publish events never sequenced (typing, control frames), behind those queued."""
        self.sequencer.publish(events)

    async def reply(self, command: Json, body: Json, kind: str = REPLY) -> None:
        await self.replies.reply(command, body, kind)

    async def reply_many(self, replies: list[tuple[Json, Json, str]]) -> None:
        """(command, body, kind) replies in one round trip, in order."""
        await self.replies.reply_many(replies)

    # -- Hermes → devices (called by the adapter on the gateway loop)
    def lane_entry(self, lane: Lane) -> ChannelEntry | None:
        return self.channels.get(lane[0], lane[1])

    def conversation_id(self, lane: Lane) -> str | None:
        entry = self.lane_entry(lane)
        return entry.conversation_id if entry else None

    def on_processing_start(self, lane: Lane, run_id: str | None) -> None:
        if run_id is not None and self.turns.active(lane) is not None:
            return
        self.orphans.on_processing_start(lane, lambda: self.conversation_id(lane))

    def on_processing_complete(self, lane: Lane, run_id: str | None, outcome: str) -> None:
        if self._freeze_after_turn:
            self._freeze_after_turn = False
            gc.freeze()
        run = self.turns.active(lane)
        if run is None:
            return
        if run.run_id != run_id and not (run.implicit and run_id is None):
            return
        status = {"success": "completed", "cancelled": "cancelled"}.get(outcome, "failed")
        if self.cancels.forget_cancel(lane, run.run_id):
            # However Hermes' turn ended (an interrupted turn ends as a success), it was
            # cancelled; and it has ended: whatever it did is already shown before this.
            status = "cancelled"
        error = None
        if status == "failed":
            error = "the agent could not complete this turn"
        silent = self.orphans.settle_silent(lane, run, status, error)
        if silent is not None:
            # Nothing came of it: no run to show.
            if silent == "unannounced":
                self.desk.expire_lane(lane)
            return
        # What Hermes no longer waits for closes in the run, before its end.
        self.desk.expire_lane(lane)
        # The run ends now (the lane is free for the next); its end keeps its place in the
        # order while Hermes' transcript of the turn is read off the loop.
        self.turns.take(lane)
        place = self.sequencer.reserve()
        ending = self._end_run(lane, run, status, error, place)
        self.background(asyncio.create_task(ending, name="hdg-run-end"))

    async def _end_run(
        self, lane: Lane, run: Run, status: str, error: str | None, place: Entry
    ) -> None:
        finished: list[Json] = []
        try:
            try:
                turn = await self.storage.reads.run(self.transcript.turn_since, lane, run.started)
            except StorageClosed:
                turn = None
            answered = turn is None or turn.answered
            if status == "completed" and run.kind == "reply" and not answered:
                # Hermes reports a turn whose agent failed (the provider failed, the context
                # overflowed) as processed: its text is Hermes' explanation, not an answer.
                status, error = "failed", run.reply().strip() or "the agent could not answer"
            reasoning = turn.reasoning if turn is not None else None
            finished = finished_events(run, status, error, reasoning)
        finally:
            events, opened = self.orphans.announce(finished)
            self.sequencer.fill(place, events, opened=opened, finished=[run.run_id])
        self.titles.after_run(lane, finished)

    def on_answered_inline(self, lane: Lane, run_id: str) -> None:
        """Hermes answered the run's command beside the turn it still held the lane's
        session for, without processing hooks: the run ends, and no typing outlives it
        (the ending turn's typing refresh may still tick)."""
        self.on_processing_complete(lane, run_id, "success")
        self.typing(lane, False)

    def on_send(self, lane: Lane, content: str, metadata: dict[str, Any] | None) -> str:
        """Classify one outbound send; returns the message id Hermes will edit."""
        # Hermes marks its answer to a message or command `notify`.
        self.prefs.observe_yolo(lane, answered=bool((metadata or {}).get("notify")))
        kind = classify(content, metadata, self.turns.known_tools)
        run = self.turns.active(lane)
        if kind == "progress":
            return f"progress-{int(time.monotonic() * 1e6)}"
        if (
            kind == "text"
            and run is not None
            and self.cancels.cancelled.get(lane) == run.run_id
            and not (metadata or {}).get("job_id")
        ):
            # What an interrupted turn still says ("Operation interrupted…") is not a reply.
            return f"cancelled-{int(time.monotonic() * 1e6)}"
        if kind == "notice":
            events = notice_events(
                lane, self.conversation_id(lane), content, run.run_id if run else None
            )
            self.emit(events)
            return str(events[0]["message_id"])
        if run is None or (metadata or {}).get("job_id"):
            # Cron output is its own run, even while a user's run is streaming in the lane.
            return self._unsolicited(lane, content, metadata)
        segment_id, events = self.turns.on_send(run, content, final=final_send(content, metadata))
        self.emit(events)
        return segment_id

    def on_status(self, lane: Lane, content: str, metadata: dict[str, Any] | None) -> str:
        """A message from Hermes' status callback (retries, a provider failure): in the
        run's text like any other, and remembered, since a failed turn's response
        repeats it."""
        run = self.turns.active(lane)
        if run is None or classify(content, metadata, self.turns.known_tools) != "text":
            return self.on_send(lane, content, metadata)
        segment_id, events = self.turns.on_send(run, content, status=True)
        self.emit(events)
        return segment_id

    def _unsolicited(self, lane: Lane, content: str, metadata: dict[str, Any] | None) -> str:
        """Output nobody asked for right now: a complete run of its own (`unsolicited_run`)."""
        entry = self.lane_entry(lane)
        segment_id, events = unsolicited_run(self.turns, lane, entry, content, metadata)
        self.emit(events)
        return segment_id

    def on_edit(self, message_id: str, content: str, *, finalize: bool = False) -> None:
        if message_id.startswith(("progress-", "notice-", "cancelled-")):
            return
        # Hermes' stream consumer marks its last edit of a message (at a tool call or the
        # turn's end) with `finalize`.
        self.emit(self.turns.on_edit(message_id, content, final=finalize))

    def background(self, task: asyncio.Task[None]) -> None:
        """Keep a fire-and-forget task alive until it is done."""
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def create_thread(self, parent_chat_id: str, name: str) -> str | None:
        create = self.channels.create_thread
        try:
            entry = await run_or_busy(self.storage.channels, create, parent_chat_id, name)
        except (ChannelError, StorageBusy) as exc:
            log.warning("android: cannot open a thread in %s: %s", parent_chat_id, exc)
            return None
        self.emit([entry.event("channel.created", auto=False)])
        return entry.thread_id

    def typing(self, lane: Lane, on: bool) -> None:
        """Typing is ephemeral: published, never sequenced (a replay would be noise).
        Only while a run is in flight in the lane: Hermes' typing refresh can outlive its
        message's processing (on Python 3.11 `asyncio.wait_for` may swallow the cancel
        that should end it, as it does when a fast command finishes during its first
        refresh), and then it would say "typing" forever."""
        if on and self.turns.active(lane) is None:
            return
        self.publish([{"type": "typing", "lane": list(lane), "on": on, "ts": now_iso()}])

    def notice(self, lane: Lane, text: str) -> None:
        run = self.turns.active(lane)
        self.emit(
            notice_events(lane, self.conversation_id(lane), text, run.run_id if run else None)
        )

    def active_run(self, lane: Lane) -> Run | None:
        return self.turns.active(lane)

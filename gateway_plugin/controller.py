"""The plugin's controller: the single sequencer between Hermes and the devices.

It owns the outbox and the channel directory, consumes device commands from the bus
(`command_reader`), and turns what Hermes sends into sequenced canonical events,
published in cursor order.
No Hermes import here: Hermes is reached through `AgentPort` (see hermes_bridge).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from pathlib import Path
from typing import Any

from canonical.backoff import Attempts
from canonical.bus import Bus, direct_batches, direct_envelope
from canonical.errors import BusUnavailable
from canonical.jsonenc import dumps
from canonical.model import Json, Lane
from canonical.protocol import REPLY, now_iso
from canonical.settings import GatewaySettings
from gateway_plugin import upkeep
from gateway_plugin.access import admin
from gateway_plugin.access.devices import DeviceRegistry
from gateway_plugin.attachments.registry import AttachmentRegistry
from gateway_plugin.channels.search import SearchIndex
from gateway_plugin.channels.store import ChannelDirectory, ChannelEntry, ChannelError
from gateway_plugin.channels.titles import PendingTitles, clean_generated_title
from gateway_plugin.commands import once as command_once
from gateway_plugin.commands.decisions import DecisionDesk
from gateway_plugin.commands.preferences import Preferences
from gateway_plugin.commands.reader import CommandReader
from gateway_plugin.commands.runs import CommandHandler
from gateway_plugin.delivery.cron import cron_message
from gateway_plugin.delivery.outbox import Outbox
from gateway_plugin.delivery.turns import Run, TurnTracker, classify, is_final, notice_events
from gateway_plugin.hermes.transcript import Transcript
from gateway_plugin.jobs import JobQueue
from gateway_plugin.loop_probe import LoopProbe
from gateway_plugin.ports import AgentPort
from gateway_plugin.push.policy import PushScheduler, push_submitter
from gateway_plugin.shutdown import UNBOUNDED, Deadline
from gateway_plugin.storage.threads import Storage, refresh_channels

log = logging.getLogger("hdg.plugin")

ADOPT_WINDOW_S = 30.0
# A cancelled turn still running this long after its interrupt gets Hermes' /stop, which
# abandons it (an agent that never reads its interrupt flag: a wait, a hung call).
CANCEL_GRACE_S = 30.0
EXTERNAL_POLL_S = 1.0
PUBLISH_BATCH = 256
# outbox meta: the head a stopping process had published in full (see _publish_rest).
PUBLISHED_UPTO = "published_upto"
PUBLISH_REST_S = 2.0


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
        self.search = SearchIndex(state_db)
        self.turns = TurnTracker()
        self.commands = CommandHandler(self)
        self.desk = DecisionDesk(self)
        self.prefs = Preferences(self)
        self.push = PushScheduler(self, None)
        self.jobs = JobQueue(
            settings, self.attachments.storage_root, pending_path=data_dir / "pending_pushes.db"
        )
        self._publish_queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._publishing = False  # the publisher has a batch in flight
        # Tells the edges to resync once an event could not be published (_doorbell_lost).
        self._doorbell_repair: asyncio.Task[None] | None = None
        self._unpublished = False  # an event's publish failed; the edges are not told yet
        self._tasks: list[asyncio.Task[None]] = []
        self.reader = CommandReader(self)
        self._orphans: dict[Lane, Json] = {}
        # Runs Hermes started by itself (no device asked), not shown yet: such a run opens
        # with the first event it produces. Hermes also runs its processing hooks for
        # events that produce nothing (its start-up resume does, twice): no empty runs.
        self._unannounced: dict[str, list[Json]] = {}
        # Orphans a lane took up, until they produce something (on_processing_start).
        self._adopting: dict[str, Json] = {}
        self._seen_head = self.outbox.head()
        self.pending_titles = PendingTitles()
        self._background: set[asyncio.Task[None]] = set()
        # Runs a device cancelled, by lane, until they end: their turn is stopped and
        # nothing more of it is shown. Read from agent threads (hermes_bridge refuses
        # the tools of a cancelled turn): only ever replaced or popped, never mutated.
        self.cancelled: dict[Lane, str] = {}
        self._cancel_watch: dict[Lane, asyncio.TimerHandle] = {}
        self.running = False

    # -- lifecycle
    async def start(self) -> None:
        if self.loop_probe is not None:
            self.loop_probe.start()
        await self.storage.channels.run(self.channels.ensure_default)
        self.prefs.restore_yolo()
        await self.jobs.start()
        self.push.submit = push_submitter(self.settings, self.jobs)
        await self.bus.register_tenant(self.tenant, self.token)
        # Before the pushes a previous process deferred come due, when Redis answers
        # (otherwise the next ack or push sets it); embedded, those pushes are queued again.
        self.background(asyncio.create_task(upkeep.resume_pushes(self), name="hdg-push-acks"))
        self.running = True
        # Runs the previous process never finished, known before Hermes' start-up restore
        # resumes their turns (it does so before the command reader may start).
        self.close_stale_runs()
        # Events the previous process sequenced may never have been published: every
        # connected device catches up from its cursor (pheby devices, without cursors,
        # are closed to reload). Not after a stop that published everything and nothing
        # appended since: devices then stay connected across the restart. Awaited here,
        # before connect() returns, so it can never hit a device of this new process.
        published = self.outbox.get_meta(PUBLISHED_UPTO)
        self.outbox.delete_meta(PUBLISHED_UPTO)  # a crash of this process proves nothing
        if published != str(self.outbox.head()):
            await self.bus.publish(self.tenant, self._resync_notice())
        self._tasks = [
            asyncio.create_task(self._publisher(), name="hdg-publisher"),
            asyncio.create_task(upkeep.heartbeat(self), name="hdg-heartbeat"),
            asyncio.create_task(self.reader.run(), name="hdg-consumer"),
            asyncio.create_task(upkeep.outbox_retention(self), name="hdg-retention"),
            asyncio.create_task(upkeep.attachment_retention(self), name="hdg-attachment-retention"),
            asyncio.create_task(self._external_appends(), name="hdg-external-appends"),
            asyncio.create_task(upkeep.expiry_sweep(self), name="hdg-expiry-sweep"),
            asyncio.create_task(
                refresh_channels(self.channels.refresh, self.storage.channels),
                name="hdg-channels-refresh",
            ),
        ]
        admin.attach(self)  # admin credential, log redaction, metrics

    def expire_stale(self) -> None:
        """Pickers past their expiry, and titles awaited for runs that are gone."""
        self.desk.expire_due()
        self.pending_titles.prune(lambda lane: self.turns.active(lane) is not None)

    def trim_outbox(self, now: float | None = None) -> int:
        cutoff = (now or time.time()) - self.settings.outbox_retention_hours * 3600
        trimmed = self.outbox.trim(cutoff)
        if trimmed:
            log.info("outbox retention trimmed %d events", trimmed)
        self.outbox.prune_processed(
            command_once.record_cutoff(now or time.time(), self.command_window_s())
        )
        return trimmed

    def command_window_s(self) -> float:
        """How long a command may wait in the stream and still be carried out."""
        return self.settings.outbox_retention_hours * 3600

    async def stop(self, deadline: Deadline = UNBOUNDED) -> None:
        """Stop, waiting for the pushes being queued and the jobs running; with a
        `deadline`, no longer than it leaves (what is cut short is kept or retried)."""
        self.running = False
        for handle in self._cancel_watch.values():
            handle.cancel()
        self._cancel_watch.clear()
        admin.detach(self)
        await self.push.close(deadline)
        await self.jobs.close(deadline)
        everything_published = await self._publish_rest(deadline)
        if self._doorbell_repair is not None:
            self._tasks.append(self._doorbell_repair)
            self._doorbell_repair = None
        await upkeep.cancel_all(self._tasks)
        self._tasks = []
        if everything_published:
            self.outbox.set_meta(PUBLISHED_UPTO, str(self.outbox.head()))
        self.storage.stop()  # what is queued runs first
        self.outbox.close()
        self.channels.close()
        self.search.close()
        self.devices.close()
        self.attachments.close()
        if self.loop_probe is not None:
            await self.loop_probe.stop()

    # -- events out
    def emit(self, events: list[Json]) -> list[Json]:
        """Sequence events in the outbox, then ring the doorbell (in cursor order)."""
        if not events:
            return []
        if self._unannounced:
            events = self._announce(events)
        if self._adopting:
            for event in events:
                self._adopting.pop(str(event.get("run_id")), None)
        stored = self.outbox.append_encoded(events)
        sequenced = [event for event, _ in stored]
        self._ring(sequenced, [body.encode() for _, body in stored])
        return sequenced

    def _announce(self, events: list[Json]) -> list[Json]:
        """Open the unannounced runs these events belong to, ahead of them."""
        out: list[Json] = []
        for event in events:
            opening = self._unannounced.pop(str(event.get("run_id")), None)
            if opening is not None:
                run = opening[0]
                self.outbox.record_send(
                    None,
                    {},
                    [],
                    {
                        "run_id": run["run_id"],
                        "lane": run["lane"],
                        "conversation_id": run["conversation_id"],
                    },
                )
                out.extend(opening)
            out.append(event)
        return out

    def publish(self, sequenced: list[Json]) -> None:
        self._ring(sequenced, [dumps(event).encode() for event in sequenced])

    def _ring(self, sequenced: list[Json], payloads: list[bytes]) -> None:
        self.push.on_published(sequenced)
        for event in sequenced:
            # Only while contiguous: rows another process appended in between (a CLI cron
            # run) must stay ahead of the mark, or the poller would never publish them.
            if event.get("cursor") == self._seen_head + 1:
                self._seen_head += 1
        queue = self._publish_queue
        for payload in payloads:
            # Straight onto the bus connection when nothing is queued or in flight (no
            # task wake-up per event); otherwise behind what is, so order holds.
            if queue.empty() and not self._publishing:
                if self.bus.publish_nowait(self.tenant, payload, self._doorbell_lost):
                    continue
            queue.put_nowait(payload)

    async def _external_appends(self) -> None:
        """Deliveries another process (a CLI cron run) appended to the outbox: publish them.
        Devices would get them by replay anyway; this makes them live."""
        while True:
            await asyncio.sleep(EXTERNAL_POLL_S)
            if self.outbox.head() > self._seen_head:
                events, _ = self.outbox.since(self._seen_head)
                self.publish(events)  # ours among them too: edges drop a cursor seen twice
                if events:
                    self._seen_head = max(self._seen_head, int(events[-1]["cursor"]))

    async def _publisher(self) -> None:
        # What queued up while a publish was in flight goes out in one round trip (a
        # pipeline on Redis), still in cursor order.
        while True:
            batch = [await self._publish_queue.get()]
            while len(batch) < PUBLISH_BATCH and not self._publish_queue.empty():
                batch.append(self._publish_queue.get_nowait())
            self._publishing = True
            try:
                if len(batch) > 1:
                    await self.bus.publish_many(self.tenant, batch)
                else:
                    await self.bus.publish(self.tenant, batch[0])
            except BusUnavailable:
                # The outbox has it, and devices catch up from their cursors once told.
                log.warning("bus unavailable; event kept in the outbox for replay")
                self._doorbell_lost()
            except Exception:
                # An error reply (out of memory, an ACL refusing PUBLISH): the same, but
                # the publisher must live on, or no event would ever be published again.
                log.exception("publishing events failed; kept in the outbox for replay")
                self._doorbell_lost()
            finally:
                self._publishing = False

    async def _publish_rest(self, deadline: Deadline) -> bool:
        """At a stop: publish what is sequenced and not yet published (in the queue, or
        appended by another process since the last poll), within the stop budget. True
        when every event reached the bus, so the next start need not resync devices."""
        head = self.outbox.head()
        if head > self._seen_head:
            events, _ = self.outbox.since(self._seen_head)
            if not events or int(events[-1]["cursor"]) < head:
                return False  # more than one read holds: leave them to the resync
            for event in events:  # not self.publish(): pushes are closed by now
                self._publish_queue.put_nowait(dumps(event).encode())
        end = time.monotonic() + deadline.left(PUBLISH_REST_S)
        while not self._publish_queue.empty() or self._publishing:
            if time.monotonic() >= end:
                return False
            await asyncio.sleep(0.01)
        # Behind the publishes sent straight to the bus: their outcome is known after it.
        try:
            async with asyncio.timeout(max(0.0, end - time.monotonic())):
                answered = await self.bus.ping()
        except TimeoutError:
            return False
        await asyncio.sleep(0)  # their failure callbacks (_doorbell_lost) run first
        return answered and not self._unpublished

    def _resync_notice(self) -> bytes:
        return dumps({"type": "_control", "action": "resync", "tenant": self.tenant}).encode()

    def _doorbell_lost(self) -> None:
        """An event's publish failed. The edges resync their devices when their own
        subscription was lost, but Redis may have been out of reach of this process alone
        (a partition, or a command timeout shorter than their health check): then
        nothing else tells them. Once the bus answers, they are told to resync."""
        self._unpublished = True
        if self.running and (self._doorbell_repair is None or self._doorbell_repair.done()):
            self._doorbell_repair = asyncio.get_running_loop().create_task(
                self._repair_doorbell(), name="hdg-doorbell-repair"
            )

    async def _repair_doorbell(self) -> None:
        attempts = Attempts()
        while True:
            await asyncio.sleep(attempts.next_delay())
            try:
                await self.bus.publish(self.tenant, self._resync_notice())
            except BusUnavailable:
                continue
            except Exception:  # an error reply (out of memory...): the next try may pass
                log.exception("telling the edges to resync failed; retrying")
                continue
            self._unpublished = False
            log.info("bus back after lost events: edges told to resync their devices")
            return

    async def reply(self, command: Json, body: Json, kind: str = REPLY) -> None:
        self.reader.note_reply(command, kind, body)
        edge, conn = command.get("edge"), command.get("conn")
        if not edge or not conn:
            return
        try:
            await self.bus.reply(str(edge), direct_envelope(str(conn), kind, body))
        except BusUnavailable:
            log.warning(
                "bus unavailable; reply to conn=%s lost (client retries idempotently)", conn
            )

    async def reply_many(self, replies: list[tuple[Json, Json, str]]) -> None:
        """(command, body, kind) replies in one round trip, in order."""
        by_edge: dict[str, list[bytes]] = {}
        for command, body, kind in replies:
            self.reader.note_reply(command, kind, body)
            if command.get("edge") and command.get("conn"):
                envelope = direct_envelope(str(command["conn"]), kind, body)
                by_edge.setdefault(str(command["edge"]), []).append(envelope)
        if not by_edge:
            return
        # One message per edge, not per reply (a storm's batch of hellos): fewer PUBLISHes
        # for Redis and fewer messages for each edge to take apart.
        out = [
            (edge, message)
            for edge, envelopes in by_edge.items()
            for message in direct_batches(envelopes)
        ]
        try:
            await self.bus.reply_many(out)
        except BusUnavailable:
            log.warning("bus unavailable; %d replies lost (clients retry idempotently)", len(out))

    def close_stale_runs(self) -> None:
        """Runs a previous process accepted but never finished. Hermes resumes sessions its
        restart interrupted; a resumed lane adopts its run. Otherwise the run is closed as
        failed after ADOPT_WINDOW_S, with the text it had streamed: never left open."""
        for stale in self.outbox.active_runs():
            lane = (stale["lane"][0], stale["lane"][1])
            active = self.turns.active(lane)
            if active is not None and active.run_id == stale["run_id"]:
                continue
            self._orphans[lane] = stale
            asyncio.get_running_loop().call_later(
                ADOPT_WINDOW_S, self._fail_orphan, lane, stale["run_id"]
            )

    def unfinished_lanes(self) -> set[Lane]:
        """Lanes with a run a previous process never finished (close_stale_runs): the
        only turns Hermes' start-up restore may resume."""
        return set(self._orphans)

    def _fail_orphan(self, lane: Lane, run_id: str) -> None:
        stale = self._orphans.get(lane)
        if stale is None or stale["run_id"] != run_id or not self.running:
            return
        active = self.turns.active(lane)
        if active is not None and active.run_id == run_id:
            return  # carried on by a command reclaimed after the restart
        del self._orphans[lane]
        message_id = f"draft-{run_id}"
        base = {"lane": list(lane), "conversation_id": stale["conversation_id"], "run_id": run_id}
        self.emit(
            [
                {
                    **base,
                    "type": "message.complete",
                    "message_id": message_id,
                    "role": "assistant",
                    "kind": "reply",
                    "text": self.outbox.last_delta_text(message_id),
                    "ts": now_iso(),
                },
                {
                    **base,
                    "type": "run.finished",
                    "status": "failed",
                    "error": "interrupted by a gateway restart",
                },
            ]
        )
        self.outbox.finish_run(run_id)

    # -- cancelling a run
    async def cancel_run(self, lane: Lane, run: Run, user_id: str) -> None:
        """Stop the run's turn at whatever point it is. The run stays open until Hermes'
        turn has really ended (on_processing_complete), so a tool cut short is reported
        in it, before its end, and nothing of it comes after."""
        self.cancelled[lane] = run.run_id
        await self.agent.interrupt(lane, user_id=user_id)
        self.desk.release_clarifications(lane)
        if lane not in self._cancel_watch:
            self._watch_cancel(lane, run.run_id, user_id)

    def forget_cancel(self, lane: Lane, run_id: str) -> bool:
        """The run ended: True if it had been cancelled."""
        if self.cancelled.get(lane) != run_id:
            return False
        del self.cancelled[lane]
        handle = self._cancel_watch.pop(lane, None)
        if handle is not None:
            handle.cancel()
        return True

    def _watch_cancel(self, lane: Lane, run_id: str, user_id: str) -> None:
        loop = asyncio.get_running_loop()
        self._cancel_watch[lane] = loop.call_later(
            CANCEL_GRACE_S,
            lambda: self.background(loop.create_task(self._stop_hard(lane, run_id, user_id))),
        )

    async def _stop_hard(self, lane: Lane, run_id: str, user_id: str) -> None:
        self._cancel_watch.pop(lane, None)
        if not self.running or self.cancelled.get(lane) != run_id:
            return
        log.warning("a cancelled turn is still running after %.0fs: stopping it", CANCEL_GRACE_S)
        if not await self.agent.stop_hard(lane, user_id=user_id):
            # No agent of this turn to stop yet: the interrupt waits for it.
            self._watch_cancel(lane, run_id, user_id)

    # -- Hermes → devices (called by the adapter on the gateway loop)
    def lane_entry(self, lane: Lane) -> ChannelEntry | None:
        return self.channels.get(lane[0], lane[1])

    def conversation_id(self, lane: Lane) -> str | None:
        entry = self.lane_entry(lane)
        return entry.conversation_id if entry else None

    def on_processing_start(self, lane: Lane, run_id: str | None) -> None:
        if run_id is not None and self.turns.active(lane) is not None:
            return
        orphan = self._orphans.pop(lane, None)
        if orphan is not None and self.turns.active(lane) is None:
            # Hermes resumed the turn its restart interrupted: it continues the same run
            # (its run.accepted and message.start are already in the outbox).
            self.turns.accept(
                lane, orphan["conversation_id"], run_id=orphan["run_id"], implicit=True
            )
            # Until it produces something: Hermes also runs these hooks for events that
            # produce nothing, and such a call gives the run back to wait for its turn.
            self._adopting[orphan["run_id"]] = orphan
            return
        if self.turns.active(lane) is None:
            # Hermes started a turn we did not submit (startup resume, background work):
            # shown once it produces something (_announce).
            run, events = self.turns.accept(lane, self.conversation_id(lane), implicit=True)
            self._unannounced[run.run_id] = events

    def on_processing_complete(self, lane: Lane, run_id: str | None, outcome: str) -> None:
        run = self.turns.active(lane)
        if run is None:
            return
        if run.run_id != run_id and not (run.implicit and run_id is None):
            return
        status = {"success": "completed", "cancelled": "cancelled"}.get(outcome, "failed")
        if self.forget_cancel(lane, run.run_id):
            # However Hermes' turn ended (an interrupted turn ends as a success), it was
            # cancelled; and it has ended: whatever it did is already shown before this.
            status = "cancelled"
        error = None
        if status == "failed":
            error = "the agent could not complete this turn"
        if self._unannounced.pop(run.run_id, None) is not None:
            # Nothing came of it: no run to show.
            self.turns.finish(lane, status, error, None)
            self.desk.expire_lane(lane)
            return
        orphan = self._adopting.pop(run.run_id, None)
        if orphan is not None:
            # Nothing came of it: the run waits on for the turn that resumes it.
            self.turns.finish(lane, status, error, None)
            self._orphans[lane] = orphan
            return
        turn = self.transcript.turn_since(lane, run.started)
        if status == "completed" and run.kind == "reply" and turn is not None and not turn.answered:
            # Hermes reports a turn whose agent failed (the provider failed, the context
            # overflowed) as processed: its text is Hermes' explanation, not an answer.
            status, error = "failed", run.reply().strip() or "the agent could not answer"
        reasoning = turn.reasoning if turn is not None else None
        # What Hermes no longer waits for closes in the run, before its end.
        self.desk.expire_lane(lane)
        finished = self.emit(self.turns.finish(lane, status, error, reasoning))
        self._maybe_title(lane, finished)
        self.outbox.finish_run(run.run_id)

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
            and self.cancelled.get(lane) == run.run_id
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
        segment_id, events = self.turns.on_send(run, content, final=_final_send(content, metadata))
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
        """Output nobody asked for right now (cron, background): a complete run of its own.
        ChannelError for a lane that is unknown or archived: never delivered into one."""
        is_cron = bool((metadata or {}).get("job_id"))
        entry = self.lane_entry(lane)
        if entry is None or entry.archived:
            where = lane[0] if lane[1] is None else f"{lane[0]}:{lane[1]}"
            raise ChannelError(f"{where} is {'archived' if entry else 'unknown'}")
        cron_job = None
        if is_cron:
            content, cron_job = cron_message(content, str((metadata or {}).get("job_id")))
        segment_id, events = self.turns.complete_run(
            lane, entry.conversation_id, content, kind="cron" if is_cron else "reply"
        )
        if cron_job is not None:
            events[-2]["cron_job"] = cron_job  # its message.complete
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

    def _maybe_title(self, lane: Lane, finished: list[Json]) -> None:
        user_text = self.pending_titles.take(lane)
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
        task = asyncio.get_running_loop().create_task(self._upgrade_title(lane, user_text, reply))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _upgrade_title(self, lane: Lane, user_text: str, reply: str) -> None:
        """Hermes' own title generator names an auto thread; derived < llm < user, and a
        failed call keeps the derived name."""
        try:
            raw = await self.agent.generate_title(user_text, reply)
        except Exception as exc:
            log.info(
                "thread title generation failed (%s); keeping the derived name", type(exc).__name__
            )
            return
        title = clean_generated_title(raw or "")
        if not title or not self.running:
            return
        try:
            entry, changed = await self.storage.channels.run(
                self.channels.rename, lane[0], lane[1], title, "llm"
            )
        except (ChannelError, sqlite3.Error):
            return
        if changed:
            self.emit(
                [
                    {
                        "type": "channel.renamed",
                        "lane": [entry.chat_id, entry.thread_id],
                        "conversation_id": entry.conversation_id,
                        "entry": entry.to_wire(),
                    }
                ]
            )

    def create_thread(self, parent_chat_id: str, name: str) -> str | None:
        try:
            entry = self.channels.create_thread(parent_chat_id, name)
        except ChannelError as exc:
            log.warning("android: cannot open a thread in %s: %s", parent_chat_id, exc)
            return None
        self.emit(
            [
                {
                    "type": "channel.created",
                    "lane": [entry.chat_id, entry.thread_id],
                    "conversation_id": entry.conversation_id,
                    "entry": entry.to_wire(),
                    "auto": False,
                }
            ]
        )
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


def _final_send(content: str, metadata: dict[str, Any] | None) -> bool:
    """Whether Hermes will edit this send again: its stream consumer flags the messages
    it will edit (`expect_edits`), unless it sends one already whole (`notify`)."""
    meta = metadata or {}
    return is_final(content) and (not meta.get("expect_edits") or bool(meta.get("notify")))

"""Device commands, one handler each. Replies go to the asking connection only;
state changes are events every device sees."""

from __future__ import annotations

import hashlib
import logging
import time
from typing import TYPE_CHECKING, Any

from canonical.model import Json
from canonical.model import commands as cmds
from canonical.model.commands import Target
from canonical.model.replies import SendAccepted
from canonical.protocol import REPLAY, error_body, new_id, now_iso
from gateway_plugin.access import admin, hellos
from gateway_plugin.attachments.flow import (
    added_event,
    agent_input,
    claimed_view,
)
from gateway_plugin.attachments.flow import cmd_check as attachment_check
from gateway_plugin.attachments.flow import cmd_get as attachment_get
from gateway_plugin.attachments.flow import cmd_register as attachment_register
from gateway_plugin.attachments.record import Attachment
from gateway_plugin.channels.store import ChannelEntry, ChannelError
from gateway_plugin.channels.titles import derive_title
from gateway_plugin.commands.lanes import LaneCommands, lane_of
from gateway_plugin.commands.registry import CommandRegistry
from gateway_plugin.delivery.cron import cron_targets
from gateway_plugin.delivery.message_ids import SentMessage, text_digest
from gateway_plugin.delivery.replay import sync_reads
from gateway_plugin.errors import CommandError
from gateway_plugin.storage.threads import run_or_busy

if TYPE_CHECKING:
    from gateway_plugin.controller import Controller

log = logging.getLogger("hdg.plugin.commands")


class CommandHandler:
    def __init__(self, controller: Controller) -> None:
        self.c = controller
        # One handler per canonical command: these, the lanes' (LaneCommands), the
        # decisions' (DecisionDesk) and the preferences' (Preferences) register theirs.
        self.registry = CommandRegistry()
        add = self.registry.add
        add(cmds.HELLO, self.cmd_hello)
        add(cmds.SYNC, self.cmd_sync)
        add(cmds.ACK, self.cmd_ack)
        add(cmds.READ_RECEIPT, self.cmd_read_receipt)
        add(cmds.FCM_REGISTER, self.cmd_fcm_register)
        add(cmds.MESSAGE_SEND, self.cmd_message_send)
        add(cmds.RUN_CANCEL, self.cmd_run_cancel)
        add(cmds.ATTACHMENT_CHECK, self.cmd_attachment_check)
        add(cmds.ATTACHMENT_REGISTER, self.cmd_attachment_register)
        add(cmds.ATTACHMENT_GET, self.cmd_attachment_get)
        for spec in (cmds.ADMIN_DEVICES_LIST, cmds.ADMIN_DEVICES_REVOKE, cmds.ADMIN_TOKEN_ROTATE):
            add(spec, self.cmd_admin)
        self.lanes = LaneCommands(self)

    async def handle(self, command: Json) -> None:
        name = str(command.get("cmd"))
        handler = self.registry.get(name)
        if not name.startswith("admin."):  # admin frames are counted as refused or carried out
            admin.observe_command(name, handler is not None)
        request_id = command.get("request_id")
        if handler is None:
            await self.c.reply(
                command, error_body("not_implemented", f"{name} is not available yet", request_id)
            )
            return
        try:
            await handler(command, command.get("args") or {})
        except ChannelError as exc:
            body = error_body(exc.code, exc.message, request_id)
            body["subject"] = "channel"  # a dialect may name the store's refusals its own way
            await self.c.reply(command, body)
        except CommandError as exc:
            body = error_body(exc.code, exc.message, request_id)
            if (command.get("args") or {}).get("client_id") is not None:
                body["client_id"] = command["args"]["client_id"]
            await self.c.reply(command, body)

    # -- helpers
    def _entry_for_conversation(self, conversation_id: str) -> ChannelEntry:
        entry = self.c.channels.get_by_conversation_id(conversation_id)
        if entry is None or entry.archived:
            raise CommandError("conversation_not_found", "Conversation not found")
        return entry

    def _entry_for(self, target: Target, *, archived_ok: bool = False) -> ChannelEntry:
        """The entry a command names; a conversation id names only a live conversation."""
        if "conversation_id" in target:
            return self._entry_for_conversation(target["conversation_id"])
        return self._entry_for_lane(target["chat_id"], target["thread_id"], archived_ok=archived_ok)

    def _entry_for_lane(
        self, chat_id: str, thread_id: str | None, *, archived_ok: bool = False
    ) -> ChannelEntry:
        """The lane's entry; ``archived_ok`` for what an archived lane still allows
        (reading its history, stopping a run still streaming there)."""
        entry = self.c.channels.get(chat_id, thread_id)
        if entry is None:
            raise CommandError(
                "not_found",
                f"unknown chat {chat_id}" + (f" thread {thread_id}" if thread_id else ""),
            )
        if entry.archived and not archived_ok:
            raise CommandError("archived", "that channel is archived")
        return entry

    def _broadcast_entry(self, kind: str, entry: ChannelEntry, **extra: Any) -> None:
        self._broadcast_entries(kind, [entry], **extra)

    def _broadcast_entries(self, kind: str, entries: list[ChannelEntry], **extra: Any) -> None:
        """One event per entry, sequenced together: devices never see half a change."""
        self.c.emit([entry.event(kind, **extra) for entry in entries])

    def directory(self) -> list[Json]:
        """The channel list, each entry with the cron jobs that deliver into it."""
        targets = cron_targets(
            self.c.agent.cron_jobs(), self.c.channels, self.c.settings.home_channel
        )
        return [
            {**e.to_wire(), "cron_jobs": targets.get((e.chat_id, e.thread_id), [])}
            for e in self.c.channels.list(include_archived=False)
        ]

    # -- sessions and cursors
    async def cmd_hello(self, command: Json, args: cmds.HelloArgs) -> None:
        await hellos.answer(self.c, [command])

    async def hello_batch(self, commands: list[Json]) -> None:
        """Consecutive hellos of one stream read, answered together (gateway_plugin.access.hellos)."""
        admin.observe_command("hello", True, len(commands))
        await hellos.answer(self.c, commands)

    async def cmd_sync(self, command: Json, args: cmds.CursorArgs) -> None:
        """``sync.ack`` and the first chunk of everything after the cursor. With ``more``,
        the edge asks for the next chunk (an internal sync) once the device's send queue
        has drained: a long absence is paced by the device's own speed and never overflows
        its queue."""
        cursor = int(args.get("cursor") or 0)
        outbox = self.c.outbox
        gap, body = await self.c.sequencer.run(sync_reads, outbox, cursor)
        if not command.get("internal") or gap:
            head = int(body["head"])
            events = body["events"]
            # What follows: this chunk, or (a long absence, paced in chunks) every event
            # held after the cursor, counted off the loop.
            count = (
                await self.c.sequencer.run(outbox.count_after, cursor, head)
                if body["more"]
                else len(events)
            )
            done: Json = {
                "type": "sync.ack",
                "from": cursor,
                "head": head,
                "count": count,
                "gap": gap,
            }
            if command.get("request_id") is not None:
                done["request_id"] = command["request_id"]
            body["before"] = [done]
        await self.c.reply(command, body, kind=REPLAY)

    async def cmd_ack(self, command: Json, args: cmds.CursorArgs) -> None:
        device_id, at = str(command.get("device_id")), int(args.get("cursor") or 0)
        self.c.push.on_ack(await self.c.sequencer.run(self.c.outbox.ack, device_id, at))

    async def cmd_read_receipt(self, command: Json, args: cmds.ReadReceiptArgs) -> None:
        if args.get("cursor"):
            device_id, at = str(command.get("device_id")), int(args["cursor"])
            self.c.push.on_ack(await self.c.sequencer.run(self.c.outbox.ack, device_id, at))

    async def cmd_fcm_register(self, command: Json, args: cmds.FcmRegisterArgs) -> None:
        token = str(args["token"])
        await self.c.push.token_registered(token)
        device, devices = str(command.get("device_id")), self.c.devices
        known = await run_or_busy(self.c.storage.devices, devices.set_push, device, fcm_token=token)
        if not known:
            raise CommandError("not_found", "this device has not said hello")
        await self.c.reply(
            command,
            {"type": "result", "op": "fcm.register", "request_id": command.get("request_id")},
        )

    # -- sending
    def _idem_key(
        self, command: Json, client_id: str | None, lane_key: str, text: str
    ) -> str | None:
        # A send the device named is that send wherever it is retried (the "iris:" prefix
        # is the stored keys' own: kept so that records written before stay valid).
        if client_id is not None:
            return f"iris:{client_id}"
        request_id = command.get("request_id")
        if request_id is None:
            return None
        # Request ids are client-chosen and may repeat across sessions ("r1"),
        # so a retry is the same id for the same conversation and the same text.
        digest = hashlib.sha256(f"{lane_key}\x00{request_id}\x00{text}".encode()).hexdigest()
        return f"pheby:{digest}"

    async def _ack_send(self, command: Json, result: Json, *, announced: bool = False) -> None:
        accepted: SendAccepted = {
            "type": "send.accepted",
            "conversation_id": result["conversation_id"],
            "chat_id": result["chat_id"],
            "thread_id": result.get("thread_id"),
            "run_id": result.get("run_id"),
            "client_id": result.get("client_id"),
            "request_id": command.get("request_id"),
            "announced": announced,
        }
        await self.c.reply(command, dict(accepted))

    async def cmd_message_send(self, command: Json, args: cmds.MessageSendArgs) -> None:
        entry = self._entry_for(args["target"])
        text = args["text"]
        client_id = args["client_id"]
        if (
            args["auto_thread"]
            and client_id is not None
            and await self.c.sequencer.run(self.c.outbox.idem_get, f"iris:{client_id}") is None
            and entry.thread_id is None
        ):
            # The default channel, wherever channel.set_default moved it (not the home one),
            # only with its threads toggle on (off: a flat conversation), and only for a
            # conversation starter: a media-only send has nothing to name a thread by.
            if (
                entry.is_default
                and entry.threads_enabled
                and text.strip()
                and not text.lstrip().startswith("/")
            ):
                uploads = args["attachment_ids"]
                if uploads:  # a send refused for its uploads must leave no thread behind
                    await self._claimable(uploads, entry, True)
                name, threads = derive_title(text), self.c.storage.channels
                create = self.c.channels.create_thread
                entry = await run_or_busy(
                    threads, create, entry.chat_id, name, auto=True, name_source="derived"
                )
                self._broadcast_entry("channel.created", entry, auto=True)
                # Upgraded with the model's title once the first exchange is done.
                self.c.titles.pending.add(lane_of(entry), text)
        try:
            await self._send(command, args, entry, text)
        finally:
            if self.c.turns.active(lane_of(entry)) is None:
                # Its run was refused, failed to start or already ended: no title to await.
                self.c.titles.pending.take(lane_of(entry))

    async def _claimable(self, ids: list[str], entry: ChannelEntry, a: bool) -> list[Attachment]:
        check = self.c.attachments.validate_claim
        return await run_or_busy(self.c.storage.attachments, check, ids, entry, thread_may_adopt=a)

    async def _send(
        self, command: Json, args: cmds.MessageSendArgs, entry: ChannelEntry, text: str
    ) -> None:
        lane = lane_of(entry)
        client_id = args["client_id"]
        key = self._idem_key(command, client_id, f"{lane[0]}|{lane[1]}", text)
        attachment_ids = list(args["attachment_ids"])
        # Unique per send, the same for its retries: named by its client_id; request ids
        # repeat ("r1" in every session), so otherwise by the send's idempotency key.
        if client_id is not None:
            user_message_id = f"u-{client_id}"
        elif key is not None:
            user_message_id = f"u-{key.rpartition(':')[2][:32]}"
        else:
            user_message_id = f"u-{new_id()}"
        if key is not None:
            seen = await self.c.sequencer.run(self.c.outbox.idem_get, key)
            if seen is not None:
                result, dispatched = seen
                claimed = list(result.pop("attachment_ids", None) or [])
                # The lane the send went to, which auto-threading may have chosen then.
                stored = self.c.channels.get(str(result.get("chat_id")), result.get("thread_id"))
                if stored is not None:
                    entry, lane = stored, lane_of(stored)
                await self._ack_send(command, result)
                if not dispatched and result.get("run_id") and self.c.turns.active(lane) is None:
                    # Accepted before a crash but never handed to Hermes: finish the job
                    # (claiming again what the crash may have left unclaimed).
                    self.c.storage.attachments.run_nowait(
                        self.c.attachments.claim,
                        claimed,
                        entry,
                        message_id=user_message_id,
                        run_id=result["run_id"],
                        claim_key=key,
                        text=text,
                    )
                    self.c.turns.accept(
                        lane,
                        entry.conversation_id,
                        run_id=result["run_id"],
                        request_id=command.get("request_id"),
                        client_id=client_id,
                    )
                    await self._dispatch(command, entry, text, result["run_id"], key, claimed)
                return
        if entry.automation:
            raise CommandError("unsupported", "automation channels are read-only")
        is_command = text.lstrip().startswith("/")
        uploads: list[Attachment] = []
        if attachment_ids:
            if is_command:
                raise CommandError("bad_request", "attachments cannot be sent with a slash command")
            # A send naming a lane may carry uploads made in its channel's flat lane.
            adopt = "conversation_id" not in args["target"]
            uploads = await self._claimable(attachment_ids, entry, adopt)
        active = self.c.turns.active(lane)
        device_id = str(command.get("device_id"))
        echo: Json = {
            "type": "message.complete",
            "lane": list(lane),
            "conversation_id": entry.conversation_id,
            "message_id": user_message_id,
            "role": "user",
            "kind": "user",
            "text": text,
            "device_id": device_id,
            "ts": now_iso(),
        }
        if client_id is not None:
            echo["client_id"] = client_id
        if active is not None:
            # Attachments are claimed only below: a send refused here leaves them retryable.
            if not is_command:
                raise CommandError("run_active", "a run is already active in this conversation")
            # Slash commands reach Hermes' command pipeline while a run is active (/stop).
            result = {
                "conversation_id": entry.conversation_id,
                "chat_id": lane[0],
                "thread_id": lane[1],
                "run_id": active.run_id,
                "client_id": client_id,
            }
            await self.c.sequencer.run(
                self.c.outbox.record_send, key, result, [echo], None, then=self.c.publisher.publish
            )
            await self._ack_send(command, result)
            if text.split(maxsplit=1)[0].lower() == "/stop":
                # The run's cancel, whichever way it is asked for (see cmd_run_cancel).
                await self.c.cancels.cancel_run(lane, active, device_id)
                if key is not None:
                    await self.c.sequencer.run(self.c.outbox.mark_dispatched, key)
                return
            await self._dispatch(command, entry, text, None, key)
            return
        run, events = self.c.turns.accept(
            lane,
            entry.conversation_id,
            request_id=command.get("request_id"),
            client_id=client_id,
            # A slash command's answer is a notice, not conversation content.
            kind="notice" if is_command else "reply",
        )
        result = {
            "conversation_id": entry.conversation_id,
            "chat_id": lane[0],
            "thread_id": lane[1],
            "run_id": run.run_id,
            "client_id": client_id,
        }
        # The uploads are announced in the send's transaction, right after the user turn,
        # and claimed once it has committed (the idempotency record carries their ids, so
        # a retry after a crash in between claims them again). Its events are published
        # as it commits, in cursor order with the batches around it.
        added = [added_event(claimed_view(u, entry, user_message_id, run.run_id)) for u in uploads]
        try:
            await self.c.sequencer.run(
                self.c.outbox.record_send,
                key,
                {**result, "attachment_ids": attachment_ids} if attachment_ids else result,
                [echo, *added, *events],
                {
                    "run_id": run.run_id,
                    "lane": list(lane),
                    "conversation_id": entry.conversation_id,
                },
                # How history and search name this turn once Hermes has stored it. A slash
                # command is no turn of the transcript.
                None
                if is_command
                else SentMessage(
                    user_message_id, run.run_id, time.time(), len(text), text_digest(text)
                ),
                entry.conversation_id,
                then=self.c.publisher.publish,
            )
        except Exception:
            # Not stored (outbox.db locked past the retries): the run never was; the
            # device is told, and the same frame sent again starts it.
            self.c.turns.take(lane)
            raise

        # Queued on attachments.db's thread, ahead of anything that reads the claim.
        self.c.storage.attachments.run_nowait(
            self.c.attachments.claim,
            attachment_ids,
            entry,
            message_id=user_message_id,
            run_id=run.run_id,
            claim_key=key or f"run:{run.run_id}",
            text=text,
        )
        await self._ack_send(command, result, announced=True)
        await self._dispatch(command, entry, text, run.run_id, key, attachment_ids)

    async def _dispatch(
        self,
        command: Json,
        entry: ChannelEntry,
        text: str,
        run_id: str | None,
        key: str | None,
        attachment_ids: list[str] | None = None,
    ) -> None:
        device_id = str(command.get("device_id") or "device")
        media_urls: list[str] = []
        media_types: list[str] = []
        try:
            if text.lstrip().startswith("/"):
                self.c.prefs.watch_command(lane_of(entry))  # it may be Hermes' /yolo
            if attachment_ids:
                # Small text files inlined ahead of the text; every file as a local media path.
                text, media_urls, media_types = await agent_input(
                    self.c.attachments,
                    await self.c.storage.attachments.run(
                        self.c.attachments.records, attachment_ids
                    ),
                    text,
                    self.c.agent.stage_media,
                )
            await self.c.agent.submit(
                lane_of(entry),
                text,
                user_id=device_id,
                user_name=device_id,
                run_id=run_id,
                chat_name=entry.name,
                media_urls=media_urls,
                media_types=media_types,
            )
        except Exception:
            if run_id is None:
                raise
            # The send is stored and acknowledged, its run announced: it must not stay open
            # with nobody working on it (the lane would refuse every send as run_active).
            log.exception("the agent did not take run %s", run_id)
            self._fail_run(entry, run_id, "the agent could not take this message; send it again")
        if key is not None:
            await self.c.sequencer.run(self.c.outbox.mark_dispatched, key)

    def _fail_run(self, entry: ChannelEntry, run_id: str, error: str) -> None:
        lane = lane_of(entry)
        run = self.c.turns.active(lane)
        if run is not None and run.run_id == run_id:
            self.c.cancels.forget_cancel(lane, run_id)
            self.c.emit(self.c.turns.finish(lane, "failed", error), finished=[run_id])

    async def cmd_run_cancel(self, command: Json, args: cmds.RunCancelArgs) -> None:
        # A run still streaming into an archived lane may be stopped.
        lane = lane_of(self._entry_for(args["target"], archived_ok=True))
        run = self.c.turns.active(lane)
        wanted = args["run_id"]
        if run is None or (wanted is not None and wanted != run.run_id):
            raise CommandError("not_found", "no such active run")
        await self.c.cancels.cancel_run(lane, run, str(command.get("device_id")))

    # -- attachments: requests from the edges (HTTP uploads and downloads, iris media)
    async def cmd_attachment_check(self, command: Json, args: Json) -> None:
        await attachment_check(self.c, command, args)

    async def cmd_attachment_register(self, command: Json, args: Json) -> None:
        await attachment_register(self.c, command, args)

    async def cmd_attachment_get(self, command: Json, args: Json) -> None:
        await attachment_get(self.c, command, args)

    async def cmd_admin(self, command: Json, args: cmds.AdminArgs) -> None:
        await admin.handle(self.c, command)

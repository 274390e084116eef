"""Conversation (pheby), history, channel and search commands: what reads or reshapes the
lanes. Dispatched by `CommandHandler`, whose lookup and broadcast helpers they share."""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any

from canonical.protocol import MAX_HISTORY
from gateway_plugin.attachments.flow import display_messages
from gateway_plugin.channels.store import ChannelEntry
from gateway_plugin.delivery import message_ids
from gateway_plugin.errors import CommandError
from gateway_plugin.hermes.transcript import page

if TYPE_CHECKING:
    from gateway_plugin.commands.runs import CommandHandler

Json = dict[str, Any]
Lane = tuple[str, str | None]
HISTORY_ID = re.compile(r"m\d{1,18}")  # a transcript row (gateway_plugin.hermes.transcript)


def strip_lane(event: Json) -> Json:
    return {k: v for k, v in event.items() if k not in ("lane", "cursor", "picker_id")}


def _before(args: Json) -> str | None:
    """Pheby's page end: a transcript id (its history names messages ``m<n>``). A live id
    (u-…, draft-…) is no place in that transcript, and answering it with an empty page
    would look like history's start."""
    before = args.get("before_message_id")
    if before is not None and not HISTORY_ID.fullmatch(str(before)):
        raise CommandError("bad_request", "before_message_id must be a history id (m…)")
    return None if before is None else str(before)


def lane_of(entry: ChannelEntry) -> Lane:
    return (entry.chat_id, entry.thread_id)


class LaneCommands:
    def __init__(self, handler: CommandHandler) -> None:
        self.h = handler
        self.c = handler.c

    def _entry_for_conversation(self, conversation_id: str) -> ChannelEntry:
        return self.h._entry_for_conversation(conversation_id)

    def _entry_for_lane(
        self, chat_id: str, thread_id: str | None, *, archived_ok: bool = False
    ) -> ChannelEntry:
        return self.h._entry_for_lane(chat_id, thread_id, archived_ok=archived_ok)

    def _broadcast_entry(self, kind: str, entry: ChannelEntry, **extra: Any) -> None:
        self.h._broadcast_entry(kind, entry, **extra)

    def _directory(self) -> list[Json]:
        return self.h.directory()

    async def cmd_conversation_list(self, command: Json, args: Json) -> None:
        conversations = []
        for entry in self.c.channels.list(include_archived=False):
            session_id, last_active = self.c.transcript.latest(lane_of(entry))
            conversations.append(
                {
                    "conversation_id": entry.conversation_id,
                    "name": entry.name,
                    "session_id": session_id,
                    "last_active": last_active,
                    "source": "hermes",
                }
            )
        await self.c.reply(
            command,
            {
                "type": "conversation.snapshot",
                "request_id": command.get("request_id"),
                "conversations": conversations,
            },
        )

    async def cmd_conversation_create(self, command: Json, args: Json) -> None:
        name = args.get("name") or "New chat"
        entry = self.c.channels.create_channel(name)
        await self.c.reply(
            command,
            {
                "type": "conversation.created",
                "conversation_id": entry.conversation_id,
                "name": entry.name,
                "request_id": command.get("request_id"),
            },
        )
        self._broadcast_entry("channel.created", entry)

    async def cmd_conversation_rename(self, command: Json, args: Json) -> None:
        entry = self._entry_for_conversation(str(args["conversation_id"]))
        renamed, _ = self.c.channels.rename(
            entry.chat_id, entry.thread_id, str(args["name"]), "user"
        )
        await self.c.reply(
            command,
            {
                "type": "conversation.renamed",
                "conversation_id": renamed.conversation_id,
                "name": renamed.name,
                "request_id": command.get("request_id"),
            },
        )
        self._broadcast_entry("channel.renamed", renamed)

    async def cmd_conversation_delete(self, command: Json, args: Json) -> None:
        entry = self._entry_for_conversation(str(args["conversation_id"]))
        self.c.agent.delete_transcript(lane_of(entry))
        await self.c.reply(
            command,
            {
                "type": "conversation.deleted",
                "conversation_id": entry.conversation_id,
                "request_id": command.get("request_id"),
            },
        )
        if not self.c.channels.is_permanent(entry):  # its history is gone, the lane stays
            self._broadcast_entry(
                "channel.deleted", self.c.channels.delete(entry.chat_id, entry.thread_id)
            )

    async def cmd_conversation_open(self, command: Json, args: Json) -> None:
        entry = self._entry_for_conversation(str(args["conversation_id"]))
        limit = min(int(args.get("limit") or 200), MAX_HISTORY)
        messages, has_more = self.c.transcript.messages(lane_of(entry), limit, _before(args))
        # Users' own texts (Hermes stores the turn with inlined files) and the attachments
        # anchored to the transcript's message ids where the page shows the turn.
        messages, anchors = display_messages(self.c.attachments, entry.conversation_id, messages)
        attachments = [
            a.descriptor(anchors.get(a.message_id or ""))
            for a in self.c.attachments.for_conversation(entry.conversation_id)
        ]
        run = self.c.turns.active(lane_of(entry))
        snapshot = self.c.desk.snapshot(lane_of(entry))
        run_state = None
        if run is not None:
            run_state = {
                "run_id": run.run_id,
                "status": "running",
                "message_id": run.message_id,
                "text": run.text(),
            }
        await self.c.reply(
            command,
            {
                "type": "conversation.history",
                "conversation_id": entry.conversation_id,
                "request_id": command.get("request_id"),
                "messages": messages,
                "has_more": has_more,
                "attachments": attachments,
                "run": run_state,
                "tools": [strip_lane(t) for t in snapshot["tools"]],
                "approvals": [strip_lane(a) for a in snapshot["approvals"]],
                "clarifications": [strip_lane(c) for c in snapshot["clarifications"]],
            },
        )

    # -- iris history and channels
    async def cmd_history(self, command: Json, args: Json) -> None:
        # Archived lanes are read-only, not unreadable: search finds them, so does history.
        entry = self._entry_for_lane(str(args["chat_id"]), args.get("thread_id"), archived_ok=True)
        before = args.get("before_message_id")
        messages, has_more = await asyncio.to_thread(
            self._iris_page,
            lane_of(entry),
            entry.conversation_id,
            int(args.get("limit") or 100),
            None if before is None else str(before),
        )
        # The user's own words, not the inlined attachment text Hermes ran.
        messages, _ = display_messages(self.c.attachments, entry.conversation_id, messages)
        await self.c.reply(
            command,
            {
                "type": "history",
                "request_id": command.get("request_id"),
                "chat_id": entry.chat_id,
                "thread_id": entry.thread_id,
                "messages": messages,
                "has_more": has_more,
            },
        )

    def _named(self, lane: Lane, conversation_id: str) -> list[Json]:
        """The lane's transcript named as devices saw it live (a worker thread: it reads
        state.db and outbox.db)."""
        return message_ids.assign(
            self.c.transcript.merged(lane), self.c.outbox.sent_messages(conversation_id)
        )

    def _iris_page(
        self, lane: Lane, conversation_id: str, limit: int, before: str | None
    ) -> tuple[list[Json], bool]:
        named = self._named(lane, conversation_id)
        if (
            before is not None
            and not HISTORY_ID.fullmatch(before)
            and all(m["message_id"] != before for m in named)
        ):
            # An empty page would look like history's start.
            raise CommandError(
                "bad_request", "before_message_id is no message of this lane's history"
            )
        return page(named, limit, before)

    def _hit_ids(self, lanes: dict[Lane, str]) -> dict[int, str]:
        """Transcript row → the id of the message it is part of, for these lanes."""
        ids: dict[int, str] = {}
        for lane, conversation_id in lanes.items():
            for message in self._named(lane, conversation_id):
                for row in message["rows"]:
                    ids[row] = message["message_id"]
        return ids

    async def _result(self, command: Json, entry: ChannelEntry) -> None:
        await self.c.reply(
            command,
            {
                "type": "result",
                "op": command.get("cmd"),
                "request_id": command.get("request_id"),
                "entry": entry.to_wire(),
            },
        )

    async def cmd_channel_list(self, command: Json, args: Json) -> None:
        await self.c.reply(
            command,
            {
                "type": "channel.list",
                "request_id": command.get("request_id"),
                "channels": self._directory(),
            },
        )

    async def cmd_channel_create(self, command: Json, args: Json) -> None:
        if args.get("kind") == "thread":
            parent = args.get("parent_chat_id") or self.c.channels.default().chat_id
            entry = self.c.channels.create_thread(str(parent), args.get("name") or "New thread")
        else:
            entry = self.c.channels.create_channel(args.get("name") or "")
        await self._result(command, entry)
        self._broadcast_entry("channel.created", entry, auto=False)

    async def cmd_channel_rename(self, command: Json, args: Json) -> None:
        entry, changed = self.c.channels.rename(
            str(args["chat_id"]), args.get("thread_id"), str(args.get("name") or ""), "user"
        )
        await self._result(command, entry)
        if changed:
            self._broadcast_entry("channel.renamed", entry)

    async def cmd_channel_set_default(self, command: Json, args: Json) -> None:
        entry, changed = self.c.channels.set_default(str(args["chat_id"]))
        await self._result(command, entry)
        # The old default's entry changed too (flag, threads toggle): say so in the same
        # breath, or devices would show two defaults.
        self.h._broadcast_entries("channel.renamed", changed)

    async def cmd_channel_delete(self, command: Json, args: Json) -> None:
        live_threads = (
            []
            if args.get("thread_id")
            else [
                e
                for e in self.c.channels.list(include_archived=False)
                if e.chat_id == str(args["chat_id"]) and e.thread_id is not None
            ]
        )
        entry = self.c.channels.delete(str(args["chat_id"]), args.get("thread_id"))
        await self._result(command, entry)
        self._broadcast_entry("channel.deleted", entry)
        for thread in live_threads:  # a channel takes its threads along: say so for each
            archived = self.c.channels.get(thread.chat_id, thread.thread_id)
            if archived is not None:
                self._broadcast_entry("channel.deleted", archived)
        # A run still streaming into what was deleted is stopped, not left to run on.
        for lane, run in list(self.c.turns.runs.items()):
            if lane[0] == entry.chat_id and (entry.thread_id is None or lane[1] == entry.thread_id):
                await self.c.cancel_run(lane, run, str(command.get("device_id")))

    async def cmd_channel_set_automation(self, command: Json, args: Json) -> None:
        entry = self.c.channels.set_automation(str(args["chat_id"]), bool(args["on"]))
        await self._result(command, entry)
        self._broadcast_entry("channel.renamed", entry)

    async def cmd_channel_set_threads(self, command: Json, args: Json) -> None:
        entry = self.c.channels.set_threads_enabled(str(args["chat_id"]), bool(args["on"]))
        await self._result(command, entry)
        self._broadcast_entry("channel.renamed", entry)

    # -- search
    async def cmd_search(self, command: Json, args: Json) -> None:
        # Off the loop: FTS5 over state.db (the channel store locks its own reads).
        hits = await asyncio.to_thread(
            self.c.search.search,
            str(args.get("query") or ""),
            scope=args.get("scope") or "all",
            chat_id=args.get("chat_id"),
            thread_id=args.get("thread_id"),
            limit=int(args.get("limit") or 50),
            channel_resolver=self.c.channels.chat_ids_matching,
        )
        lanes: dict[Lane, str] = {}
        for hit in hits:
            entry = self.c.channels.get(hit.chat_id, hit.thread_id)
            if entry is not None:
                lanes[(entry.chat_id, entry.thread_id)] = entry.conversation_id
        ids = await asyncio.to_thread(self._hit_ids, lanes) if lanes else {}
        # A hit names the message history shows (one per message: its best-ranked row).
        wire: list[Json] = []
        seen: set[str] = set()
        for hit in hits:
            row = int(hit.message_id)
            message_id = ids.get(row, f"m{row}")
            if message_id not in seen:
                seen.add(message_id)
                wire.append({**hit.to_wire(), "message_id": message_id})
        await self.c.reply(
            command,
            {
                "type": "search.results",
                "request_id": command.get("request_id"),
                "query": args.get("query") or "",
                "hits": wire,
            },
        )

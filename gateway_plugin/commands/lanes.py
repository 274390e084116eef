"""History, channel and search commands: what reads or reshapes the lanes. Registered
with `CommandHandler`'s registry, whose lookup and broadcast helpers they share."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from canonical.model import Json, Lane
from canonical.model import commands as cmds
from canonical.model.replies import ChannelListReply, ConversationState, HistoryReply
from canonical.protocol import MAX_HISTORY
from gateway_plugin.attachments.flow import display_messages
from gateway_plugin.channels.store import ChannelEntry
from gateway_plugin.commands.live_names import HISTORY_ID
from gateway_plugin.errors import CommandError
from gateway_plugin.storage.threads import run_or_busy

if TYPE_CHECKING:
    from gateway_plugin.commands.runs import CommandHandler

P = ParamSpec("P")
T = TypeVar("T")


def strip_lane(event: Json) -> Json:
    return {k: v for k, v in event.items() if k not in ("lane", "cursor", "picker_id")}


def _before(args: cmds.HistoryArgs) -> str | None:
    """The conversation view's page end: a transcript id (it names messages ``m<n>``). A
    live id (u-…, draft-…) is no place in that transcript, and answering it with an empty
    page would look like history's start."""
    before = args["before_message_id"]
    if before is not None and not HISTORY_ID.fullmatch(str(before)):
        raise CommandError("bad_request", "before_message_id must be a history id (m…)")
    return None if before is None else str(before)


def lane_of(entry: ChannelEntry) -> Lane:
    return (entry.chat_id, entry.thread_id)


class LaneCommands:
    def __init__(self, handler: CommandHandler) -> None:
        self.h = handler
        self.c = handler.c
        add = handler.registry.add
        add(cmds.HISTORY, self.cmd_history)
        add(cmds.CHANNEL_LIST, self.cmd_channel_list)
        add(cmds.CHANNEL_CREATE, self.cmd_channel_create)
        add(cmds.CHANNEL_RENAME, self.cmd_channel_rename)
        add(cmds.CHANNEL_SET_DEFAULT, self.cmd_channel_set_default)
        add(cmds.CHANNEL_DELETE, self.cmd_channel_delete)
        add(cmds.CHANNEL_SET_AUTOMATION, self.cmd_channel_set_automation)
        add(cmds.CHANNEL_SET_THREADS, self.cmd_channel_set_threads)
        add(cmds.SEARCH, self.cmd_search)

    def _broadcast_entry(self, kind: str, entry: ChannelEntry, **extra: Any) -> None:
        self.h._broadcast_entry(kind, entry, **extra)

    def _directory(self) -> list[Json]:
        return self.h.directory()

    # -- history and channels
    async def cmd_history(self, command: Json, args: cmds.HistoryArgs) -> None:
        # Archived lanes are read-only, not unreadable: search finds them, so does history.
        entry = self.h._entry_for(args["target"], archived_ok=True)
        reply: HistoryReply
        if args["view"] == "conversation":
            before_id = _before(args)
            rows = await run_or_busy(
                self.c.storage.reads, self._conversation_rows, entry, args["limit"], before_id
            )
            reply = self._conversation_page(entry, rows, command.get("request_id"))
        else:
            messages, has_more = await run_or_busy(
                self.c.storage.reads,
                self._live_page,
                lane_of(entry),
                entry.conversation_id,
                args["limit"],
                args["before_message_id"],
            )
            reply = {
                "type": "history",
                "request_id": command.get("request_id"),
                "chat_id": entry.chat_id,
                "thread_id": entry.thread_id,
                "messages": messages,
                "has_more": has_more,
            }
        await self.c.reply(command, dict(reply))

    def _conversation_rows(
        self, entry: ChannelEntry, limit: int, before: str | None
    ) -> tuple[list[Json], bool, list[Json]]:
        """The page's messages, whether there are more, and the lane's attachments (a
        read-pool thread: state.db and attachments.db)."""
        limit = min(limit, MAX_HISTORY)
        messages, has_more = self.c.transcript.messages(lane_of(entry), limit, before)
        # Users' own texts (Hermes stores the turn with inlined files) and the attachments
        # anchored to the transcript's message ids where the page shows the turn.
        messages, anchors = display_messages(self.c.attachments, entry.conversation_id, messages)
        attachments = [
            a.descriptor(anchors.get(a.message_id or ""))
            for a in self.c.attachments.for_conversation(entry.conversation_id)
        ]
        return messages, has_more, attachments

    def _conversation_page(
        self, entry: ChannelEntry, rows: tuple[list[Json], bool, list[Json]], request_id: Any
    ) -> HistoryReply:
        """Transcript rows as Hermes stored them, and the lane's state at this instant."""
        lane = lane_of(entry)
        messages, has_more, attachments = rows
        run = self.c.turns.active(lane)
        snapshot = self.c.desk.snapshot(lane)
        run_state = None
        if run is not None:
            run_state = {
                "run_id": run.run_id,
                "status": "running",
                "message_id": run.message_id,
                "text": run.text(),
            }
        state: ConversationState = {
            "conversation_id": entry.conversation_id,
            "attachments": attachments,
            "run": run_state,
            "tools": [strip_lane(t) for t in snapshot["tools"]],
            "approvals": [strip_lane(a) for a in snapshot["approvals"]],
            "clarifications": [strip_lane(c) for c in snapshot["clarifications"]],
        }
        return {
            "type": "history",
            "request_id": request_id,
            "chat_id": entry.chat_id,
            "thread_id": entry.thread_id,
            "messages": messages,
            "has_more": has_more,
            "conversation": state,
        }

    def _live_page(
        self, lane: Lane, conversation_id: str, limit: int, before: str | None
    ) -> tuple[list[Json], bool]:
        """A page of the lane's history named as devices saw it live (a read-pool thread:
        state.db, outbox.db and attachments.db); it reads its own rows only."""
        found = self.c.live_names.page(lane, conversation_id, limit, before)
        if found is None:
            # An empty page would look like history's start.
            raise CommandError(
                "bad_request", "before_message_id is no message of this lane's history"
            )
        messages, has_more = found
        # The user's own words, not the inlined attachment text Hermes ran.
        messages, _ = display_messages(self.c.attachments, conversation_id, messages)
        return messages, has_more

    async def _write(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """A channel directory write, on channels.db's storage thread."""
        return await run_or_busy(self.c.storage.channels, fn, *args, **kwargs)

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

    async def cmd_channel_list(self, command: Json, args: cmds.ChannelListArgs) -> None:
        channels = self._directory()
        if args["activity"]:
            for channel in channels:
                lane = (channel["chat_id"], channel["thread_id"])
                activity = await run_or_busy(self.c.storage.reads, self.c.transcript.latest, lane)
                channel["session_id"], channel["last_active"] = activity
        reply: ChannelListReply = {
            "type": "channel.list",
            "request_id": command.get("request_id"),
            "channels": channels,
        }
        await self.c.reply(command, dict(reply))

    async def cmd_channel_create(self, command: Json, args: cmds.ChannelCreateArgs) -> None:
        if args["kind"] == "thread":
            parent = args["parent_chat_id"] or self.c.channels.default().chat_id
            name = args["name"] or "New thread"
            entry = await self._write(self.c.channels.create_thread, str(parent), name)
        else:
            entry = await self._write(self.c.channels.create_channel, args["name"] or "")
        await self._result(command, entry)
        self._broadcast_entry("channel.created", entry, auto=False)

    async def cmd_channel_rename(self, command: Json, args: cmds.ChannelRenameArgs) -> None:
        target = args["target"]
        if "conversation_id" in target:
            lane = lane_of(self.h._entry_for(target))
        else:
            lane = (target["chat_id"], target["thread_id"])
        entry, changed = await self._write(
            self.c.channels.rename, lane[0], lane[1], args["name"], "user"
        )
        await self._result(command, entry)
        if changed:
            self._broadcast_entry("channel.renamed", entry)

    async def cmd_channel_set_default(self, command: Json, args: cmds.ChatIdArgs) -> None:
        entry, changed = await self._write(self.c.channels.set_default, args["chat_id"])
        await self._result(command, entry)
        # The old default's entry changed too (flag, threads toggle): say so in the same
        # breath, or devices would show two defaults.
        self.h._broadcast_entries("channel.renamed", changed)

    async def cmd_channel_delete(self, command: Json, args: cmds.ChannelDeleteArgs) -> None:
        target = args["target"]
        if "conversation_id" in target or args["purge_history"]:
            named = self.h._entry_for(target)
            chat_id, thread_id = lane_of(named)
        else:
            chat_id, thread_id = target["chat_id"], target["thread_id"]
        if args["purge_history"]:
            # Hermes' SessionDB writes state.db: a thread of its own, never the loop.
            await asyncio.to_thread(self.c.agent.delete_transcript, (chat_id, thread_id))
            if self.c.channels.is_permanent(named):  # its history is gone, the lane stays
                await self._result(command, named)
                return
        live_threads = (
            []
            if thread_id
            else [
                e
                for e in self.c.channels.list(include_archived=False)
                if e.chat_id == chat_id and e.thread_id is not None
            ]
        )
        entry = await self._write(self.c.channels.delete, chat_id, thread_id)
        await self._result(command, entry)
        self._broadcast_entry("channel.deleted", entry)
        for thread in live_threads:  # a channel takes its threads along: say so for each
            archived = self.c.channels.get(thread.chat_id, thread.thread_id)
            if archived is not None:
                self._broadcast_entry("channel.deleted", archived)
        # A run still streaming into what was deleted is stopped, not left to run on.
        for lane, run in list(self.c.turns.runs.items()):
            if lane[0] == entry.chat_id and (entry.thread_id is None or lane[1] == entry.thread_id):
                await self.c.cancels.cancel_run(lane, run, str(command.get("device_id")))

    async def cmd_channel_set_automation(self, command: Json, args: cmds.ChannelToggleArgs) -> None:
        entry = await self._write(self.c.channels.set_automation, args["chat_id"], args["on"])
        await self._result(command, entry)
        self._broadcast_entry("channel.renamed", entry)

    async def cmd_channel_set_threads(self, command: Json, args: cmds.ChannelToggleArgs) -> None:
        entry = await self._write(self.c.channels.set_threads_enabled, args["chat_id"], args["on"])
        await self._result(command, entry)
        self._broadcast_entry("channel.renamed", entry)

    # -- search
    async def cmd_search(self, command: Json, args: cmds.SearchArgs) -> None:
        # On the read pool: FTS5 over state.db (channel names come from the directory's
        # in-memory snapshot).
        hits = await run_or_busy(
            self.c.storage.reads,
            self.c.search.search,
            args["query"],
            scope=args["scope"],
            chat_id=args["chat_id"],
            thread_id=args["thread_id"],
            limit=args["limit"],
            channel_resolver=self.c.channels.chat_ids_matching,
        )
        lanes: dict[Lane, str] = {}
        for hit in hits:
            entry = self.c.channels.get(hit.chat_id, hit.thread_id)
            if entry is not None:
                lanes[(entry.chat_id, entry.thread_id)] = entry.conversation_id
        rows = [int(hit.message_id) for hit in hits]
        ids = (
            await run_or_busy(self.c.storage.reads, self.c.live_names.ids, lanes, rows)
            if lanes
            else {}
        )
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
                "query": args["query"],
                "hits": wire,
            },
        )

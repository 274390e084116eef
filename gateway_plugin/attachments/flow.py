"""What happens around the attachment registry: the events a claim produces, the agent's
view of claimed files (text inlined, media staged), history as the user wrote it, the bus
commands edges send (`attachment.check/register/get`), and the agent's deliverables.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from canonical import attachments as spec
from canonical.model import Json, Lane
from canonical.protocol import now_iso
from gateway_plugin.attachments import media_jobs
from gateway_plugin.attachments.record import Attachment, AttachmentError
from gateway_plugin.attachments.registry import CLOCK_SKEW_S, AttachmentRegistry, StageMedia
from gateway_plugin.storage.threads import run_or_busy

if TYPE_CHECKING:
    from gateway_plugin.channels.store import ChannelEntry
    from gateway_plugin.controller import Controller

log = logging.getLogger("hdg.plugin.attachments")


def added_event(record: Attachment) -> Json:
    return {
        "type": "attachment.added",
        "lane": [record.chat_id, record.thread_id],
        "conversation_id": record.conversation_id,
        "attachment": record.descriptor(),
        "ts": now_iso(),
    }


def claimed_view(
    record: Attachment, entry: ChannelEntry, message_id: str, run_id: str | None
) -> Attachment:
    """The record as ``claim`` will leave it (for the events sequenced with the send)."""
    return dataclasses.replace(
        record,
        conversation_id=entry.conversation_id,
        chat_id=entry.chat_id,
        thread_id=entry.thread_id,
        message_id=message_id,
        run_id=run_id,
    )


# -- the agent's view of a send


_LABEL_RE = re.compile(r"[^\w.\- ]")


async def agent_input(
    registry: AttachmentRegistry, records: Sequence[Attachment], text: str, stage: StageMedia
) -> tuple[str, list[str], list[str]]:
    """(turn text, media paths, media types) for Hermes.

    Small UTF-8 text files (markdown, json, csv, source...) are inlined ahead of the
    user's text as ``[Content of name]:`` blocks, the convention of Hermes' own adapters.
    Every other file is handed over as a local media path, staged in Hermes' media cache
    (which a sandboxed agent has mounted); Hermes adds its own note per file (an image
    description, a transcript, "saved at ...").
    """
    blocks: list[str] = []
    urls: list[str] = []
    types: list[str] = []
    for record in records:
        source = registry.path_of(record.attachment_id)
        if not source.is_file():
            log.warning("attachment %s vanished before dispatch", record.attachment_id)
            continue
        if (
            spec.is_text(record.mime_type, record.filename)
            and record.size <= spec.INLINE_TEXT_MAX_BYTES
        ):
            try:
                content = (await asyncio.to_thread(source.read_bytes)).decode("utf-8")
            except UnicodeDecodeError:
                content = None
            if content is not None:
                blocks.append(f"[Content of {_LABEL_RE.sub('_', record.filename)}]:\n{content}")
                continue
        path, staged_mime = await stage(source, record.filename, record.mime_type)
        urls.append(path)
        types.append(staged_mime)
    # A send of files alone has no text of its own to put after them.
    return "\n\n".join([*blocks, text] if text else blocks), urls, types


def display_messages(
    registry: AttachmentRegistry, conversation_id: str, messages: list[Json]
) -> tuple[list[Json], dict[str, str]]:
    """History as the user wrote it, and send message ids → transcript message ids.

    Hermes stores the turn text it ran, which for a send with attachments is prefixed by
    the inlined file contents and its own notes about the files; the user's text is the
    end of it. Sends are matched, in order, to user messages stored after them.
    """
    sends = registry.sends(conversation_id)
    if not sends:
        return messages, {}
    mapping: dict[str, str] = {}
    out: list[Json] = []
    start = 0
    for message in messages:
        if message.get("role") != "user":
            out.append(message)
            continue
        stored = str(message.get("text") or "")
        at = _epoch(message.get("ts"))
        for index in range(start, len(sends)):
            send_id, original, sent = sends[index]
            if at is not None and at < sent - CLOCK_SKEW_S:
                break  # stored before this send (and so before every later one)
            prefix = stored[: len(stored) - len(original)] if stored.endswith(original) else None
            if prefix is None or not (
                prefix == "" or (prefix.startswith("[") and prefix.endswith("\n\n"))
            ):
                continue
            mapping[send_id] = str(message.get("message_id"))
            message = {**message, "text": original}
            start = index + 1
            break
        out.append(message)
    return out, mapping


def _epoch(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


# -- commands the edges send (replies go to the asking edge request)


def resolve_entry(controller: Controller, args: Json) -> ChannelEntry:
    conversation_id = args.get("conversation_id")
    if isinstance(conversation_id, str) and conversation_id:
        entry = controller.channels.get_by_conversation_id(conversation_id)
    elif isinstance(args.get("chat_id"), str):
        entry = controller.channels.get(str(args["chat_id"]), args.get("thread_id"))
    else:
        entry = None
    if entry is None or entry.archived:
        raise AttachmentError("conversation_not_found", "Conversation not found")
    if entry.automation:
        raise AttachmentError("bad_request", "automation channels are read-only")
    return entry


async def cmd_check(controller: Controller, command: Json, args: Json) -> None:
    entry = resolve_entry(controller, args)
    await controller.reply(
        command,
        {
            "type": "attachment.ok",
            "conversation_id": entry.conversation_id,
            "chat_id": entry.chat_id,
            "thread_id": entry.thread_id,
        },
    )


async def cmd_register(controller: Controller, command: Json, args: Json) -> None:
    entry = resolve_entry(controller, args)
    attachment_id, sha256 = str(args.get("attachment_id")), str(args.get("sha256") or "")
    thread = controller.storage.attachments
    known = await run_or_busy(thread, controller.attachments.records, [attachment_id])
    if known and known[0].direction == "inbound" and known[0].sha256 == sha256:
        # Registered before, and the reply was lost: an edge retrying an upload's finish.
        await controller.reply(
            command, {"type": "attachment.registered", "attachment": known[0].descriptor()}
        )
        return
    record = await run_or_busy(
        thread,
        controller.attachments.register_inbound,
        attachment_id,
        entry,
        filename=str(args.get("filename") or ""),
        mime_type=str(args.get("mime_type") or ""),
        size=int(args.get("size") or 0),
        sha256=sha256,
    )
    await controller.reply(
        command, {"type": "attachment.registered", "attachment": record.descriptor()}
    )
    media_jobs.start_transcode(controller, record)


async def cmd_get(controller: Controller, command: Json, args: Json) -> None:
    record = await run_or_busy(
        controller.storage.attachments,
        controller.attachments.get,
        str(args.get("attachment_id") or ""),
    )
    if record is None:
        raise AttachmentError("not_found", "Attachment unavailable")
    await controller.reply(
        command,
        {
            "type": "attachment.found",
            "attachment": record.descriptor(),
            "sha256": record.sha256,
            "chat_id": record.chat_id,
            "thread_id": record.thread_id,
        },
    )


# -- deliverables from the agent


async def deliver(
    controller: Controller,
    lane: Lane,
    source: Path,
    *,
    filename: str | None = None,
    kind: str | None = None,
    move: bool = False,
) -> Attachment:
    """Store a file the agent produced and announce it (``attachment.added``)."""
    entry = controller.lane_entry(lane)
    if entry is None:
        raise AttachmentError("conversation_not_found", "no conversation for this lane")
    run = controller.active_run(lane)
    # A thread of its own, not attachments.db's: it copies the file first.
    record = await asyncio.to_thread(
        controller.attachments.add_outbound,
        source,
        entry,
        filename=filename,
        kind=kind,
        message_id=run.message_id if run else None,
        run_id=run.run_id if run else None,
        move=move,
    )
    controller.emit([added_event(record)])
    return record


__all__ = [
    "Attachment",
    "AttachmentError",
    "AttachmentRegistry",
    "added_event",
    "agent_input",
    "claimed_view",
    "cmd_check",
    "cmd_get",
    "cmd_register",
    "deliver",
    "display_messages",
    "resolve_entry",
]

"""Answering iris hellos, a batch at a time.

In a connection storm one stream read brings many hellos. Each needs its device recorded,
the channel directory, the outbox head and a direct reply (``hello.ack`` and the replay).
Per batch that is one devices.db transaction, one directory build, one outbox transaction
for the devices' acks and one pipelined round trip for all replies, instead of one of each
per hello. A hello's effects are idempotent (an upsert, a forward-only ack, a reply), so a
batch cut short by a crash is simply answered again after the restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from canonical.jsonenc import dumps
from canonical.model import Json
from canonical.protocol import CLOSE, REPLAY, error_body, now_iso
from gateway_plugin.access import hello_gate
from gateway_plugin.delivery.replay import hello_reads

if TYPE_CHECKING:
    from gateway_plugin.controller import Controller


CLOSE_NOT_ALLOWED = 4401
SERVER_CAPS = [
    "streaming",
    "channels",
    "threads",
    "auto_thread",
    "search",
    "sync",
    "cursor_ack",
    "media",
]


async def answer(controller: Controller, commands: list[Json]) -> None:
    c = controller
    closes: dict[int, Json] = {}
    gated: list[Json] = []
    allowed = c.settings.allowed_user_ids  # parsed from settings: once per batch
    everyone = not allowed or c.settings.allow_all_users
    for command in commands:
        if everyone or str(command.get("device_id")) in allowed:
            gated.append(command)
        else:
            frame = error_body("unauthorized", "this device is not allowed", _request_id(command))
            closes[id(command)] = {"code": CLOSE_NOT_ALLOWED, "frame": frame}
    if gated:  # recorded, revoked ones refused (admin)
        for command, refusal in zip(gated, await hello_gate.on_hellos(c, gated), strict=True):
            if refusal is not None:
                closes[id(command)] = refusal
    welcome = [command for command in commands if id(command) not in closes]
    acks = [(str(w["device_id"]), at) for w in welcome if (at := _cursor(w) or 0) > 0]
    cursors = [cursor for w in welcome if (cursor := _cursor(w)) is not None]
    # One job on the outbox's thread: the acks, the head and every replay's first chunk.
    stored, head, trimmed_upto, bodies = await c.sequencer.run(hello_reads, c.outbox, acks, cursors)
    for at in stored.values():
        c.push.on_ack(at)
    # The ack goes to the device as the text built here (``before_text``): the channel
    # directory, every hello's largest part, is encoded once per batch, and the edge
    # neither parses nor encodes it again.
    directory = dumps(c.commands.directory()) if welcome else "[]"
    replies: list[tuple[Json, Json, str]] = []
    ts = now_iso()  # the batch is answered at one instant
    for command in commands:
        close = closes.get(id(command))
        if close is not None:
            replies.append((command, close, CLOSE))
            continue
        cursor = _cursor(command)
        ack: Json = {
            "type": "hello.ack",
            "version": 1,
            "server_caps": SERVER_CAPS,
            "device_id": str(command.get("device_id")),
            "sync_cursor": head,
            "gap": cursor is not None and cursor < trimmed_upto,
            "ts": ts,
        }
        request_id = _request_id(command)
        if request_id is not None:
            ack["request_id"] = request_id
        text = ack_text(ack, directory)
        if cursor is None:
            # A fresh device starts at the head: older events are history, not a gap.
            body: Json = {"before_text": [text], "events": [], "head": head, "fresh": True}
        else:
            body = {**bodies[cursor], "before": [], "before_text": [text]}
        replies.append((command, body, REPLAY))
    await c.reply_many(replies)


def ack_text(ack: Json, directory: str) -> str:
    """The iris ``hello.ack`` frame: ``ack``'s fields and the encoded directory as
    ``channels``."""
    return dumps(ack)[:-1] + ',"channels":' + directory + "}"


def _cursor(command: Json) -> int | None:
    """The device's cursor; None for a fresh device (no cursor at all)."""
    cursor = (command.get("args") or {}).get("cursor")
    return cursor if isinstance(cursor, int) and not isinstance(cursor, bool) else None


def _request_id(command: Json) -> Any:
    return (command.get("args") or {}).get("request_id")

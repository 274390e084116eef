"""Iris dialect codec (docs/protocol/iris.md): lanes are (chat_id, thread_id), every
sequenced event carries `cursor` so a device can resume with `sync`."""

from __future__ import annotations

from typing import Any

from canonical import attachments
from canonical.bus import token_digest
from canonical.model import Json
from canonical.model import commands as cmds
from canonical.model.commands import LaneRef
from canonical.protocol import MAX_CURSOR

from ..errors import FrameRejected
from . import fields

IRIS_VERSION = 1
# A message id a device sends back: u-<client_id> (a client_id is up to 128 characters),
# draft-<run_id>, m<row>.
MESSAGE_ID_MAX = 160


def _lane(frame: Json) -> LaneRef:
    """Iris names every lane by its chat and thread."""
    return {
        "chat_id": fields.req_str(frame, "chat_id", max_len=128),
        "thread_id": fields.opt_str(frame, "thread_id", max_len=64),
    }


def _message_send(f: Json) -> cmds.MessageSendArgs:
    auto = f.get("auto_thread", False)
    if not isinstance(auto, bool):
        raise FrameRejected(
            "bad_request", "auto_thread must be a JSON boolean", f.get("request_id")
        )
    # Attachment ids (media.uploaded's media_ref), claimed like pheby's attachment_ids.
    media_refs = fields.str_list(f, "media_refs", max_items=attachments.MAX_PER_MESSAGE)
    # A send of files alone carries no text (seed 06 §6.3.1); otherwise text is required.
    text = fields.text(f, required=not media_refs)
    if not text.strip():
        text = ""
    return {
        "target": _lane(f),
        "text": text,
        "attachment_ids": media_refs,
        "client_id": fields.req_str(f, "client_id", max_len=128),
        "auto_thread": auto,
        "reply_to": fields.opt_str(f, "reply_to", max_len=MESSAGE_ID_MAX),
    }


def _role(event: Json, role: str) -> str:
    """Seed 06 §6.5: a cron delivery is a message of role "cron" (kind "cron" as well)."""
    return "cron" if event.get("kind") == "cron" else role


def _hex_id(f: Json, key: str, *, required: bool = True) -> str | None:
    value = f.get(key)
    if value is None and not required:
        return None
    if not attachments.valid_id(value):
        raise FrameRejected("bad_request", f"{key} must be a 32-hex id", f.get("request_id"))
    return str(value)


def _media_upload_start(f: Json) -> Json:
    size = f.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise FrameRejected("bad_request", "size must be a positive integer", f.get("request_id"))
    sha256 = f.get("sha256")
    if not isinstance(sha256, str) or not attachments.SHA256_RE.match(sha256.lower()):
        raise FrameRejected("bad_request", "sha256 must be 64 hex digits", f.get("request_id"))
    return {
        **_lane(f),
        "upload_id": _hex_id(f, "upload_id", required=False),
        "filename": fields.opt_str(f, "filename", max_len=1024),
        "mime": fields.opt_str(f, "mime", max_len=255),
        "size": size,
        "sha256": sha256.lower(),
    }


def _media_upload_chunk(f: Json) -> Json:
    data = f.get("data")
    if not isinstance(data, str) or len(data) > (attachments.CHUNK_MAX_BYTES + 2) // 3 * 4:
        raise FrameRejected(
            "bad_request",
            f"data must be base64 of at most {attachments.CHUNK_MAX_BYTES} bytes",
            f.get("request_id"),
        )
    return {"upload_id": _hex_id(f, "upload_id"), "offset": _cursor(f, "offset"), "data": data}


def cursor_rule(key: str = "cursor") -> str:
    return f"{key} must be an integer from 0 to 2^63-1"


def _cursor(f: Json, key: str = "cursor") -> int:
    value = f.get(key, 0)
    if not valid_cursor(value):
        raise FrameRejected("bad_request", cursor_rule(key), f.get("request_id"))
    return int(value)


def valid_cursor(value: Any) -> bool:
    """An integer SQLite can hold, not negative (JSON true is not 1 here)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_CURSOR


def _channel_create(f: Json) -> Json:
    kind = f.get("kind", "channel")
    if kind not in ("channel", "thread"):
        raise FrameRejected("bad_request", "kind must be channel or thread", f.get("request_id"))
    return {
        "kind": kind,
        "name": fields.opt_str(f, "name", max_len=400),
        "parent_chat_id": fields.opt_str(f, "parent_chat_id", max_len=128),
    }


def _search(f: Json) -> Json:
    scope = f.get("scope", "all")
    if scope not in ("all", "chat"):
        raise FrameRejected("bad_request", "scope must be all or chat", f.get("request_id"))
    return {
        "query": fields.text(f, "query", required=False)[:4096],
        "scope": scope,
        "chat_id": fields.opt_str(f, "chat_id", max_len=128),
        "thread_id": fields.opt_str(f, "thread_id", max_len=64),
        "limit": fields.opt_int(f, "limit", lo=1, hi=200, default=50),
    }


def _admin(f: Json, **args: Any) -> Json:
    secret = fields.opt_str(f, "admin_token", max_len=512)
    return {"admin_digest": token_digest(secret) if secret else None, **args}


def _new_token(f: Json) -> str:
    token = fields.req_str(f, "token", max_len=512)
    if len(token) < 32 or not all(c.isascii() and (c.isalnum() or c in "._~-") for c in token):
        raise FrameRejected(
            "bad_request", "token must be 32-512 characters of [A-Za-z0-9._~-]", f.get("request_id")
        )
    return token


def _history(f: Json) -> cmds.HistoryArgs:
    return {
        "target": _lane(f),
        "limit": fields.opt_int(f, "limit", lo=1, hi=500, default=100) or 100,
        "before_message_id": fields.opt_str(f, "before_message_id", max_len=MESSAGE_ID_MAX),
        "view": "live",
    }


def _toggle(f: Json) -> cmds.ChannelToggleArgs:
    return {"chat_id": fields.req_str(f, "chat_id", max_len=128), "on": fields.req_bool(f, "on")}


def _same(spec: cmds.CommandSpec[Any], decode: Any) -> fields.Decoder:
    return (spec.name, decode)


# Iris frame type → the canonical command it is (most are named alike).
_DECODERS: dict[str, fields.Decoder] = {
    "message.send": _same(cmds.MESSAGE_SEND, _message_send),
    "sync": _same(cmds.SYNC, lambda f: {"cursor": _cursor(f)}),
    "ack": _same(cmds.ACK, lambda f: {"cursor": _cursor(f)}),
    "read.receipt": _same(
        cmds.READ_RECEIPT,
        lambda f: {
            "message_id": fields.req_str(f, "message_id", max_len=MESSAGE_ID_MAX),
            "cursor": _cursor(f),
        },
    ),
    "run.cancel": _same(
        cmds.RUN_CANCEL,
        lambda f: {"target": _lane(f), "run_id": fields.opt_str(f, "run_id", max_len=64)},
    ),
    "history": _same(cmds.HISTORY, _history),
    "channel.list": _same(cmds.CHANNEL_LIST, lambda f: {"activity": False}),
    "channel.create": _same(cmds.CHANNEL_CREATE, _channel_create),
    "channel.rename": _same(
        cmds.CHANNEL_RENAME,
        lambda f: {"target": _lane(f), "name": fields.opt_str(f, "name", max_len=400) or ""},
    ),
    "channel.set_default": _same(
        cmds.CHANNEL_SET_DEFAULT, lambda f: {"chat_id": fields.req_str(f, "chat_id", max_len=128)}
    ),
    "channel.delete": _same(
        cmds.CHANNEL_DELETE, lambda f: {"target": _lane(f), "purge_history": False}
    ),
    "channel.set_automation": _same(cmds.CHANNEL_SET_AUTOMATION, _toggle),
    "channel.set_threads": _same(cmds.CHANNEL_SET_THREADS, _toggle),
    "search": _same(cmds.SEARCH, _search),
    "picker.select": _same(
        cmds.PICKER_SELECT,
        lambda f: {
            "picker_id": fields.req_str(f, "picker_id", max_len=64),
            "value": fields.req_str(f, "value", max_len=2000),
        },
    ),
    "fcm.register": _same(
        cmds.FCM_REGISTER, lambda f: {"token": fields.req_str(f, "token", max_len=4096)}
    ),
    # Media frames are handled on the edge (edge/media.py, docs/protocol/media.md).
    "media.upload.start": ("media.upload.start", _media_upload_start),
    "media.upload.chunk": ("media.upload.chunk", _media_upload_chunk),
    "media.pull": (
        "media.pull",
        lambda f: {"media_id": _hex_id(f, "media_id"), "offset": _cursor(f, "offset")},
    ),
    # Admin frames (docs/operations.md): only the admin token's digest goes on the bus.
    "admin.devices.list": _same(cmds.ADMIN_DEVICES_LIST, lambda f: _admin(f)),
    "admin.devices.revoke": _same(
        cmds.ADMIN_DEVICES_REVOKE,
        lambda f: _admin(f, device_id=fields.req_str(f, "device_id", max_len=128)),
    ),
    "admin.token.rotate": _same(cmds.ADMIN_TOKEN_ROTATE, lambda f: _admin(f, token=_new_token(f))),
}

_LANE_KEYS = ("chat_id", "thread_id")
_PICKER_NAMES = {
    "approval.request": "picker.approval",
    "clarify.request": "picker.clarify",
    "approval.resolved": "picker.resolved",
    "clarify.resolved": "picker.resolved",
}
_NOT_IRIS = frozenset({"lane", "conversation_id", "approval_id", "clarify_id", "session_key"})


def encode_reply(reply: Json) -> Json | None:
    """A canonical reply (canonical.model.replies) as the iris frame answering it."""
    return fields.answering(_frame_of_reply(reply))


def _frame_of_reply(reply: Json) -> Json | None:
    kind = reply.get("type")
    if kind == "error":
        frame = fields.error_frame(reply["code"], reply["message"], reply.get("request_id"))
        if reply.get("client_id") is not None:
            frame["client_id"] = reply["client_id"]
        return frame
    if kind == "send.accepted":
        ack: Json = {"type": "message.ack"}
        for key in ("conversation_id", "chat_id", "thread_id", "run_id", "client_id"):
            ack[key] = reply.get(key)
        if reply.get("request_id") is not None:  # a direct answer echoes it
            ack["request_id"] = reply["request_id"]
        return ack
    if kind == "history" and "conversation" in reply:
        return {k: v for k, v in reply.items() if k != "conversation"}
    return reply


_SAME_NAME = frozenset(
    {
        "sync",
        "ack",
        "read.receipt",
        "channel.create",
        "channel.set_default",
        "channel.set_automation",
        "channel.set_threads",
        "search",
        "picker.select",
        "fcm.register",
    }
)


def encode_command(cmd: str, args: Json) -> Json | None:
    """The iris frame a canonical command is decoded from, or None when iris cannot say
    it (a conversation id, a send without a client id, the admin token behind a digest...)."""
    if cmd in _SAME_NAME:
        return {"type": cmd, **args}
    if cmd == "channel.list" and not args["activity"]:
        return {"type": cmd}
    target = args.get("target")
    if not (isinstance(target, dict) and "chat_id" in target):
        return None
    lane = {"chat_id": target["chat_id"], "thread_id": target["thread_id"]}
    if cmd == "message.send" and args["client_id"] is not None:
        frame: Json = {
            "type": cmd,
            **lane,
            "text": args["text"],
            "client_id": args["client_id"],
            "auto_thread": args["auto_thread"],
            "reply_to": args["reply_to"],
        }
        if args["attachment_ids"]:
            frame["media_refs"] = args["attachment_ids"]
        return frame
    if cmd == "run.cancel":
        return {"type": cmd, **lane, "run_id": args["run_id"]}
    if cmd == "history" and args["view"] == "live":
        return {
            "type": cmd,
            **lane,
            "limit": args["limit"],
            "before_message_id": args["before_message_id"],
        }
    if cmd == "channel.rename":
        return {"type": cmd, **lane, "name": args["name"]}
    if cmd == "channel.delete" and not args["purge_history"]:
        return {"type": cmd, **lane}
    return None


class IrisDialect:
    name = "iris"

    def decode(self, frame: Json) -> Json:
        return fields.decode_with(_DECODERS, frame)

    def encode_event(self, event: Json) -> Json | None:
        kind = event["type"]
        lane = event.get("lane") or (None, None)
        base: Json = {"chat_id": lane[0], "thread_id": lane[1], "cursor": event.get("cursor")}
        if kind == "run.accepted":
            out = {"type": "run.started", **base, "run_id": event["run_id"]}
            if event.get("client_id") is not None:
                out["client_id"] = event["client_id"]
            return out
        if kind == "message.start":
            return {
                "type": "message.start",
                **base,
                "run_id": event["run_id"],
                "message_id": event["message_id"],
                "role": _role(event, "assistant"),
            }
        if kind == "message.delta":
            reply = event.get("reply", event["text"])
            if not reply:
                return None  # only commentary so far: nothing of the reply to show
            return {
                "type": "message.update",
                **base,
                "message_id": event["message_id"],
                "text": reply,
            }
        if kind == "message.complete":
            out = {
                "type": "message",
                **base,
                "message_id": event["message_id"],
                "role": _role(event, event.get("role", "assistant")),
                "kind": event.get("kind", "reply"),
                "text": event.get("reply", event["text"]),
                "ts": event["ts"],
            }
            for key in ("run_id", "reasoning", "client_id", "device_id", "cron_job"):
                if event.get(key) is not None:
                    out[key] = event[key]
            return out
        if kind == "run.finished":
            out = {
                "type": "run.finished",
                **base,
                "run_id": event["run_id"],
                "status": event["status"],
            }
            if event.get("error"):
                out["error"] = event["error"]
            return out
        if kind == "tool.event":
            status = event.get("status")
            name = "tool.start" if status == "running" else "tool.end"
            body = {
                k: v
                for k, v in event.items()
                if k not in ("type", "lane", "conversation_id", "cursor")
            }
            return {"type": name, **base, **body}
        if kind == "typing":
            return {
                "type": "typing",
                "chat_id": lane[0],
                "thread_id": lane[1],
                "on": event.get("on", True),
            }
        if kind == "attachment.added":
            attachment = event["attachment"]
            return {
                "type": "media.offer",
                **base,
                "media_id": attachment["attachment_id"],
                "mime": attachment["mime_type"],
                "size": attachment["size"],
                "filename": attachment["filename"],
                "kind": attachment["kind"],
                "inline_image": attachment["inline_image"],
                "direction": attachment["direction"],
                "message_id": attachment["message_id"],
                "expires_at": attachment["expires_at"],
                "ts": event.get("ts"),
            }
        if kind in _PICKER_NAMES:
            # Approvals and clarifications are pickers in this dialect.
            body = {k: v for k, v in event.items() if k not in _NOT_IRIS}
            return {**body, "type": _PICKER_NAMES[kind], **base}
        if kind.startswith(("channel.", "picker.", "commentary", "media.")):
            body = {k: v for k, v in event.items() if k not in ("lane", "conversation_id")}
            if "lane" in event:
                body.update(base)
            return body
        if kind.startswith(("yolo.", "model.", "reasoning.")):
            # A conversation's preference names its lane and its conversation id (the one
            # pheby devices know it by); a global one names neither.
            body = {k: v for k, v in event.items() if k != "lane"}
            if "lane" in event:
                body.update(base)
            return body
        return None

    def encode_reply(self, reply: Json) -> Json | None:
        return encode_reply(reply)

    def encode_command(self, cmd: str, args: Json) -> Json | None:
        return encode_command(cmd, args)

    def error_frame(self, code: str, message: str, request_id: Any = None) -> Json:
        return fields.error_frame(code, message, request_id)


__all__ = ["IRIS_VERSION", "IrisDialect", "_LANE_KEYS"]

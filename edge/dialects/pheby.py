"""Pheby Protocol v1 codec (spec/pheby-protocol-v1.md), exact field names and codes."""

from __future__ import annotations

from typing import Any

from canonical.protocol import MAX_HISTORY

from ..errors import FrameRejected
from . import fields

Json = dict[str, Any]

PROTOCOL_VERSION = 1
APPROVAL_CHOICES = ("once", "session", "always", "deny")
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra")


def _conversation(frame: Json) -> str:
    return fields.req_str(frame, "conversation_id", max_len=64)


def _args_chat_send(f: Json) -> Json:
    return {
        "conversation_id": _conversation(f),
        "text": fields.text(f),
        "attachment_ids": fields.str_list(f, "attachment_ids", max_items=10),
    }


def _args_open(f: Json) -> Json:
    return {
        "conversation_id": _conversation(f),
        "limit": fields.opt_int(f, "limit", lo=1, hi=MAX_HISTORY, default=200),
        "before_message_id": fields.opt_str(f, "before_message_id", max_len=64),
    }


def _args_approval(f: Json) -> Json:
    choice = f.get("choice")
    if choice not in APPROVAL_CHOICES:
        raise FrameRejected(
            "bad_request", "choice must be once, session, always or deny", f.get("request_id")
        )
    return {
        "approval_id": fields.req_str(f, "approval_id", max_len=64),
        "choice": choice,
        "reason": fields.opt_str(f, "reason", max_len=2000),
    }


def _args_reasoning_set(f: Json) -> Json:
    effort = f.get("effort")
    if effort not in REASONING_EFFORTS:
        raise FrameRejected(
            "bad_request",
            "effort must be one of " + ", ".join(REASONING_EFFORTS),
            f.get("request_id"),
        )
    return {"effort": effort, "conversation_id": fields.opt_ref(f, "conversation_id")}


_DECODERS: dict[str, Any] = {
    "conversation.list": lambda f: {},
    "conversation.create": lambda f: {"name": fields.opt_str(f, "name", max_len=100)},
    "conversation.open": _args_open,
    "conversation.rename": lambda f: {
        "conversation_id": _conversation(f),
        "name": fields.req_str(f, "name", max_len=100),
    },
    "conversation.delete": lambda f: {"conversation_id": _conversation(f)},
    "chat.send": _args_chat_send,
    "run.cancel": lambda f: {
        "conversation_id": _conversation(f),
        "run_id": fields.opt_str(f, "run_id", max_len=64),
    },
    "approval.respond": _args_approval,
    "clarify.respond": lambda f: {
        "clarify_id": fields.req_str(f, "clarify_id", max_len=64),
        "response": fields.text(f, "response"),
    },
    "yolo.current": lambda f: {"conversation_id": _conversation(f)},
    "yolo.set": lambda f: {
        "conversation_id": _conversation(f),
        "enabled": fields.req_bool(f, "enabled"),
    },
    "models.list": lambda f: {"conversation_id": fields.opt_ref(f, "conversation_id")},
    "models.current": lambda f: {"conversation_id": fields.opt_ref(f, "conversation_id")},
    "model.set": lambda f: {
        "model": fields.name_token(f, "model", max_len=200, required=True),
        "provider": fields.name_token(f, "provider", max_len=100, required=False),
        "conversation_id": fields.opt_ref(f, "conversation_id"),
    },
    "reasoning.current": lambda f: {"conversation_id": fields.opt_ref(f, "conversation_id")},
    "reasoning.set": _args_reasoning_set,
}


# Exact field sets of the spec's events (optional ones only when present).
_FIELDS: dict[str, tuple[str, ...]] = {
    "tool.event": (
        "type",
        "conversation_id",
        "run_id",
        "tool_call_id",
        "tool_name",
        "status",
        "args_redacted",
        "duration_ms",
        "error",
        "ts",
    ),
    "approval.request": (
        "type",
        "approval_id",
        "session_key",
        "conversation_id",
        "run_id",
        "command",
        "description",
        "choices",
        "ts",
    ),
    "approval.resolved": ("type", "approval_id", "choice", "accepted", "status", "request_id"),
    "clarify.request": (
        "type",
        "clarify_id",
        "session_key",
        "conversation_id",
        "run_id",
        "question",
        "choices",
        "allow_free_text",
        "ts",
    ),
    "clarify.resolved": ("type", "clarify_id", "accepted", "status", "request_id"),
    "yolo.changed": ("type", "enabled", "scope", "conversation_id"),
    # conversation_id when the scope is a conversation: other devices must know which one.
    "model.changed": ("type", "model", "provider", "scope", "conversation_id"),
    "reasoning.changed": ("type", "effort", "scope", "conversation_id"),
}
_ALWAYS = frozenset({"type", "conversation_id", "run_id", "choices", "choice", "duration_ms"})


def _pick(event: Json, keys: tuple[str, ...]) -> Json:
    status = event.get("status")
    out: Json = {}
    for key in keys:
        if key == "args_redacted" and status != "running":
            continue
        if key == "duration_ms" and event.get("type") == "tool.event" and status == "running":
            continue
        if key in event and (event[key] is not None or key in _ALWAYS):
            out[key] = event[key]
    return out


class PhebyDialect:
    name = "pheby"

    def decode(self, frame: Json) -> Json:
        return fields.decode_with(_DECODERS, frame)

    def encode_event(self, event: Json) -> Json | None:
        kind = event["type"]
        cid = event.get("conversation_id")
        if kind == "run.accepted":
            out: Json = {"type": kind, "conversation_id": cid, "run_id": event["run_id"]}
            if event.get("request_id") is not None:
                out["request_id"] = event["request_id"]
            return out
        if kind == "message.start":
            return {
                "type": kind,
                "conversation_id": cid,
                "run_id": event["run_id"],
                "message_id": event["message_id"],
            }
        if kind == "message.delta":
            return {
                "type": kind,
                "conversation_id": cid,
                "message_id": event["message_id"],
                "text": event["text"],
                "ts": event["ts"],
            }
        if kind == "message.complete":
            if event.get("role") == "user":
                return None
            out = {
                "type": kind,
                "conversation_id": cid,
                "message_id": event["message_id"],
                "text": event["text"],
                "ts": event["ts"],
            }
            if event.get("kind") == "notice":
                out["kind"] = "notice"
            return out
        if kind == "run.finished":
            out = {
                "type": kind,
                "conversation_id": cid,
                "run_id": event["run_id"],
                "status": event["status"],
            }
            if event.get("status") == "failed":
                out["error"] = event.get("error") or "run failed"
            return out
        if kind in _FIELDS:
            return _pick(event, _FIELDS[kind])
        if kind in ("channel.created", "channel.renamed"):
            entry = event["entry"]
            if entry.get("archived"):
                return None
            name = "conversation.renamed" if kind == "channel.renamed" else "conversation.updated"
            return {
                "type": name,
                "conversation_id": entry["conversation_id"],
                "name": entry["name"],
            }
        if kind == "channel.deleted":
            return {
                "type": "conversation.deleted",
                "conversation_id": event["entry"]["conversation_id"],
            }
        if kind in ("picker.confirm", "picker.choice", "picker.model"):
            # Pheby has no pickers: show Hermes' prompt as a notice; typed slash commands
            # (/approve, /cancel, /model <name>) answer it.
            text = event.get("message") or event.get("title") or "Choose an option"
            return {
                "type": "message.complete",
                "conversation_id": cid,
                "message_id": f"picker-{event.get('picker_id')}",
                "text": text,
                "ts": event.get("ts"),
                "kind": "notice",
            }
        if kind.startswith(("attachment.", "conversation.")):
            return _pick(
                event,
                tuple(k for k in event if k not in ("cursor", "lane", "chat_id", "thread_id")),
            )
        return None

    def encode_reply(self, reply: Json) -> Json | None:
        if reply.get("type") == "error":
            return self.error_frame(reply["code"], reply["message"], reply.get("request_id"))
        if reply.get("dialect_only") not in (None, "pheby"):
            return None
        return {k: v for k, v in reply.items() if k != "dialect_only"}

    def error_frame(self, code: str, message: str, request_id: Any = None) -> Json:
        return fields.error_frame(code, message, request_id)

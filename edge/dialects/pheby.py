"""Pheby Protocol v1 codec (spec/pheby-protocol-v1.md), exact field names and codes."""

from __future__ import annotations

from typing import Any

from canonical.model import Json
from canonical.model import commands as cmds
from canonical.model.commands import ConversationRef
from canonical.protocol import MAX_HISTORY

from ..errors import FrameRejected
from . import fields

PROTOCOL_VERSION = 1
APPROVAL_CHOICES = ("once", "session", "always", "deny")
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra")
NEW_CONVERSATION = "New chat"  # the name of a conversation created without one


def _conversation(frame: Json) -> str:
    return fields.req_str(frame, "conversation_id", max_len=64)


def _target(frame: Json) -> ConversationRef:
    """Pheby names every lane by its conversation id."""
    return {"conversation_id": _conversation(frame)}


def _chat_send(f: Json) -> cmds.MessageSendArgs:
    return {
        "target": _target(f),
        "text": fields.text(f),
        "attachment_ids": fields.str_list(f, "attachment_ids", max_items=10),
        "client_id": None,
        "auto_thread": False,
        "reply_to": None,
    }


def _open(f: Json) -> cmds.HistoryArgs:
    return {
        "target": _target(f),
        "limit": fields.opt_int(f, "limit", lo=1, hi=MAX_HISTORY, default=200) or 200,
        "before_message_id": fields.opt_str(f, "before_message_id", max_len=64),
        "view": "conversation",
    }


def _approval(f: Json) -> cmds.ApprovalRespondArgs:
    choice = f.get("choice")
    if choice not in APPROVAL_CHOICES:
        raise FrameRejected(
            "bad_request", "choice must be once, session, always or deny", f.get("request_id")
        )
    return {
        "approval_id": fields.req_str(f, "approval_id", max_len=64),
        "choice": str(choice),
        "reason": fields.opt_str(f, "reason", max_len=2000),
    }


def _reasoning_set(f: Json) -> cmds.ReasoningSetArgs:
    effort = f.get("effort")
    if effort not in REASONING_EFFORTS:
        raise FrameRejected(
            "bad_request",
            "effort must be one of " + ", ".join(REASONING_EFFORTS),
            f.get("request_id"),
        )
    return {"effort": str(effort), "conversation_id": fields.opt_ref(f, "conversation_id")}


def _scope(f: Json) -> cmds.ScopeArgs:
    return {"conversation_id": fields.opt_ref(f, "conversation_id")}


def _model_set(f: Json) -> cmds.ModelSetArgs:
    return {
        "model": str(fields.name_token(f, "model", max_len=200, required=True)),
        "provider": fields.name_token(f, "provider", max_len=100, required=False),
        "conversation_id": fields.opt_ref(f, "conversation_id"),
    }


# Pheby frame type → the canonical command it is. A conversation is a lane named by its
# conversation id: its list, history, renames and deletes are the channel commands.
_DECODERS: dict[str, fields.Decoder] = {
    "conversation.list": (cmds.CHANNEL_LIST.name, lambda f: {"activity": True}),
    "conversation.create": (
        cmds.CHANNEL_CREATE.name,
        lambda f: {
            "kind": "channel",
            "name": fields.opt_str(f, "name", max_len=100) or NEW_CONVERSATION,
            "parent_chat_id": None,
        },
    ),
    "conversation.open": (cmds.HISTORY.name, _open),
    "conversation.rename": (
        cmds.CHANNEL_RENAME.name,
        lambda f: {"target": _target(f), "name": fields.req_str(f, "name", max_len=100)},
    ),
    "conversation.delete": (
        cmds.CHANNEL_DELETE.name,
        lambda f: {"target": _target(f), "purge_history": True},
    ),
    "chat.send": (cmds.MESSAGE_SEND.name, _chat_send),
    "run.cancel": (
        cmds.RUN_CANCEL.name,
        lambda f: {"target": _target(f), "run_id": fields.opt_str(f, "run_id", max_len=64)},
    ),
    "approval.respond": (cmds.APPROVAL_RESPOND.name, _approval),
    "clarify.respond": (
        cmds.CLARIFY_RESPOND.name,
        lambda f: {
            "clarify_id": fields.req_str(f, "clarify_id", max_len=64),
            "response": fields.text(f, "response"),
        },
    ),
    "yolo.current": (cmds.YOLO_CURRENT.name, lambda f: {"conversation_id": _conversation(f)}),
    "yolo.set": (
        cmds.YOLO_SET.name,
        lambda f: {"conversation_id": _conversation(f), "enabled": fields.req_bool(f, "enabled")},
    ),
    "models.list": (cmds.MODELS_LIST.name, _scope),
    "models.current": (cmds.MODELS_CURRENT.name, _scope),
    "model.set": (cmds.MODEL_SET.name, _model_set),
    "reasoning.current": (cmds.REASONING_CURRENT.name, _scope),
    "reasoning.set": (cmds.REASONING_SET.name, _reasoning_set),
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


# The channel store's refusals, as pheby names them (it knows conversations only).
_CHANNEL_CODES = {
    "not_found": "conversation_not_found",
    "archived": "conversation_not_found",
    "unsupported": "bad_request",
}
# Channel results, as the pheby reply to the conversation command that asked.
_RESULTS = {
    "channel.create": "conversation.created",
    "channel.rename": "conversation.renamed",
    "channel.delete": "conversation.deleted",
}


def encode_reply(reply: Json) -> Json | None:
    """A canonical reply (canonical.model.replies) as the pheby frame answering it."""
    return fields.answering(_frame_of_reply(reply))


def _frame_of_reply(reply: Json) -> Json | None:
    kind = reply.get("type")
    if kind == "error":
        code = reply["code"]
        if reply.get("subject") == "channel":
            code = _CHANNEL_CODES.get(code, code)
        return fields.error_frame(code, reply["message"], reply.get("request_id"))
    if kind == "send.accepted":
        if reply.get("announced"):
            return None  # the broadcast run.accepted carries the request id: the answer
        return {
            "type": "run.accepted",
            "conversation_id": reply["conversation_id"],
            "run_id": reply["run_id"],
            "request_id": reply.get("request_id"),
        }
    if kind == "result" and reply.get("op") in _RESULTS:
        entry = reply["entry"]
        out: Json = {"type": _RESULTS[reply["op"]], "conversation_id": entry["conversation_id"]}
        if reply["op"] != "channel.delete":
            out["name"] = entry["name"]
        out["request_id"] = reply.get("request_id")
        return out
    if kind == "channel.list":
        return {
            "type": "conversation.snapshot",
            "request_id": reply.get("request_id"),
            "conversations": [
                {
                    "conversation_id": c["conversation_id"],
                    "name": c["name"],
                    "session_id": c.get("session_id"),
                    "last_active": c.get("last_active"),
                    "source": "hermes",
                }
                for c in reply["channels"]
            ],
        }
    if kind == "history":
        state = reply.get("conversation")
        if state is None:
            return None  # the live view: pheby asks for the conversation's own
        return {
            "type": "conversation.history",
            "conversation_id": state["conversation_id"],
            "request_id": reply.get("request_id"),
            "messages": reply["messages"],
            "has_more": reply["has_more"],
            "attachments": state["attachments"],
            "run": state["run"],
            "tools": state["tools"],
            "approvals": state["approvals"],
            "clarifications": state["clarifications"],
        }
    return reply


def _some(kind: str, args: Json) -> Json:
    return {"type": kind, **{k: v for k, v in args.items() if v is not None}}


_SAME_NAME = frozenset(
    {
        "approval.respond",
        "clarify.respond",
        "yolo.current",
        "yolo.set",
        "models.list",
        "models.current",
        "model.set",
        "reasoning.current",
        "reasoning.set",
    }
)


def encode_command(cmd: str, args: Json) -> Json | None:
    """The pheby frame a canonical command is decoded from, or None when pheby cannot say
    it (a lane named by chat id, a client id, threads, channels' settings...)."""
    target = args.get("target")
    by_conversation = isinstance(target, dict) and set(target) == {"conversation_id"}
    if cmd in _SAME_NAME:
        return _some(cmd, args)
    if cmd == "channel.list" and args["activity"]:
        return {"type": "conversation.list"}
    if cmd == "channel.create" and args["kind"] == "channel" and not args["parent_chat_id"]:
        return _some("conversation.create", {"name": args["name"]})
    if not by_conversation or target is None:
        return None
    cid = target["conversation_id"]
    if cmd == "history" and args["view"] == "conversation":
        return _some(
            "conversation.open",
            {
                "conversation_id": cid,
                "limit": args["limit"],
                "before_message_id": args["before_message_id"],
            },
        )
    if cmd == "channel.rename":
        return {"type": "conversation.rename", "conversation_id": cid, "name": args["name"]}
    if cmd == "channel.delete" and args["purge_history"]:
        return {"type": "conversation.delete", "conversation_id": cid}
    if cmd == "run.cancel":
        return _some("run.cancel", {"conversation_id": cid, "run_id": args["run_id"]})
    if cmd == "message.send" and (
        args["client_id"] is None and not args["auto_thread"] and args["reply_to"] is None
    ):
        return {
            "type": "chat.send",
            "conversation_id": cid,
            "text": args["text"],
            "attachment_ids": args["attachment_ids"],
        }
    return None


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
        return encode_reply(reply)

    def encode_command(self, cmd: str, args: Json) -> Json | None:
        return encode_command(cmd, args)

    def error_frame(self, code: str, message: str, request_id: Any = None) -> Json:
        return fields.error_frame(code, message, request_id)

"""Per-conversation choices: YOLO, model and reasoning effort (pheby frames; iris reaches the
same Hermes logic through slash commands and pickers).

YOLO lives in Hermes' memory only, so the plugin persists it and restores it at start.
Model and reasoning changes go through Hermes' own /model and /reasoning handlers, so
validation, credentials and persistence are exactly Hermes'.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from canonical.protocol import now_iso

from .errors import CommandError

if TYPE_CHECKING:
    from .channel_store import ChannelEntry
    from .controller import Controller

Json = dict[str, Any]
Lane = tuple[str, str | None]


def _failed(text: str) -> bool:
    return text.lstrip().startswith(("❌", "⚠️ Unknown", "Error", "Unknown"))


class Preferences:
    def __init__(self, controller: Controller) -> None:
        self.c = controller

    # -- YOLO, persisted across gateway restarts
    def restore_yolo(self) -> None:
        for session_key in self.c.outbox.meta_keys("yolo:"):
            self.c.agent.set_yolo(session_key, True)

    def _entry(self, args: Json) -> ChannelEntry:
        return self.c.commands._entry_for_conversation(str(args["conversation_id"]))

    def _lane_of(self, args: Json) -> Lane:
        if args.get("conversation_id"):
            entry = self._entry(args)
            return (entry.chat_id, entry.thread_id)
        return (self.c.settings.home_channel, None)

    async def cmd_yolo_current(self, command: Json, args: Json) -> None:
        entry = self._entry(args)
        enabled = self.c.agent.yolo_enabled(
            self.c.agent.session_key((entry.chat_id, entry.thread_id))
        )
        await self.c.reply(
            command,
            {
                "type": "yolo.snapshot",
                "enabled": enabled,
                "scope": "conversation",
                "conversation_id": entry.conversation_id,
                "request_id": command.get("request_id"),
            },
        )

    async def cmd_yolo_set(self, command: Json, args: Json) -> None:
        entry = self._entry(args)
        key = self.c.agent.session_key((entry.chat_id, entry.thread_id))
        enabled = bool(args["enabled"])
        self.c.agent.set_yolo(key, enabled)
        if enabled:
            self.c.outbox.set_meta(
                f"yolo:{key}", json.dumps({"conversation_id": entry.conversation_id})
            )
        else:
            self.c.outbox.delete_meta(f"yolo:{key}")
        changed = {
            "type": "yolo.changed",
            "enabled": enabled,
            "scope": "conversation",
            "conversation_id": entry.conversation_id,
        }
        await self.c.reply(command, {**changed, "request_id": command.get("request_id")})
        self.c.emit([{**changed, "lane": [entry.chat_id, entry.thread_id]}])

    # -- models
    async def cmd_models_list(self, command: Json, args: Json) -> None:
        lane = self._lane_of(args)
        data = await self.c.agent.model_picker_data(lane)
        model, provider, scope = self.c.agent.model_state(lane)
        await self.c.reply(
            command,
            {
                "type": "models.snapshot",
                "request_id": command.get("request_id"),
                "providers": [
                    {
                        "slug": p.get("slug"),
                        "name": p.get("name"),
                        "is_current": bool(p.get("is_current")),
                        "models": list(p.get("models") or []),
                        "total_models": int(p.get("total_models") or len(p.get("models") or [])),
                    }
                    for p in data.get("providers", [])
                ],
                "current_model": model or data.get("current_model"),
                "current_provider": provider or data.get("current_provider"),
                "scope": scope,
                "supported_reasoning_efforts": [
                    e for e in self.c.agent.reasoning_efforts() if e != "none"
                ],
                "ts": now_iso(),
            },
        )

    async def cmd_models_current(self, command: Json, args: Json) -> None:
        lane = self._lane_of(args)
        model, provider, scope = self.c.agent.model_state(lane)
        reply: Json = {
            "type": "model.current",
            "request_id": command.get("request_id"),
            "model": model,
            "provider": provider,
            "scope": scope,
            "ts": now_iso(),
        }
        if args.get("conversation_id"):
            reply["conversation_id"] = args["conversation_id"]
        await self.c.reply(command, reply)

    async def cmd_model_set(self, command: Json, args: Json) -> None:
        scope = "conversation" if args.get("conversation_id") else "global"
        lane = self._lane_of(args)
        text = await self.c.agent.set_model(lane, str(args["model"]), args.get("provider"), scope)
        if _failed(text):
            raise CommandError("bad_request", text.strip()[:500])
        model, provider, _ = self.c.agent.model_state(lane)
        changed: Json = {
            "type": "model.changed",
            "model": model or args["model"],
            "provider": provider or args.get("provider"),
            "scope": scope,
        }
        if scope == "conversation":
            changed["conversation_id"] = args["conversation_id"]
        await self.c.reply(command, {**changed, "request_id": command.get("request_id")})
        self.c.emit([{**changed, "lane": list(lane)}])

    # -- reasoning
    async def cmd_reasoning_current(self, command: Json, args: Json) -> None:
        lane = self._lane_of(args)
        effort, enabled, scope = self.c.agent.reasoning_state(lane)
        reply: Json = {
            "type": "reasoning.snapshot",
            "request_id": command.get("request_id"),
            "effort": effort,
            "enabled": enabled,
            "scope": scope,
            "supported_efforts": self.c.agent.reasoning_efforts(),
            "ts": now_iso(),
        }
        if args.get("conversation_id"):
            reply["conversation_id"] = args["conversation_id"]
        await self.c.reply(command, reply)

    async def cmd_reasoning_set(self, command: Json, args: Json) -> None:
        effort = str(args["effort"])
        if effort not in self.c.agent.reasoning_efforts():
            raise CommandError(
                "bad_request",
                "effort must be one of " + ", ".join(self.c.agent.reasoning_efforts()),
            )
        scope = "conversation" if args.get("conversation_id") else "global"
        lane = self._lane_of(args)
        text = await self.c.agent.set_reasoning(lane, effort, scope)
        if _failed(text):
            raise CommandError("bad_request", text.strip()[:500])
        changed: Json = {"type": "reasoning.changed", "effort": effort, "scope": scope}
        if scope == "conversation":
            changed["conversation_id"] = args["conversation_id"]
        await self.c.reply(command, {**changed, "request_id": command.get("request_id")})
        self.c.emit([{**changed, "lane": list(lane)}])

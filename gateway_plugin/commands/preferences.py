"""Per-conversation choices: YOLO, model and reasoning effort (pheby frames; iris reaches the
same Hermes logic through slash commands and pickers).

YOLO lives in Hermes' memory only, so the plugin persists it and restores it at start.
Hermes' own /yolo toggles it too: after a device's slash command the flag is compared with
what the plugin knows, and a change is persisted and broadcast like a `yolo.set`.
Model and reasoning changes go through Hermes' own /model and /reasoning handlers, so
validation, credentials and persistence are exactly Hermes'.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from canonical.model import Json, Lane
from canonical.model import commands as cmds
from canonical.protocol import now_iso
from gateway_plugin.errors import CommandError
from gateway_plugin.storage.locked import retry_locked

if TYPE_CHECKING:
    from gateway_plugin.channels.store import ChannelEntry
    from gateway_plugin.controller import Controller


def _failed(text: str) -> bool:
    return text.lstrip().startswith(("❌", "⚠️ Unknown", "Error", "Unknown"))


class Preferences:
    def __init__(self, controller: Controller) -> None:
        self.c = controller
        add = controller.commands.registry.add
        add(cmds.YOLO_CURRENT, self.cmd_yolo_current)
        add(cmds.YOLO_SET, self.cmd_yolo_set)
        add(cmds.MODELS_LIST, self.cmd_models_list)
        add(cmds.MODELS_CURRENT, self.cmd_models_current)
        add(cmds.MODEL_SET, self.cmd_model_set)
        add(cmds.REASONING_CURRENT, self.cmd_reasoning_current)
        add(cmds.REASONING_SET, self.cmd_reasoning_set)
        # Session keys whose YOLO is on, as recorded in the outbox (kept in memory so a
        # comparison with Hermes' flag costs no read).
        self._yolo: set[str] = set()
        # Lanes a device sent a slash command to, until Hermes answers it: the session
        # key to compare (Hermes' /yolo changes the flag without telling anyone).
        self._watched: dict[Lane, str] = {}

    # -- YOLO, persisted across gateway restarts
    async def restore_yolo(self) -> None:
        for session_key in await self.c.sequencer.run(self.c.outbox.meta_keys, "yolo:"):
            self.c.agent.set_yolo(session_key, True)
            self._yolo.add(session_key)

    def _record_yolo(
        self, session_key: str, conversation_id: str | None, enabled: bool
    ) -> tuple[Callable[..., None], tuple[str, ...]]:
        """Note the flag; the outbox write that records it (to run on the outbox's thread)."""
        if enabled:
            self._yolo.add(session_key)
            record = json.dumps({"conversation_id": conversation_id})
            return self.c.outbox.set_meta, (f"yolo:{session_key}", record)
        self._yolo.discard(session_key)
        return self.c.outbox.delete_meta, (f"yolo:{session_key}",)

    def watch_command(self, lane: Lane) -> None:
        """A slash command goes to Hermes in this lane: it may be /yolo."""
        self._watched[lane] = self.c.agent.session_key(lane)

    def observe_yolo(self, lane: Lane, answered: bool) -> None:
        """Hermes sends into a lane: broadcast a YOLO change its command made. ``answered``
        (Hermes' reply to a message) ends the watch; another send, e.g. from a run the
        command arrived during, only looks."""
        key = self._watched.get(lane)
        if key is None:
            return
        if answered:
            del self._watched[lane]
        enabled = self.c.agent.yolo_enabled(key)
        if enabled == (key in self._yolo):
            return
        conversation_id = self.c.conversation_id(lane)
        write, args = self._record_yolo(key, conversation_id, enabled)
        # A synchronous Hermes callback: queued on the outbox's thread, not waited for.
        self.c.sequencer.thread.run_nowait(retry_locked, write, *args)
        self.c.emit(
            [
                {
                    "type": "yolo.changed",
                    "enabled": enabled,
                    "scope": "conversation",
                    "conversation_id": conversation_id,
                    "lane": list(lane),
                }
            ]
        )

    def _entry(self, args: Mapping[str, Any]) -> ChannelEntry:
        return self.c.commands._entry_for_conversation(str(args["conversation_id"]))

    def _lane_of(self, args: Mapping[str, Any]) -> Lane:
        if args.get("conversation_id"):
            entry = self._entry(args)
            return (entry.chat_id, entry.thread_id)
        return (self.c.settings.home_channel, None)

    async def cmd_yolo_current(self, command: Json, args: cmds.ConversationRef) -> None:
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

    async def cmd_yolo_set(self, command: Json, args: cmds.YoloSetArgs) -> None:
        entry = self._entry(args)
        key = self.c.agent.session_key((entry.chat_id, entry.thread_id))
        enabled = bool(args["enabled"])
        self.c.agent.set_yolo(key, enabled)
        write, record = self._record_yolo(key, entry.conversation_id, enabled)
        await self.c.sequencer.run(write, *record)
        changed = {
            "type": "yolo.changed",
            "enabled": enabled,
            "scope": "conversation",
            "conversation_id": entry.conversation_id,
        }
        await self.c.reply(command, {**changed, "request_id": command.get("request_id")})
        self.c.emit([{**changed, "lane": [entry.chat_id, entry.thread_id]}])

    # -- models
    async def cmd_models_list(self, command: Json, args: cmds.ScopeArgs) -> None:
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

    async def cmd_models_current(self, command: Json, args: cmds.ScopeArgs) -> None:
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

    async def cmd_model_set(self, command: Json, args: cmds.ModelSetArgs) -> None:
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
        await self._changed(command, changed, args, lane)

    async def _changed(
        self, command: Json, changed: Json, args: Mapping[str, Any], lane: Lane
    ) -> None:
        """Answer the asking device and tell every device. A conversation's change names
        it (its conversation_id, and its lane for iris); a global one names no lane."""
        broadcast = changed
        if changed["scope"] == "conversation":
            changed = {**changed, "conversation_id": args["conversation_id"]}
            broadcast = {**changed, "lane": list(lane)}
        await self.c.reply(command, {**changed, "request_id": command.get("request_id")})
        self.c.emit([broadcast])

    # -- reasoning
    async def cmd_reasoning_current(self, command: Json, args: cmds.ScopeArgs) -> None:
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

    async def cmd_reasoning_set(self, command: Json, args: cmds.ReasoningSetArgs) -> None:
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
        await self._changed(command, changed, args, lane)

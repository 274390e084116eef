"""Tool activity and the decisions Hermes waits for, as device events and commands.

Hermes → devices: tool hooks become `tool.event`; `send_exec_approval`, `send_clarify`,
`send_slash_confirm`, `send_model_picker` and `send_choice_picker` become requests every
device sees. Devices → Hermes: `approval.respond`, `clarify.respond` (pheby) and
`picker.select` (iris) resolve through Hermes' own resolvers; the one resolution is
broadcast so a second device's prompt closes too. A prompt Hermes stopped waiting for is
reported as expired, never as a denial.
"""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any

from canonical.model import Json, Lane
from canonical.model import commands as cmds
from canonical.protocol import now_iso
from gateway_plugin.commands.interactive import (
    APPROVAL_CHOICES,
    Interactive,
    Pending,
    approval_request,
    clarify_request,
    new_picker_id,
    resolved_event,
)
from gateway_plugin.errors import CommandError

if TYPE_CHECKING:
    from gateway_plugin.controller import Controller

log = logging.getLogger("hdg.plugin.decisions")


class DecisionDesk:
    def __init__(self, controller: Controller) -> None:
        self.c = controller
        self.state = Interactive()
        add = controller.commands.registry.add
        add(cmds.APPROVAL_RESPOND, self.cmd_approval_respond)
        add(cmds.CLARIFY_RESPOND, self.cmd_clarify_respond)
        add(cmds.PICKER_SELECT, self.cmd_picker_select)

    def _base(self, lane: Lane) -> Json:
        run = self.c.turns.active(lane)
        return {
            "lane": list(lane),
            "conversation_id": self.c.conversation_id(lane),
            "run_id": run.run_id if run else None,
        }

    # -- Hermes → devices
    def on_tool_start(self, lane: Lane, tool_call_id: str, tool_name: str, args: Any) -> None:
        self.c.turns.known_tools.add(tool_name)
        run = self.c.turns.active(lane)
        commentary = self.c.turns.close_commentary(run) if run is not None else []
        started = self.state.tool_started(lane, self._base(lane), tool_call_id, tool_name, args)
        self.c.emit([*commentary, started])

    def on_tool_end(
        self,
        lane: Lane,
        tool_call_id: str,
        tool_name: str,
        status: str,
        duration_ms: Any,
        error: Any,
    ) -> None:
        if lane in self.c.cancels.cancelled:
            # Ended by the run's cancel (a killed command exits 130, which Hermes reports
            # as a normal result): its result goes nowhere.
            status = "cancelled"
        self.c.emit(
            [
                self.state.tool_finished(
                    lane, self._base(lane), tool_call_id, tool_name, status, duration_ms, error
                )
            ]
        )

    def on_approval_request(
        self, lane: Lane, session_key: str, command: str, description: str, allow_permanent: bool
    ) -> None:
        choices = (
            APPROVAL_CHOICES if allow_permanent else [c for c in APPROVAL_CHOICES if c != "always"]
        )
        item = Pending(
            "approval",
            new_picker_id(),
            lane,
            session_key,
            {
                "session_key": session_key,
                "command": command,
                "description": description,
                "choices": choices,
            },
        )
        self.state.add(item)
        self.c.emit([approval_request(item, self._base(lane))])

    def on_approval_outcome(self, session_key: str, choice: str) -> None:
        """Hermes' post_approval_response hook: a timeout expires the prompt; a typed
        /approve or /deny closes it on every device."""
        item = self.state.oldest_for_session(session_key, "approval")
        if item is None:
            return
        self.state.pop(item.picker_id)
        if choice == "timeout":
            self.c.emit(
                [resolved_event(item, self._base(item.lane), status="expired", accepted=False)]
            )
        else:
            self.c.emit(
                [resolved_event(item, self._base(item.lane), status="resolved", choice=choice)]
            )

    def on_clarify_request(
        self,
        lane: Lane,
        session_key: str,
        clarify_id: str,
        question: str,
        choices: list[str] | None,
    ) -> None:
        item = Pending(
            "clarify",
            clarify_id,
            lane,
            session_key,
            {
                "session_key": session_key,
                "question": question,
                "choices": choices,
                "allow_free_text": True,
            },
        )
        self.state.add(item)
        self.c.emit([clarify_request(item, self._base(lane))])

    def on_picker(
        self,
        lane: Lane,
        kind: str,
        session_key: str,
        body: Json,
        callback: Any,
        confirm_id: str | None = None,
    ) -> None:
        self.expire_due()  # each new picker prunes the stale ones
        item = Pending(
            kind, new_picker_id(), lane, session_key, body, callback=callback, confirm_id=confirm_id
        )
        self.state.add(item)
        self.c.emit(
            [
                {
                    **self._base(lane),
                    "type": f"picker.{kind}",
                    "picker_id": item.picker_id,
                    **body,
                    "ts": now_iso(),
                }
            ]
        )

    def release_clarifications(self, lane: Lane) -> None:
        """The run was cancelled: an agent waiting for a clarification does not see its
        interrupt, so it gets Hermes' no-answer now (the prompt closes as the run ends)."""
        for item in self.state.for_lane(lane, "clarify"):
            self.c.agent.resolve_clarify(item.picker_id, "")

    def expire_lane(self, lane: Lane) -> None:
        """The run ended: whatever Hermes was still waiting for in this lane is gone."""
        for item in self.state.for_lane(lane):
            if item.kind in ("approval", "clarify"):
                self.state.pop(item.picker_id)
                self.c.emit(
                    [resolved_event(item, self._base(lane), status="expired", accepted=False)]
                )
        self.state.clear_tools(lane)

    def expire_due(self) -> int:
        """Close every picker past its expiry on every device; how many there were."""
        expired = self.state.take_expired()
        self.c.emit(
            [
                resolved_event(item, self._base(item.lane), status="expired", accepted=False)
                for item in expired
            ]
        )
        return len(expired)

    def snapshot(self, lane: Lane) -> Json:
        return {
            "tools": self.state.tool_states(lane),
            "approvals": [
                approval_request(p, self._base(lane)) for p in self.state.for_lane(lane, "approval")
            ],
            "clarifications": [
                clarify_request(p, self._base(lane)) for p in self.state.for_lane(lane, "clarify")
            ],
            "pickers": [
                {"type": f"picker.{p.kind}", "picker_id": p.picker_id, **p.request}
                for p in self.state.for_lane(lane)
                if p.kind not in ("approval", "clarify")
            ],
        }

    # -- devices → Hermes
    def _resolved(self, item: Pending, command: Json, **kw: Any) -> None:
        self.state.pop(item.picker_id)
        self.c.emit(
            [
                resolved_event(
                    item, self._base(item.lane), request_id=command.get("request_id"), **kw
                )
            ]
        )

    def _close_expired(self, item: Pending) -> None:
        self.state.pop(item.picker_id)
        self.c.emit([resolved_event(item, self._base(item.lane), status="expired", accepted=False)])

    def _expired(self, item: Pending, code: str, what: str) -> CommandError:
        self._close_expired(item)
        return CommandError(code, f"that {what} is no longer pending")

    async def _approve(
        self, item: Pending, command: Json, choice: str, reason: str | None, code: str
    ) -> None:
        if choice not in item.request.get("choices", APPROVAL_CHOICES):
            raise CommandError(
                "bad_request",
                "choice must be one of " + ", ".join(item.request.get("choices", APPROVAL_CHOICES)),
            )
        resolved = self.c.agent.resolve_approval(item.session_key, choice, reason)
        if not resolved:
            raise self._expired(item, code, "approval")
        self._resolved(item, command, status="resolved", choice=choice)

    async def _clarify(self, item: Pending, command: Json, response: str, code: str) -> None:
        if not self.c.agent.resolve_clarify(item.picker_id, response):
            raise self._expired(item, code, "clarification")
        self._resolved(item, command, status="resolved", choice=response)

    async def cmd_approval_respond(self, command: Json, args: cmds.ApprovalRespondArgs) -> None:
        item = self.state.get(args["approval_id"], "approval")
        if item is None:
            raise CommandError("approval_not_found", "Approval not found")
        await self._approve(item, command, args["choice"], args["reason"], "approval_not_found")

    async def cmd_clarify_respond(self, command: Json, args: cmds.ClarifyRespondArgs) -> None:
        item = self.state.get(args["clarify_id"], "clarify")
        if item is None:
            raise CommandError("clarify_not_found", "Clarification not found")
        await self._clarify(item, command, args["response"], "clarify_not_found")

    async def cmd_picker_select(self, command: Json, args: cmds.PickerSelectArgs) -> None:
        item = self.state.get(args["picker_id"])
        if item is None:
            raise CommandError("not_found", "no such pending picker (already answered or expired)")
        if self.state.is_expired(item):
            # Never handed to Hermes: a choice made days ago must not switch the model now.
            self._close_expired(item)
            minutes = round(self.state.picker_ttl_s / 60)
            raise CommandError(
                "not_found",
                f"this picker expired after {minutes} minutes unanswered; run the command again",
            )
        value = args["value"]
        if item.kind == "approval":
            await self._approve(item, command, value, None, "not_found")
        elif item.kind == "clarify":
            await self._clarify(item, command, value, "not_found")
        elif item.kind == "confirm":
            if value not in ("once", "always", "cancel"):
                raise CommandError("bad_request", "value must be once, always or cancel")
            reply = await self.c.agent.resolve_confirm(
                item.session_key, item.confirm_id or "", value
            )
            if reply is None:
                raise self._expired(item, "not_found", "confirmation")
            self._resolved(item, command, status="resolved", choice=value)
            self.c.notice(item.lane, reply)
        else:
            await self._pick(item, command, value)

    async def _pick(self, item: Pending, command: Json, value: str) -> None:
        if item.kind == "model":
            offered = offered_models(item.request)
            if value not in offered:
                # Refused before Hermes sees it: the picker stays open for a valid answer.
                raise CommandError(
                    "bad_request",
                    "value must be <provider slug>:<model id> of a model the picker offered",
                )
            provider, model = offered[value]
            result = item.callback(item.lane[0], model, provider)
        else:
            values = [
                str(c.get("value")) if isinstance(c, dict) else str(c)
                for c in item.request.get("choices", [])
            ]
            if value not in values:
                raise CommandError("bad_request", "value must be one of " + ", ".join(values))
            result = item.callback(item.lane[0], value)
        if inspect.isawaitable(result):
            result = await result
        self._resolved(item, command, status="resolved", choice=value)
        if result:
            self.c.notice(item.lane, str(result))


def offered_models(request: Json) -> dict[str, tuple[str, str]]:
    """A model picker's answers, ``"<slug>:<model>"`` → (slug, model), exactly as offered.
    Matched whole, not split at a colon: slugs (``custom:proxy``) and model ids
    (``qwen3:8b``) may contain one."""
    offered: dict[str, tuple[str, str]] = {}
    for provider in request.get("providers") or []:
        if not isinstance(provider, dict) or not provider.get("slug"):
            continue
        slug = str(provider["slug"])
        for model in provider.get("models") or []:
            offered.setdefault(f"{slug}:{model}", (slug, str(model)))
    return offered

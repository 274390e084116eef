"""The decisions Hermes waits for, as the `android` adapter receives them: command
approvals, clarify questions, slash-command confirmations, model and choice pickers.

Each becomes a pending decision on the controller's desk (`commands.decisions`), which
devices answer; the answer goes back to Hermes through `runner`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from canonical.model import Lane
from canonical.protocol import new_id
from gateway_plugin.hermes import bridge as hb
from gateway_plugin.hermes import runner as hr

if TYPE_CHECKING:
    from gateway_plugin.controller import Controller

Metadata = dict[str, Any] | None
SendResult = hb.SendResult


class DecisionSendsMixin:
    """Mixed into `AndroidAdapter`, which provides `controller`, `_lane` and the
    model-picker captures of `AgentPortMixin.model_picker_data`."""

    controller: Controller | None
    _captures: dict[str, asyncio.Future[dict[str, Any]]]
    _lane: Callable[[str, Metadata], Lane | None]

    async def send_exec_approval(
        self,
        chat_id: str,
        command: str,
        session_key: str,
        description: str | None = None,
        metadata: dict[str, Any] | None = None,
        allow_permanent: bool = True,
        smart_denied: bool = False,
        **_: Any,
    ) -> Any:
        lane = self._lane(chat_id, metadata) if self.controller else None
        if self.controller is None or lane is None:
            return SendResult(success=False, error="android adapter is not connected")
        self.controller.desk.on_approval_request(
            lane, session_key, command, description or "", bool(allow_permanent)
        )
        return SendResult(success=True, message_id=f"approval-{new_id(6)}")

    async def send_clarify(
        self,
        chat_id: str,
        question: str,
        choices: Any,
        clarify_id: str,
        session_key: str,
        metadata: dict[str, Any] | None = None,
        **_: Any,
    ) -> Any:
        lane = self._lane(chat_id, metadata) if self.controller else None
        if self.controller is None or lane is None:
            return SendResult(success=False, error="android adapter is not connected")
        listed = [str(c) for c in choices] if choices else None
        self.controller.desk.on_clarify_request(lane, session_key, clarify_id, question, listed)
        return SendResult(success=True, message_id=f"clarify-{clarify_id}")

    async def send_slash_confirm(
        self,
        chat_id: str,
        title: str,
        message: str,
        session_key: str,
        confirm_id: str,
        metadata: dict[str, Any] | None = None,
        **_: Any,
    ) -> Any:
        lane = self._lane(chat_id, metadata) if self.controller else None
        if self.controller is None or lane is None:
            return SendResult(success=False, error="android adapter is not connected")
        self.controller.desk.on_picker(
            lane,
            "confirm",
            session_key,
            {"title": title, "message": message, "choices": ["once", "always", "cancel"]},
            None,
            confirm_id,
        )
        return SendResult(success=True, message_id=f"confirm-{confirm_id}")

    async def send_model_picker(
        self,
        chat_id: str,
        providers: list[dict[str, Any]],
        current_model: str,
        current_provider: str,
        session_key: str,
        on_model_selected: Any,
        metadata: dict[str, Any] | None = None,
        **_: Any,
    ) -> Any:
        capture = self._captures.pop(session_key, None)
        payload = {
            "providers": await asyncio.to_thread(hr.probe_current_endpoint, list(providers)),
            "current_model": current_model,
            "current_provider": current_provider,
        }
        if capture is not None and not capture.done():
            # models.list asked Hermes for its credential-aware picker data.
            capture.set_result(payload)
            return SendResult(success=True, message_id="capture")
        lane = self._lane(chat_id, metadata) if self.controller else None
        if self.controller is None or lane is None:
            return SendResult(success=False, error="android adapter is not connected")
        self.controller.desk.on_picker(lane, "model", session_key, payload, on_model_selected)
        return SendResult(success=True, message_id=f"picker-{new_id(6)}")

    async def send_choice_picker(
        self,
        chat_id: str,
        title: str,
        choices: list[Any],
        session_key: str,
        on_choice_selected: Any,
        metadata: dict[str, Any] | None = None,
        **_: Any,
    ) -> Any:
        lane = self._lane(chat_id, metadata) if self.controller else None
        if self.controller is None or lane is None:
            return SendResult(success=False, error="android adapter is not connected")
        self.controller.desk.on_picker(
            lane, "choice", session_key, {"title": title, "choices": choices}, on_choice_selected
        )
        return SendResult(success=True, message_id=f"picker-{new_id(6)}")


__all__ = ["DecisionSendsMixin"]

"""The AgentPort half of the `android` adapter: how the controller reaches Hermes.

Submitting a device's message as Hermes' own inbound event, interrupting and stopping a
turn, deleting a lane's sessions, the model and reasoning commands, approvals, clarify,
YOLO, titles, cron jobs. Mixed into `AndroidAdapter`, which provides `controller`,
`source_for` and Hermes' `BasePlatformAdapter` methods.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from canonical.model import Lane
from canonical.protocol import new_id
from gateway_plugin.hermes import bridge as hb
from gateway_plugin.hermes import files, state_db
from gateway_plugin.hermes import runner as hr

if TYPE_CHECKING:
    from gateway_plugin.controller import Controller


# Marks on the metadata of an event carrying a run: Hermes ran its processing hooks for
# it (its normal path), or it called its message handler without them (see `submit`).
HOOKED = "hdg_hooked"
INLINE = "hdg_inline"


class AgentPortMixin:
    """The controller's `AgentPort` (gateway_plugin.ports), on Hermes' adapter API."""

    controller: Controller | None
    _captures: dict[str, asyncio.Future[dict[str, Any]]]
    build_source: Callable[..., Any]
    handle_message: Callable[[Any], Awaitable[Any]]
    interrupt_session_activity: Callable[..., Awaitable[Any]]
    source_for: Callable[..., Any]

    @property
    def runner(self) -> Any:
        return getattr(self, "gateway_runner", None)

    async def wait_ready(self) -> None:
        for _ in range(1200):
            runner = self.runner
            if runner is not None and not getattr(runner, "_startup_restore_in_progress", False):
                return
            await asyncio.sleep(0.05)

    async def submit(
        self,
        lane: Lane,
        text: str,
        *,
        user_id: str,
        user_name: str,
        run_id: str | None,
        chat_name: str,
        media_urls: list[str] | None = None,
        media_types: list[str] | None = None,
    ) -> None:
        source = self.build_source(
            chat_id=lane[0],
            chat_name=chat_name,
            chat_type="dm",
            user_id=user_id,
            user_name=user_name,
            thread_id=lane[1],
        )
        kind = hb.MessageType.COMMAND if text.lstrip().startswith("/") else hb.MessageType.TEXT
        event = hb.MessageEvent(
            text=text,
            message_type=kind,
            source=source,
            message_id=new_id(8),
            metadata={"hdg_run_id": run_id} if run_id else {},
            media_urls=list(media_urls or []),
            media_types=list(media_types or []),
        )
        await self.handle_message(event)
        if run_id is not None and event.metadata.get(INLINE) and self.controller is not None:
            # While Hermes still holds the lane's session for a turn that is just ending
            # (its cleanup outlives on_processing_complete), it answers /new, /stop,
            # /status... there and then, without the processing hooks that end a run.
            # That answer has been delivered by now: the run ends here.
            self.controller.on_answered_inline(lane, run_id)

    async def stage_media(self, source: Path, filename: str, mime_type: str) -> tuple[str, str]:
        return await asyncio.to_thread(files.stage_media_file, source, filename, mime_type)

    async def interrupt(self, lane: Lane, *, user_id: str) -> None:
        """Hermes' own interrupt signal for the lane's session: its turn hands it to the
        agent as soon as there is one, so a turn not started yet starts interrupted and
        calls neither the model nor a tool; a running tool is killed. The turn then ends
        the normal way, after what it was doing. (`/stop` would abandon the turn instead:
        before the agent exists it stops nothing, and a tool it kills ends after it.)"""
        await self.interrupt_session_activity(
            self.session_key(lane), lane[0], metadata={"thread_id": lane[1]} if lane[1] else None
        )

    async def stop_hard(self, lane: Lane, *, user_id: str) -> bool:
        """Hermes' /stop, for a turn that ignores its interrupt; False (nothing sent) while
        the turn has no agent yet, which /stop could not reach."""
        if not hr.agent_running(self.runner, self.session_key(lane)):
            return False
        await self.submit(
            lane, "/stop", user_id=user_id, user_name=user_id, run_id=None, chat_name=lane[0]
        )
        return True

    def delete_transcript(self, lane: Lane) -> int:
        assert self.controller is not None
        return state_db.delete_sessions(
            [session["id"] for session in self.controller.transcript.sessions(lane)]
        )

    def session_key(self, lane: Lane) -> str:
        return hr.session_key_for(self.runner, self.source_for(lane))

    def _command_event(self, lane: Lane, text: str) -> Any:
        return hb.MessageEvent(
            text=text,
            message_type=hb.MessageType.COMMAND,
            source=self.source_for(lane),
            message_id=new_id(8),
        )

    async def model_picker_data(self, lane: Lane) -> dict[str, Any]:
        """Hermes' own credential-aware picker data, as its /model command builds it."""
        key = self.session_key(lane)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._captures[key] = future
        try:
            text = await hr.run_model_command(self.runner, self._command_event(lane, "/model"))
            if not future.done():
                raise RuntimeError(f"Hermes offered no model picker: {text[:200]}")
            return future.result()
        finally:
            self._captures.pop(key, None)

    def model_state(self, lane: Lane) -> tuple[str, str, str]:
        return hr.model_state(self.runner, self.session_key(lane))

    async def set_model(self, lane: Lane, model: str, provider: str | None, scope: str) -> str:
        flags = f" --provider {provider}" if provider else ""
        flags += " --global" if scope == "global" else " --session"
        return await hr.run_model_command(
            self.runner, self._command_event(lane, f"/model {model}{flags}")
        )

    def reasoning_state(self, lane: Lane) -> tuple[str | None, bool, str]:
        return hr.reasoning_state(self.runner, self.source_for(lane), self.session_key(lane))

    async def set_reasoning(self, lane: Lane, effort: str, scope: str) -> str:
        suffix = " --global" if scope == "global" else ""
        return await hr.run_reasoning_command(
            self.runner, self._command_event(lane, f"/reasoning {effort}{suffix}")
        )

    def resolve_approval(self, session_key: str, choice: str, reason: str | None) -> int:
        return hr.resolve_approval(session_key, choice, reason)

    def resolve_clarify(self, clarify_id: str, response: str) -> bool:
        return hr.resolve_clarify(clarify_id, response)

    async def resolve_confirm(self, session_key: str, confirm_id: str, choice: str) -> str | None:
        return await hr.resolve_confirm(session_key, confirm_id, choice)

    def set_yolo(self, session_key: str, enabled: bool) -> None:
        hr.set_yolo(session_key, enabled)

    def yolo_enabled(self, session_key: str) -> bool:
        return hr.yolo_enabled(session_key)

    def reasoning_efforts(self) -> list[str]:
        return list(hb.REASONING_EFFORTS)

    def cron_jobs(self) -> list[dict[str, Any]]:
        return hr.cron_jobs()

    async def generate_title(self, user_message: str, assistant_response: str) -> str | None:
        return await hr.generate_title(user_message, assistant_response)

    async def create_handoff_thread(self, parent_chat_id: str, name: str) -> str | None:
        """Hermes opens a named thread (e.g. a continuable cron job): a real thread lane."""
        if self.controller is None:
            return None
        return await self.controller.create_thread(parent_chat_id, name)


__all__ = ["AgentPortMixin"]

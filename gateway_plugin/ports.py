"""What the controller needs from Hermes, as a protocol: the adapter implements it
(`gateway_plugin.hermes.agent_port`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from canonical.model import Lane


class AgentPort(Protocol):
    async def wait_ready(self) -> None:
        """Return once Hermes accepts inbound messages (startup restore finished)."""

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
        """Hand one user message to Hermes' pipeline (`handle_message`), with local media
        paths (staged by `stage_media`) and their MIME types."""

    async def stage_media(self, source: Path, filename: str, mime_type: str) -> tuple[str, str]:
        """Copy an attachment where the agent can open it (Hermes' media cache);
        (path, MIME type) for `submit`."""

    async def interrupt(self, lane: Lane, *, user_id: str) -> None:
        """Interrupt the lane's turn, now or, when its agent does not exist yet, as soon
        as it does; the turn still ends through Hermes' normal path."""

    async def stop_hard(self, lane: Lane, *, user_id: str) -> bool:
        """Abandon the lane's turn (/stop) if it has an agent; whether it did."""

    def delete_transcript(self, lane: Lane) -> int:
        """Delete the lane's Hermes sessions; return how many."""

    def session_key(self, lane: Lane) -> str:
        """Hermes' session key for the lane."""

    def resolve_approval(self, session_key: str, choice: str, reason: str | None) -> int:
        """Resolve the session's pending approval; how many were resolved."""

    def resolve_clarify(self, clarify_id: str, response: str) -> bool: ...

    async def resolve_confirm(
        self, session_key: str, confirm_id: str, choice: str
    ) -> str | None: ...

    def set_yolo(self, session_key: str, enabled: bool) -> None: ...

    def yolo_enabled(self, session_key: str) -> bool: ...

    async def model_picker_data(self, lane: Lane) -> dict[str, Any]:
        """Providers and models from Hermes' own credential-aware picker data."""

    def model_state(self, lane: Lane) -> tuple[str, str, str]:
        """(model, provider, scope) in effect for the lane."""

    async def set_model(self, lane: Lane, model: str, provider: str | None, scope: str) -> str:
        """Switch the model (scope conversation|global); Hermes' reply text."""

    def reasoning_state(self, lane: Lane) -> tuple[str | None, bool, str]:
        """(effort, enabled, scope) in effect for the lane."""

    async def set_reasoning(self, lane: Lane, effort: str, scope: str) -> str: ...

    def reasoning_efforts(self) -> list[str]: ...

    def cron_jobs(self) -> list[dict[str, Any]]:
        """Hermes' cron jobs (id, name, deliver, schedule)."""

    async def generate_title(self, user_message: str, assistant_response: str) -> str | None:
        """Hermes' own title generator (an auxiliary model call)."""

"""What the controller needs from Hermes, as a protocol: the bridge implements it."""

from __future__ import annotations

from typing import Protocol

Lane = tuple[str, str | None]


class AgentPort(Protocol):
    async def wait_ready(self) -> None:
        """Return once Hermes accepts inbound messages (startup restore finished)."""

    async def submit(self, lane: Lane, text: str, *, user_id: str, user_name: str, run_id: str | None, chat_name: str) -> None:
        """Hand one user message to Hermes' pipeline (`handle_message`)."""

    async def interrupt(self, lane: Lane, *, user_id: str) -> None:
        """Interrupt the lane's running agent the supported way (/stop)."""

    def delete_transcript(self, lane: Lane) -> int:
        """Delete the lane's Hermes sessions; return how many."""

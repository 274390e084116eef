"""Shared steps of the end-to-end tests: send a prompt, collect one run's frames."""

from __future__ import annotations

import uuid
from typing import Any

from canonical.model import Json
from tests.harness.device import DeviceClient

PHEBY_RUN_ORDER = [
    "run.accepted",
    "message.start",
    "message.delta",
    "message.complete",
    "run.finished",
]
IRIS_RUN_ORDER = ["run.started", "message.start", "message.update", "message", "run.finished"]


RUN_FRAMES = frozenset(PHEBY_RUN_ORDER) | frozenset(IRIS_RUN_ORDER)


def collapse(types: list[str]) -> list[str]:
    """The run-lifecycle frames with consecutive repeats folded: the shape of a run
    regardless of delta count (tool and decision frames interleave and are checked apart)."""
    out: list[str] = []
    for kind in types:
        if kind not in RUN_FRAMES:
            continue
        if not out or out[-1] != kind:
            out.append(kind)
    return out


async def default_conversation(client: DeviceClient) -> str:
    snapshot = await client.request({"type": "conversation.list"})
    assert snapshot["type"] == "conversation.snapshot", snapshot
    return str(snapshot["conversations"][0]["conversation_id"])


async def pheby_run(
    client: DeviceClient, conversation_id: str, text: str, timeout: float = 90.0
) -> list[Json]:
    start = len(client.frames)
    await client.send(
        {
            "type": "chat.send",
            "conversation_id": conversation_id,
            "text": text,
            "request_id": f"r-{uuid.uuid4().hex[:8]}",
        }
    )
    accepted = await client.wait_for(
        lambda f: f.get("type") in ("run.accepted", "error"), 30, start
    )
    assert accepted["type"] == "run.accepted", accepted
    return await frames_of_run(client, accepted["run_id"], start, timeout)


async def frames_of_run(
    client: DeviceClient, run_id: str, start: int = 0, timeout: float = 90.0
) -> list[Json]:
    """Frames of one run, from its acceptance to its end (both dialects)."""
    await client.wait_for(
        lambda f: f.get("type") == "run.finished" and f.get("run_id") == run_id, timeout, start
    )
    frames = client.frames[start:]
    first = next(
        i
        for i, f in enumerate(frames)
        if f.get("type") in ("run.accepted", "run.started") and f.get("run_id") == run_id
    )
    last = next(
        i
        for i, f in enumerate(frames)
        if f.get("type") == "run.finished" and f.get("run_id") == run_id
    )
    return [f for f in frames[first : last + 1] if f.get("type") not in ("typing", "message.ack")]


async def iris_send(
    client: DeviceClient, chat_id: str, text: str, thread_id: str | None = None, **extra: Any
) -> Json:
    client_id = f"c-{uuid.uuid4().hex}"
    start = len(client.frames)
    await client.send(
        {
            "type": "message.send",
            "chat_id": chat_id,
            "thread_id": thread_id,
            "text": text,
            "client_id": client_id,
            **extra,
        }
    )
    return await client.wait_for(
        lambda f: f.get("client_id") == client_id and f.get("type") in ("message.ack", "error"),
        30,
        start,
    )

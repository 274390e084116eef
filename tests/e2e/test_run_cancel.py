"""Cancel really cancels, at the wire, in both dialects: a cancel at any moment between a
send's acceptance and the run's final frame stops the turn; nothing of that run (no tool,
no text) arrives after its `run.finished`; a tool cut short is reported `cancelled`,
carries its run id and comes before the final frame; the lane's next turn works."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from canonical.model import Json
from gateway_plugin.commands.cancels import CANCEL_GRACE_S
from scripted_model.scenarios import NARRATE_FINAL_TEXT, SLOW_COMMAND
from tests.e2e.conftest import Deployment
from tests.e2e.flows import default_conversation, frames_of_run, iris_send, pheby_run
from tests.harness.device import DeviceClient

# Long enough for a turn that wrongly went on to reach the model and start its tool:
# the scripted model answers at once, and Hermes starts a tool well within a second.
QUIET_S = 5.0
EARLY_S = 0.05
# The next turn after an early cancel. Hermes keeps the cancelled message (it was
# accepted) with no answer, and merges it into the next user message it sends the model,
# whose scenario markers would then apply too: narrate's marker wins over slow's.
NEXT_TURN = "[narrate] hello after the cancels"


@pytest.fixture
def deployment(embedded: Callable[..., Deployment]) -> Deployment:
    return embedded()


async def _nothing_after(client: DeviceClient, run_id: str, lane_key: str, lane: Any) -> None:
    """For QUIET_S after the run's final frame: nothing of that run, and nothing in its
    lane that belongs to no run (how a turn that went on showed its tools)."""
    end = next(
        i
        for i, f in enumerate(client.frames)
        if f.get("type") == "run.finished" and f.get("run_id") == run_id
    )
    await asyncio.sleep(QUIET_S)
    stray = [
        f
        for f in client.frames[end + 1 :]
        if f.get("type") not in ("typing", "message.ack")
        and (f.get("run_id") == run_id or (f.get(lane_key) == lane and f.get("run_id") is None))
    ]
    assert stray == [], stray


async def _pheby_send(client: DeviceClient, conversation_id: str, text: str) -> tuple[str, int]:
    start = len(client.frames)
    request_id = f"r-{uuid.uuid4().hex[:8]}"
    await client.send(
        {
            "type": "chat.send",
            "conversation_id": conversation_id,
            "text": text,
            "request_id": request_id,
        }
    )
    accepted = await client.wait_type("run.accepted", start=start, request_id=request_id)
    return str(accepted["run_id"]), start


def _tool_ends(frames: list[Json], kind: str, call_id: str) -> list[tuple[str, str]]:
    return [
        (f["status"], f["run_id"])
        for f in frames
        if f.get("type") == kind
        and f.get("tool_call_id") == call_id
        and f.get("status") != "running"
    ]


async def test_pheby_run_cancel_during_a_tool_and_just_after_the_start(
    deployment: Deployment,
) -> None:
    client = await deployment.pheby()
    conversation_id = await default_conversation(client)

    # While its tool runs: the tool ends `cancelled`, in the run, before the run's end.
    run_id, start = await _pheby_send(client, conversation_id, "[slow] cancel the tool")
    running = await client.wait_for(
        lambda f: f.get("type") == "tool.event" and f.get("status") == "running", 60, start
    )
    assert running["run_id"] == run_id
    await client.send({"type": "run.cancel", "conversation_id": conversation_id, "run_id": run_id})
    frames = await frames_of_run(client, run_id, start, timeout=60)
    assert frames[-1]["status"] == "cancelled"
    assert _tool_ends(frames, "tool.event", running["tool_call_id"]) == [("cancelled", run_id)]
    await _nothing_after(client, run_id, "conversation_id", conversation_id)

    # 50 ms after the start, before Hermes has begun the turn: no tool ever starts.
    run_id, start = await _pheby_send(client, conversation_id, "[slow] early cancel")
    await client.wait_type("message.start", start=start, run_id=run_id)
    await asyncio.sleep(EARLY_S)
    await client.send({"type": "run.cancel", "conversation_id": conversation_id, "run_id": run_id})
    frames = await frames_of_run(client, run_id, start, timeout=60)
    assert frames[-1]["status"] == "cancelled"
    await _nothing_after(client, run_id, "conversation_id", conversation_id)
    assert not [f for f in client.frames[start:] if f.get("type") == "tool.event"]

    # The lane's next turn runs normally, tool included, and history keeps the
    # cancelled message.
    frames = await pheby_run(client, conversation_id, NEXT_TURN)
    assert frames[-1]["status"] == "completed"
    assert NARRATE_FINAL_TEXT in frames[-2]["text"]
    assert [f["status"] for f in frames if f.get("type") == "tool.event"] == [
        "running",
        "completed",
    ]
    history = await client.request(
        {"type": "conversation.open", "conversation_id": conversation_id, "limit": 500}
    )
    texts = [str(m.get("text") or "") for m in history["messages"]]
    assert any("early cancel" in t for t in texts), texts
    assert not any("slow command finished" in t or SLOW_COMMAND in t for t in texts), texts


async def test_iris_cancel_during_a_tool_and_a_clarification_and_stop_just_after_the_start(
    deployment: Deployment,
) -> None:
    phone = await deployment.iris("phone")
    chat = "android:default"

    # run.cancel while the tool runs.
    start = len(phone.frames)
    run_id = (await iris_send(phone, chat, "[slow] cancel the tool"))["run_id"]
    started = await phone.wait_type("tool.start", timeout=60, start=start, run_id=run_id)
    await phone.send({"type": "run.cancel", "chat_id": chat, "thread_id": None, "run_id": run_id})
    frames = await frames_of_run(phone, run_id, start, timeout=60)
    assert frames[-1]["status"] == "cancelled"
    assert _tool_ends(frames, "tool.end", started["tool_call_id"]) == [("cancelled", run_id)]
    await _nothing_after(phone, run_id, "chat_id", chat)

    # A turn waiting for a clarification (Hermes' wait there ignores interrupts) ends
    # well before the cancel's fallback to /stop, its prompt closed.
    start = len(phone.frames)
    run_id = (await iris_send(phone, chat, "[clarify] pick one"))["run_id"]
    picker = await phone.wait_type("picker.clarify", timeout=60, start=start)
    await phone.send({"type": "run.cancel", "chat_id": chat, "thread_id": None, "run_id": run_id})
    frames = await frames_of_run(phone, run_id, start, timeout=CANCEL_GRACE_S / 2)
    assert frames[-1]["status"] == "cancelled"
    closed = [
        f
        for f in frames
        if f.get("type") == "picker.resolved" and f.get("picker_id") == picker["picker_id"]
    ]
    assert [(f["status"], f["run_id"]) for f in closed] == [("expired", run_id)], frames
    await _nothing_after(phone, run_id, "chat_id", chat)

    # /stop 50 ms after the send was acknowledged.
    start = len(phone.frames)
    run_id = (await iris_send(phone, chat, "[slow] early stop"))["run_id"]
    await asyncio.sleep(EARLY_S)
    stop = await iris_send(phone, chat, "/stop")
    assert stop["type"] == "message.ack" and stop["run_id"] == run_id
    frames = await frames_of_run(phone, run_id, start, timeout=60)
    assert frames[-1]["status"] == "cancelled"
    await _nothing_after(phone, run_id, "chat_id", chat)
    assert not [f for f in phone.frames[start:] if str(f.get("type")).startswith("tool.")]

    # The next turn runs normally, tool included.
    start = len(phone.frames)
    ack = await iris_send(phone, chat, NEXT_TURN)
    frames = await frames_of_run(phone, ack["run_id"], start)
    assert frames[-1]["status"] == "completed"
    final = next(f for f in frames if f["type"] == "message" and f["role"] == "assistant")
    assert NARRATE_FINAL_TEXT in final["text"]
    assert [f["status"] for f in frames if f.get("type") == "tool.end"] == ["completed"]

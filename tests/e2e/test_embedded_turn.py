"""A real Hermes turn through the embedded edge, in both dialects."""

from __future__ import annotations

from collections.abc import Callable

from tests.e2e.conftest import Deployment
from tests.e2e.flows import (
    IRIS_RUN_ORDER,
    PHEBY_RUN_ORDER,
    collapse,
    default_conversation,
    frames_of_run,
    iris_send,
    pheby_run,
)


async def test_a_pheby_client_gets_a_streamed_reply_to_a_tool_prompt_in_spec_order(
    embedded: Callable[..., Deployment],
) -> None:
    deployment = embedded()
    client = await deployment.pheby()
    conversation_id = await default_conversation(client)
    frames = await pheby_run(client, conversation_id, "[tool] please run the tool")
    assert collapse([f["type"] for f in frames]) == PHEBY_RUN_ORDER
    deltas = [f["text"] for f in frames if f["type"] == "message.delta"]
    assert all(
        later.startswith(earlier) for earlier, later in zip(deltas, deltas[1:], strict=False)
    ), "deltas are cumulative"
    complete = next(f for f in frames if f["type"] == "message.complete")
    assert "hello-from-tool" in complete["text"]
    assert complete["text"] == deltas[-1]
    assert not any("💻" in f.get("text", "") or "```" in f.get("text", "") for f in frames), (
        "tool progress never shows as chat text"
    )
    assert frames[-1]["status"] == "completed"
    assert {f["conversation_id"] for f in frames} == {conversation_id}
    tools = [f for f in frames if f["type"] == "tool.event"]
    assert [t["status"] for t in tools] == ["running", "completed"]
    assert tools[0]["tool_name"] == "terminal" and tools[0]["args_redacted"] == {
        "command": "echo hello-from-tool"
    }
    assert tools[0]["tool_call_id"] == tools[1]["tool_call_id"] and tools[1]["duration_ms"] >= 0
    assert all(t["run_id"] == frames[0]["run_id"] for t in tools)
    await deployment.close_clients()


async def test_an_iris_client_gets_its_echo_and_a_streamed_reply_in_its_lane(
    embedded: Callable[..., Deployment],
) -> None:
    deployment = embedded()
    client = await deployment.iris("phone-1")
    ack = await iris_send(client, "android:default", "[tool] please run the tool")
    assert ack["type"] == "message.ack", ack
    frames = await frames_of_run(client, ack["run_id"])
    assert collapse([f["type"] for f in frames]) == IRIS_RUN_ORDER
    assert all(f["chat_id"] == "android:default" and f["thread_id"] is None for f in frames)
    cursors = [f["cursor"] for f in frames]
    assert cursors == sorted(cursors) and len(set(cursors)) == len(cursors), (
        "cursors strictly increase"
    )
    assert [f["type"] for f in frames if f["type"].startswith("tool.")] == [
        "tool.start",
        "tool.end",
    ]
    final = next(f for f in frames if f["type"] == "message")
    assert final["role"] == "assistant" and "hello-from-tool" in final["text"]
    echo = await client.wait_for(lambda f: f.get("type") == "message" and f.get("role") == "user")
    assert echo["text"] == "[tool] please run the tool" and echo["client_id"] == ack["client_id"]
    await deployment.close_clients()

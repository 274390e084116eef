"""What a turn's frames say, driven as a client would: a failed model call, commentary
before a tool, reasoning of one turn only, typing that ends with the run. One embedded
gateway for the module; each test works in lanes of its own."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from canonical.model import Json
from scripted_model.scenarios import NARRATE_FINAL_TEXT, NARRATION_TEXT, REASONING_CHUNKS
from tests.e2e.flows import frames_of_run, iris_send, pheby_run
from tests.harness.device import DeviceClient
from tests.harness.hermes_home import HermesHome
from tests.harness.processes import HermesGateway, ScriptedModel, free_port, http_ok

REASONING = "".join(REASONING_CHUNKS)
# Hermes' typing refresh ticks every 2 s: three ticks' worth of silence.
TYPING_QUIET_S = 6.5


class Stack:
    def __init__(self, token: str, url: str) -> None:
        self.token = token
        self.url = url

    async def pheby(self) -> DeviceClient:
        client = await DeviceClient(self.url).connect()
        ready = await client.hello_pheby(self.token)
        assert ready["type"] == "ready", ready
        return client

    async def iris(self, device_id: str) -> DeviceClient:
        client = await DeviceClient(self.url).connect()
        ack = await client.hello_iris(self.token, device_id)
        assert ack["type"] == "hello.ack", ack
        return client


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, scripted_model: ScriptedModel
) -> Iterator[Stack]:
    token = secrets.token_urlsafe(24)
    port = free_port()
    home = HermesHome(
        scripted_model.base_url,
        path=Path(tmp_path_factory.mktemp("turn-output")) / "home",
        # Hermes' own streaming rhythm is slower than the harness' default: the text a
        # model streams just before a tool call then reaches the adapter only with the
        # consumer's final edit, after the tool hook has already fired.
        config_overrides={"streaming": {"edit_interval": 2.0, "buffer_threshold": 1000}},
    )
    gateway = HermesGateway(
        home, env={"ANDROID_TOKEN": token, "ANDROID_WS_PORT": str(port)}
    ).start()
    try:
        gateway.wait_ready(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 60)
        yield Stack(token, f"ws://127.0.0.1:{port}/ws")
    finally:
        gateway.stop()


async def _channel(client: DeviceClient, name: str) -> Json:
    result = await client.request({"type": "channel.create", "name": name, "kind": "channel"})
    assert result["type"] == "result", result
    return dict(result["entry"])


async def test_a_failed_model_call_is_one_copy_of_hermes_text_and_a_failed_run(
    stack: Stack,
) -> None:
    phone = await stack.iris("phone-fail")
    laptop = await stack.pheby()
    try:
        entry = await _channel(phone, "Failures")
        start = len(phone.frames)
        frames = await pheby_run(laptop, entry["conversation_id"], "[fail] break please")
        complete = next(f for f in frames if f["type"] == "message.complete")
        finished = frames[-1]
        text = complete["text"]
        assert text.strip() and text.count(text.strip()[:40]) == 1, text
        assert finished["status"] == "failed" and finished["error"] == text.strip()
        assert all(f["text"].count(text.strip()[:40]) <= 1 for f in frames if "text" in f)

        seen = await frames_of_run(phone, finished["run_id"], start)
        final = next(f for f in seen if f["type"] == "message" and f["role"] == "assistant")
        ended = seen[-1]
        assert final["text"] == text and final["chat_id"] == entry["chat_id"]
        assert ended["type"] == "run.finished" and ended["status"] == "failed"
        assert ended["error"] == text.strip()

        # The transcript keeps the user's message and no answer: what the docs tell a
        # client to expect in history.
        opened = await laptop.request(
            {"type": "conversation.open", "conversation_id": entry["conversation_id"]}
        )
        assert [m["role"] for m in opened["messages"]] == ["user"]
        assert opened["messages"][0]["text"] == "[fail] break please"
    finally:
        await phone.close()
        await laptop.close()


async def test_commentary_before_a_tool_keeps_all_its_text(stack: Stack) -> None:
    phone = await stack.iris("phone-narrate")
    laptop = await stack.pheby()
    try:
        entry = await _channel(phone, "Narration")
        start = len(laptop.frames)
        ack = await iris_send(phone, entry["chat_id"], "[narrate] check it")
        assert ack["type"] == "message.ack", ack
        frames = await frames_of_run(phone, ack["run_id"])
        commentary = [f for f in frames if f["type"] == "commentary"]
        assert [c["text"] for c in commentary] == [NARRATION_TEXT]
        final = next(f for f in frames if f["type"] == "message" and f["role"] == "assistant")
        assert final["text"] == NARRATE_FINAL_TEXT
        assert frames[-1]["status"] == "completed"
        # Sent once its text is whole, which may be after the tool started; always before
        # the reply that follows the tool.
        after_tool = next(
            i
            for i, f in enumerate(frames)
            if f["type"] == "message.update" and f["text"].startswith(NARRATE_FINAL_TEXT[:9])
        )
        assert frames.index(commentary[0]) < after_tool

        whole = await frames_of_run(laptop, ack["run_id"], start)
        complete = next(f for f in whole if f["type"] == "message.complete")
        assert complete["text"].startswith(NARRATION_TEXT)
        assert complete["text"].endswith(NARRATE_FINAL_TEXT)
    finally:
        await phone.close()
        await laptop.close()


async def test_reasoning_belongs_to_its_own_turn_only(stack: Stack) -> None:
    phone = await stack.iris("phone-reasoning")
    try:
        entry = await _channel(phone, "Reasoning")
        chat_id = entry["chat_id"]
        finals: list[Json] = []
        for text in ("[reasoning] think first", "and now plainly", "/help"):
            ack = await iris_send(phone, chat_id, text)
            assert ack["type"] == "message.ack", ack
            frames = await frames_of_run(phone, ack["run_id"])
            finals.append(
                next(f for f in frames if f["type"] == "message" and f["role"] == "assistant")
            )
        reasoned, plain, notice = finals
        assert reasoned.get("reasoning") == REASONING
        assert "reasoning" not in plain and plain["kind"] == "reply"
        assert "reasoning" not in notice and notice["kind"] == "notice"
    finally:
        await phone.close()


async def test_typing_stops_with_the_run_of_an_unanswered_picker(stack: Stack) -> None:
    phone = await stack.iris("phone-typing")
    try:
        entry = await _channel(phone, "Typing")
        ack = await iris_send(phone, entry["chat_id"], "/reasoning")
        assert ack["type"] == "message.ack", ack
        picker = await phone.wait_type("picker.choice", timeout=60)
        assert picker["chat_id"] == entry["chat_id"]
        await phone.wait_type("run.finished", timeout=30, run_id=ack["run_id"])
        finished_at = time.monotonic()
        await asyncio.sleep(TYPING_QUIET_S)
        late = [
            f
            for f, at in zip(phone.frames, phone.received_at, strict=True)
            if f.get("type") == "typing" and f.get("on") and at > finished_at + 1.0
        ]
        assert late == [], "typing keeps saying on after the run finished"
        # The picker is still open, and still answerable: only typing stopped.
        resolved = await phone.request(
            {"type": "picker.select", "picker_id": picker["picker_id"], "value": "high"}
        )
        assert resolved["type"] == "picker.resolved" and resolved["status"] == "resolved"
    finally:
        await phone.close()

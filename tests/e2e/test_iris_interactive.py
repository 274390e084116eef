"""The iris dialect's interactive frames against the real gateway: pickers (approval,
clarify, model, choice, confirm), tool activity and commentary, reasoning, slash commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from canonical.model import Json
from tests.e2e.conftest import Deployment
from tests.e2e.flows import frames_of_run, iris_send
from tests.harness.device import DeviceClient


@pytest.fixture
def deployment(embedded: Callable[..., Deployment]) -> Deployment:
    return embedded(home_options={"config_overrides": {"approvals": {"timeout": 4}}})


async def _picker(client: DeviceClient, kind: str, start: int, timeout: float = 60) -> Json:
    return await client.wait_for(lambda f: f.get("type") == f"picker.{kind}", timeout, start)


async def test_an_approval_picker_selected_on_one_device_closes_on_the_other(
    deployment: Deployment,
) -> None:
    phone = await deployment.iris("phone")
    tablet = await deployment.iris("tablet")
    start_tablet = len(tablet.frames)
    ack = await iris_send(phone, "android:default", "[danger] clean the build dir")
    picker = await _picker(phone, "approval", 0)
    assert picker["choices"] == ["once", "session", "always", "deny"] and picker[
        "command"
    ].startswith("rm -rf")
    assert (
        picker["run_id"] == ack["run_id"]
        and picker["chat_id"] == "android:default"
        and isinstance(picker["cursor"], int)
    )
    on_tablet = await _picker(tablet, "approval", start_tablet)
    assert on_tablet["picker_id"] == picker["picker_id"]
    wrong = await tablet.request(
        {"type": "picker.select", "picker_id": picker["picker_id"], "value": "maybe"}
    )
    assert wrong["error"]["code"] == "bad_request"
    chosen = await phone.request(
        {"type": "picker.select", "picker_id": picker["picker_id"], "value": "once"}
    )
    assert (
        chosen["type"] == "picker.resolved"
        and chosen["status"] == "resolved"
        and chosen["choice"] == "once"
    )
    closed = await tablet.wait_type("picker.resolved", picker_id=picker["picker_id"])
    assert closed["request_id"] == chosen["request_id"] and closed["accepted"] is True
    again = await tablet.request(
        {"type": "picker.select", "picker_id": picker["picker_id"], "value": "once"}
    )
    assert again["error"]["code"] == "not_found"
    frames = await frames_of_run(phone, ack["run_id"])
    assert [f["status"] for f in frames if f["type"] == "tool.end"] == ["completed"]
    unknown = await phone.request({"type": "picker.select", "picker_id": "nope", "value": "once"})
    assert unknown["error"]["code"] == "not_found"


async def test_an_approval_hermes_stops_waiting_for_is_shown_expired_not_denied(
    deployment: Deployment,
) -> None:
    phone = await deployment.iris("phone")
    await iris_send(phone, "android:default", "[danger] and wait")
    picker = await _picker(phone, "approval", 0)
    resolved = await phone.wait_type("picker.resolved", timeout=30, picker_id=picker["picker_id"])
    assert resolved["status"] == "expired" and resolved["accepted"] is False


async def test_a_typed_approve_closes_the_picker_on_every_device(deployment: Deployment) -> None:
    phone = await deployment.iris("phone")
    tablet = await deployment.iris("tablet")
    ack = await iris_send(phone, "android:default", "[danger] typed approval")
    picker = await _picker(tablet, "approval", 0)
    typed = await iris_send(phone, "android:default", "/approve")
    assert typed["type"] == "message.ack"
    closed = await tablet.wait_type("picker.resolved", timeout=30, picker_id=picker["picker_id"])
    assert closed["status"] == "resolved"
    await frames_of_run(phone, ack["run_id"])


async def test_a_clarify_picker_takes_a_choice_or_free_text(deployment: Deployment) -> None:
    phone = await deployment.iris("phone")
    ack = await iris_send(phone, "android:default", "[clarify] which one")
    picker = await _picker(phone, "clarify", 0)
    assert (
        picker["question"] == "Which colour?"
        and picker["choices"] == ["red", "blue"]
        and picker["allow_free_text"] is True
    )
    resolved = await phone.request(
        {"type": "picker.select", "picker_id": picker["picker_id"], "value": "teal, actually"}
    )
    assert resolved["type"] == "picker.resolved" and resolved["status"] == "resolved"
    frames = await frames_of_run(phone, ack["run_id"])
    final = next(f for f in frames if f["type"] == "message" and f["role"] == "assistant")
    assert "teal, actually" in final["text"]


async def test_the_model_picker_comes_from_hermes_and_selecting_switches_the_model(
    deployment: Deployment, scripted_model: Any
) -> None:
    phone = await deployment.iris("phone")
    start = len(phone.frames)
    await iris_send(phone, "android:default", "/model")
    picker = await _picker(phone, "model", start)
    current = next(p for p in picker["providers"] if p["is_current"])
    assert current["slug"] == "custom" and "scripted-model" in current["models"]
    assert picker["current_model"] == "scripted-model"
    bad = await phone.request(
        {"type": "picker.select", "picker_id": picker["picker_id"], "value": "other-model"}
    )
    assert bad["error"]["code"] == "bad_request"
    resolved = await phone.request(
        {"type": "picker.select", "picker_id": picker["picker_id"], "value": "custom:other-model"}
    )
    assert resolved["status"] == "resolved"
    notice = await phone.wait_for(
        lambda f: (
            f.get("type") == "message"
            and f.get("kind") == "notice"
            and "other-model" in f.get("text", "")
        ),
        30,
        start,
    )
    assert notice["role"] == "assistant"
    scripted_model.clear_log()
    ack = await iris_send(phone, "android:default", "hello again")
    await frames_of_run(phone, ack["run_id"])
    assert any(entry.get("model") == "other-model" for entry in scripted_model.chat_log())


async def test_the_reasoning_choice_picker_sets_the_effort_for_the_next_turn(
    deployment: Deployment, scripted_model: Any
) -> None:
    phone = await deployment.iris("phone")
    start = len(phone.frames)
    await iris_send(phone, "android:default", "/reasoning")
    picker = await _picker(phone, "choice", start)
    values = [c["value"] for c in picker["choices"]]
    assert "high" in values and "none" in values and picker["title"]
    await phone.request(
        {"type": "picker.select", "picker_id": picker["picker_id"], "value": "high"}
    )
    scripted_model.clear_log()
    ack = await iris_send(phone, "android:default", "think about it")
    await frames_of_run(phone, ack["run_id"])
    assert any(entry.get("reasoning_effort") == "high" for entry in scripted_model.chat_log())


async def test_a_destructive_slash_command_asks_for_confirmation_with_a_picker(
    deployment: Deployment,
) -> None:
    phone = await deployment.iris("phone")
    ack = await iris_send(phone, "android:default", "remember the number 42")
    await frames_of_run(phone, ack["run_id"])
    start = len(phone.frames)
    await iris_send(phone, "android:default", "/new")
    picker = await _picker(phone, "confirm", start, timeout=30)
    assert picker["choices"] == ["once", "always", "cancel"] and "/new" in (
        picker["title"] + picker["message"]
    )
    cancelled = await phone.request(
        {"type": "picker.select", "picker_id": picker["picker_id"], "value": "cancel"}
    )
    assert cancelled["status"] == "resolved" and cancelled["value"] == "cancel"


async def test_cancelling_the_new_confirmation_ends_its_run_and_the_lane_takes_the_next_send(
    deployment: Deployment,
) -> None:
    phone = await deployment.iris("phone")
    # Sent the moment a picker command's run ends: Hermes still holds the lane's session
    # for it (its typing refresh is stopping), and answers /new there and then.
    reasoning = await iris_send(phone, "android:default", "/reasoning")
    await frames_of_run(phone, reasoning["run_id"])
    start = len(phone.frames)
    ack = await iris_send(phone, "android:default", "/new")
    picker = await _picker(phone, "confirm", start, timeout=30)
    await phone.request(
        {"type": "picker.select", "picker_id": picker["picker_id"], "value": "cancel"}
    )
    await phone.wait_for(
        lambda f: f.get("type") == "message" and "cancelled" in str(f.get("text")), 30, start
    )
    finished = await phone.wait_type("run.finished", timeout=30, start=start, run_id=ack["run_id"])
    assert finished["status"] in ("completed", "cancelled"), finished
    await phone.wait_for(lambda f: f.get("type") == "typing" and f["on"] is False, 30, start)
    after = await iris_send(phone, "android:default", "hello again")
    assert after["type"] == "message.ack", after
    reply = await frames_of_run(phone, after["run_id"])
    assert "message.update" in [f["type"] for f in reply] and reply[-1]["status"] == "completed"


async def test_a_narrated_two_tool_turn_gives_commentary_and_tool_frames_and_a_clean_reply(
    deployment: Deployment,
) -> None:
    phone = await deployment.iris("phone")
    ack = await iris_send(phone, "android:default", "[two tools] do both")
    frames = await frames_of_run(phone, ack["run_id"])
    kinds = [f["type"] for f in frames]
    assert kinds.count("tool.start") == 2 and kinds.count("tool.end") == 2
    commentary = [f for f in frames if f["type"] == "commentary"]
    assert commentary and all(c["text"] for c in commentary)
    final = next(f for f in frames if f["type"] == "message" and f["role"] == "assistant")
    assert all(c["text"] not in final["text"] for c in commentary), (
        "commentary never leaks into the reply"
    )
    assert not any("💻" in f.get("text", "") for f in frames)
    # Whole commentary may follow its tool's start; it always precedes the final reply.
    assert kinds.index("commentary") < kinds.index("message")
    assert all(f.get("reasoning") is None for f in frames)


async def test_reasoning_travels_in_its_own_field(deployment: Deployment) -> None:
    phone = await deployment.iris("phone")
    ack = await iris_send(phone, "android:default", "[reasoning] think first")
    frames = await frames_of_run(phone, ack["run_id"])
    final = next(f for f in frames if f["type"] == "message" and f["role"] == "assistant")
    assert final.get("reasoning") and "Thinking" in final["reasoning"]
    assert "Thinking about it" not in final["text"]


@pytest.mark.parametrize("command", ["/help", "/yolo", "/cron list", "/status"])
async def test_slash_commands_reach_hermes_and_come_back_as_notices(
    deployment: Deployment, command: str
) -> None:
    phone = await deployment.iris("phone")
    ack = await iris_send(phone, "android:default", command)
    frames = await frames_of_run(phone, ack["run_id"])
    final = next(f for f in frames if f["type"] == "message" and f["role"] == "assistant")
    assert final["kind"] == "notice" and final["text"].strip()


async def test_stop_during_a_run_cancels_it(deployment: Deployment) -> None:
    phone = await deployment.iris("phone")
    ack = await iris_send(phone, "android:default", "[slow] long job")
    await phone.wait_type("tool.start", timeout=60)
    stop = await iris_send(phone, "android:default", "/stop")
    assert stop["type"] == "message.ack" and stop["run_id"] == ack["run_id"]
    finished = await phone.wait_type("run.finished", timeout=60, run_id=ack["run_id"])
    assert finished["status"] == "cancelled"

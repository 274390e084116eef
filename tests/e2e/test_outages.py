"""Outages and restarts as a device sees them: Redis killed, the gateway killed or restarted."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from canonical.model import Json
from edge.errors import CLOSE_SERVICE_RESTART
from tests.e2e.conftest import Deployment, platform_connected
from tests.e2e.flows import default_conversation, pheby_run
from tests.e2e.outbox_check import outbox_events
from tests.harness.device import DeviceClient
from tests.harness.processes import RedisServer, ScriptedModel, http_ok

INTERRUPTED_NOTE = "previous turn was interrupted"


def _send_frame(text: str, client_id: str, **extra: Any) -> Json:
    return {
        "type": "message.send",
        "chat_id": "android:default",
        "text": text,
        "client_id": client_id,
        **extra,
    }


async def _answer(client: DeviceClient, frame: Json, timeout: float, start: int) -> Json:
    """The answer to a send, matched as a device matches it: by its client_id."""
    return await client.wait_for(
        lambda f: (
            f.get("client_id") == frame["client_id"] and f["type"] in ("message.ack", "error")
        ),
        timeout,
        start,
    )


async def _send(client: DeviceClient, frame: Json) -> Json:
    start = len(client.frames)
    await client.send(frame)
    ack = await _answer(client, frame, 30, start)
    assert ack["type"] == "message.ack", ack
    return ack


async def test_a_send_during_a_redis_outage_is_refused_by_its_client_id_and_its_retry_runs_once(
    scaled: Callable[..., Deployment], redis_factory: Callable[..., RedisServer]
) -> None:
    redis = redis_factory()
    deployment = scaled(edges=1, redis=redis)
    phone = await deployment.iris("phone")
    redis.kill9()
    await asyncio.sleep(1.0)
    frame = _send_frame("[tool] during the outage", f"c-{uuid.uuid4().hex}")
    start = len(phone.frames)
    await phone.send(frame)
    # Within the command timeout (5 s), and findable by the client_id the device sent:
    # without it an iris client never learns its send was refused.
    refused = await _answer(phone, frame, 7, start)
    assert refused["type"] == "error" and refused["error"]["code"] == "unavailable", refused
    assert phone.closed_code is None
    redis.restart()
    answer: Json = refused
    for _ in range(60):  # the client's retries, same client_id, until the bus is back
        start = len(phone.frames)
        await phone.send(frame)
        try:
            answer = await _answer(phone, frame, 3, start)
        except TimeoutError:
            continue  # answered while the edge resubscribed: a client resends
        if answer["type"] == "message.ack":
            break
        await asyncio.sleep(0.3)
    assert answer["type"] == "message.ack", answer
    await phone.wait_type("run.finished", timeout=60, run_id=answer["run_id"])
    accepted = [
        e
        for e in outbox_events(deployment.home.path)
        if e["type"] == "run.accepted" and e.get("client_id") == frame["client_id"]
    ]
    assert len(accepted) == 1, accepted


async def test_after_a_scaled_gateway_crash_only_the_unfinished_turn_is_resumed(
    scaled: Callable[..., Deployment], scripted_model: ScriptedModel
) -> None:
    deployment = scaled(edges=1)
    pheby = await deployment.pheby()
    # The state file still says connected after a kill -9: ready is this process' state.
    await _only_the_unfinished_turn_is_resumed(
        deployment, scripted_model, _connected_again(deployment)
    )
    # Events the dead process sequenced may never have reached the bus, and pheby has no
    # cursor to catch up from: its devices are closed to reload (docs/protocol/pheby.md).
    assert await pheby.wait_closed() == CLOSE_SERVICE_RESTART


async def test_after_an_embedded_gateway_crash_only_the_unfinished_turn_is_resumed(
    embedded: Callable[..., Deployment], scripted_model: ScriptedModel
) -> None:
    deployment = embedded()
    healthz = f"{deployment.ws_urls[0].replace('ws://', 'http://')}/healthz"
    await _only_the_unfinished_turn_is_resumed(deployment, scripted_model, lambda: http_ok(healthz))


def _connected_again(deployment: Deployment) -> Callable[[], bool]:
    connected = platform_connected(deployment.gateway)
    return lambda: deployment.gateway.state_is_running() and connected()


async def _only_the_unfinished_turn_is_resumed(
    deployment: Deployment, scripted_model: ScriptedModel, ready: Callable[[], bool]
) -> None:
    """Hermes marks every conversation active in its last two minutes for its start-up
    resume after a crash; only the one the outbox says was unfinished may answer again."""
    phone = await deployment.iris("phone")
    # Two conversations answered and idle: the default lane and a thread of its own.
    for frame in (
        _send_frame("[tool] finished first", f"c-{uuid.uuid4().hex}"),
        _send_frame("finished second", f"c-{uuid.uuid4().hex}", auto_thread=True),
    ):
        ack = await _send(phone, frame)
        await phone.wait_type("run.finished", timeout=60, run_id=ack["run_id"])
    # A third one still answering when the gateway dies.
    busy = await _send(
        phone, _send_frame("[verylong] unfinished", f"c-{uuid.uuid4().hex}", auto_thread=True)
    )
    await phone.wait_type("message.update", timeout=60, message_id=f"draft-{busy['run_id']}")
    seen = len(outbox_events(deployment.home.path))
    model_calls = len(scripted_model.chat_log())
    deployment.gateway.kill9()
    deployment.gateway.restart(ready)
    back = await deployment.iris("tablet", cursor=phone.last_cursor)
    finished = await back.wait_type("run.finished", timeout=120, run_id=busy["run_id"])
    assert finished["status"] == "completed", finished
    # Commands wait for Hermes' start-up restore, so once this is acknowledged every turn
    # it resumed has run.
    probe = await _send(back, _send_frame("[tool] after the crash", f"c-{uuid.uuid4().hex}"))
    await back.wait_type("run.finished", timeout=60, run_id=probe["run_id"])
    new_runs = [
        e["run_id"]
        for e in outbox_events(deployment.home.path)[seen:]
        if e["type"] == "run.accepted"
    ]
    assert new_runs == [probe["run_id"]], new_runs
    resumed = [
        e
        for e in scripted_model.chat_log()[model_calls:]
        # Turns stream; the thread's title (asked once the resumed turn ends) does not.
        if e.get("stream") and INTERRUPTED_NOTE in str(e.get("last_user_text") or "")
    ]
    assert len(resumed) == 1, resumed


async def test_devices_stay_connected_across_a_scaled_gateway_restart_and_requests_wait_for_it(
    scaled: Callable[..., Deployment],
) -> None:
    deployment = scaled(edges=1)
    pheby = await deployment.pheby()
    conversation_id = await default_conversation(pheby)
    await pheby_run(pheby, conversation_id, "[tool] before the restart")
    phone = await deployment.iris("phone")
    deployment.gateway.stop()
    # The edge still says ready (it checks the token, not the plugin); what is asked
    # meanwhile waits in the command stream for the gateway.
    late = await deployment.pheby()
    start = len(late.frames)
    await late.send({"type": "conversation.list", "request_id": "while-down"})
    deployment.gateway.start()
    deployment.gateway.wait_ready(platform_connected(deployment.gateway))
    listed = await late.wait_type("conversation.snapshot", 60, start, request_id="while-down")
    assert listed["conversations"], listed
    frames = await pheby_run(pheby, conversation_id, "[tool] after the restart")
    assert frames[-1]["type"] == "run.finished", frames
    after = await deployment.iris("tablet")
    ack = await _send(after, _send_frame("[tool] and on iris", f"c-{uuid.uuid4().hex}"))
    await phone.wait_type("run.finished", timeout=60, run_id=ack["run_id"])
    assert pheby.closed_code is None and late.closed_code is None and phone.closed_code is None

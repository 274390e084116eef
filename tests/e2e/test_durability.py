"""Faults survived with nothing lost: every frame a device got is checked against the outbox."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable

import websockets

from canonical.model import Json
from edge.errors import CLOSE_UNAVAILABLE
from tests.e2e.conftest import Deployment
from tests.e2e.flows import default_conversation
from tests.e2e.outbox_check import check_delivery, outbox_events
from tests.harness.device import DeviceClient
from tests.harness.processes import RedisServer, http_ok


async def _send(client: DeviceClient, text: str, client_id: str) -> Json:
    start = len(client.frames)
    await client.send(
        {"type": "message.send", "chat_id": "android:default", "text": text, "client_id": client_id}
    )
    ack = await client.wait_for(
        lambda f: f.get("client_id") == client_id and f.get("type") in ("message.ack", "error"),
        30,
        start,
    )
    assert ack["type"] == "message.ack", ack
    return ack


def _finished(deployment: Deployment, run_id: str) -> bool:
    return any(
        e["type"] == "run.finished" and e.get("run_id") == run_id
        for e in outbox_events(deployment.home.path)
    )


async def _until(predicate: Callable[[], bool], timeout: float = 90.0) -> None:
    for _ in range(int(timeout / 0.1)):
        if predicate():
            return
        await asyncio.sleep(0.1)
    raise TimeoutError("condition not reached")


def _assert_clean(result: object) -> None:
    assert result.lost == 0 and result.duplicated == 0 and result.out_of_order == 0, result  # type: ignore[attr-defined]
    assert result.expected > 0  # type: ignore[attr-defined]


async def test_redis_killed_mid_stream_and_restarted_loses_and_duplicates_nothing(
    scaled: Callable[..., Deployment], redis_factory: Callable[..., RedisServer]
) -> None:
    redis = redis_factory()
    deployment = scaled(edges=2, redis=redis)
    phone = await deployment.iris("phone", edge=0)
    tablet = await deployment.iris("tablet", edge=1)
    after = phone.last_cursor
    ack = await _send(phone, "[long] tell me a long story", "c-redis-kill")
    await phone.wait_type("message.update", timeout=60)
    redis.kill9()
    await asyncio.sleep(1.0)
    redis.restart()
    await phone.wait_type("run.finished", timeout=90, run_id=ack["run_id"])
    await tablet.wait_type("run.finished", timeout=90, run_id=ack["run_id"])
    _assert_clean(
        check_delivery(
            "redis kill -9 mid-stream (phone)", phone.frames, deployment.home.path, after
        )
    )
    _assert_clean(
        check_delivery(
            "redis kill -9 mid-stream (tablet)", tablet.frames, deployment.home.path, after
        )
    )


async def test_the_edge_a_device_is_on_dies_mid_stream_and_the_device_resumes_on_the_other(
    scaled: Callable[..., Deployment],
) -> None:
    deployment = scaled(edges=2)
    phone = await deployment.iris("phone", edge=0)
    after = phone.last_cursor
    ack = await _send(phone, "[long] a story across edges", "c-edge-kill")
    await phone.wait_type("message.update", timeout=60)
    deployment.edges[0].process.kill9()
    await phone.wait_closed()
    resumed = await deployment.iris("phone", edge=1, cursor=phone.last_cursor)
    await resumed.wait_type("run.finished", timeout=90, run_id=ack["run_id"])
    _assert_clean(
        check_delivery(
            "edge kill -9 mid-stream", phone.frames + resumed.frames, deployment.home.path, after
        )
    )


async def test_a_gateway_restart_between_send_and_reply_finishes_the_run_once(
    scaled: Callable[..., Deployment],
) -> None:
    deployment = scaled(edges=1)
    phone = await deployment.iris("phone")
    after = phone.last_cursor
    ack = await _send(phone, "[slow] do the slow thing", "c-restart-before")
    deployment.gateway.stop()
    deployment.gateway.restart(
        lambda: (deployment.gateway.platform_state("android") or {}).get("state") == "connected"
    )
    finished = await phone.wait_type("run.finished", timeout=120, run_id=ack["run_id"])
    assert finished["status"] in ("completed", "failed", "cancelled")
    await asyncio.sleep(0.5)
    _assert_clean(
        check_delivery(
            "gateway restart before the reply", phone.frames, deployment.home.path, after
        )
    )
    runs = [
        e
        for e in outbox_events(deployment.home.path)
        if e["type"] == "run.finished" and e["run_id"] == ack["run_id"]
    ]
    assert len(runs) == 1


async def test_a_gateway_restart_mid_stream_finishes_the_run_once(
    scaled: Callable[..., Deployment],
) -> None:
    deployment = scaled(edges=1)
    phone = await deployment.iris("phone")
    after = phone.last_cursor
    ack = await _send(phone, "[verylong] a very long story", "c-restart-mid")
    await phone.wait_type("message.update", timeout=60)
    deployment.gateway.stop()
    deployment.gateway.restart(
        lambda: (deployment.gateway.platform_state("android") or {}).get("state") == "connected"
    )
    await phone.wait_type("run.finished", timeout=120, run_id=ack["run_id"])
    await asyncio.sleep(0.5)
    _assert_clean(
        check_delivery("gateway restart mid-stream", phone.frames, deployment.home.path, after)
    )


async def test_a_device_offline_for_the_whole_turn_gets_all_of_it_when_it_returns(
    scaled: Callable[..., Deployment],
) -> None:
    deployment = scaled(edges=2)
    phone = await deployment.iris("phone", edge=0)
    after = phone.last_cursor
    ack = await _send(phone, "[tool] do it while I am away", "c-offline")
    await phone.close()
    await _until(lambda: _finished(deployment, ack["run_id"]))
    back = await deployment.iris("phone", edge=1, cursor=phone.last_cursor)
    await back.wait_type("run.finished", timeout=30, run_id=ack["run_id"])
    _assert_clean(
        check_delivery(
            "device offline for the whole turn",
            phone.frames + back.frames,
            deployment.home.path,
            after,
        )
    )


async def test_the_same_send_delivered_twice_runs_once(scaled: Callable[..., Deployment]) -> None:
    deployment = scaled(edges=2)
    phone = await deployment.iris("phone", edge=0)
    other_edge = await deployment.iris("phone", edge=1)
    first = await _send(phone, "[tool] only once please", "c-twice")
    again = await _send(other_edge, "[tool] only once please", "c-twice")
    assert again["run_id"] == first["run_id"]
    await phone.wait_type("run.finished", timeout=60, run_id=first["run_id"])
    third = await _send(phone, "[tool] only once please", "c-twice")
    assert third["run_id"] == first["run_id"]
    pheby = await deployment.pheby(edge=1)
    conversation_id = await default_conversation(pheby)
    frame = {
        "type": "chat.send",
        "conversation_id": conversation_id,
        "text": "pheby once",
        "request_id": "same-rid",
    }
    start = len(pheby.frames)
    await pheby.send(dict(frame))
    accepted = await pheby.wait_type("run.accepted", start=start, request_id="same-rid")
    await pheby.wait_type("run.finished", timeout=60, run_id=accepted["run_id"])
    retry = await pheby.request(dict(frame))
    assert retry["type"] == "run.accepted" and retry["run_id"] == accepted["run_id"]
    events = outbox_events(deployment.home.path)
    assert (
        len([e for e in events if e["type"] == "run.accepted" and e.get("client_id") == "c-twice"])
        == 1
    )
    assert (
        len(
            [e for e in events if e["type"] == "run.accepted" and e.get("request_id") == "same-rid"]
        )
        == 1
    )
    state = sqlite3.connect(f"file:{deployment.home.path / 'state.db'}?mode=ro", uri=True)
    try:
        users = state.execute(
            "SELECT COUNT(*) FROM messages WHERE role = 'user' AND content LIKE '%only once please%'"
        ).fetchone()[0]
    finally:
        state.close()
    assert users == 1


async def test_a_retry_after_a_gateway_restart_returns_the_original_run(
    scaled: Callable[..., Deployment],
) -> None:
    deployment = scaled(edges=1)
    phone = await deployment.iris("phone")
    first = await _send(phone, "[tool] remember me", "c-restart-retry")
    await phone.wait_type("run.finished", timeout=60, run_id=first["run_id"])
    deployment.gateway.restart(
        lambda: (deployment.gateway.platform_state("android") or {}).get("state") == "connected"
    )
    retry = await _send(phone, "[tool] remember me", "c-restart-retry")
    assert retry["run_id"] == first["run_id"]


async def test_while_redis_is_down_requests_get_unavailable_and_the_socket_stays_open(
    scaled: Callable[..., Deployment], redis_factory: Callable[..., RedisServer]
) -> None:
    redis = redis_factory()
    deployment = scaled(edges=1, redis=redis)
    phone = await deployment.iris("phone")
    redis.kill9()
    await _until(lambda: not redis.ping(), timeout=10)
    await asyncio.sleep(0.5)
    start = len(phone.frames)
    await phone.send(
        {
            "type": "message.send",
            "chat_id": "android:default",
            "text": "are you there?",
            "client_id": "c-outage",
        }
    )
    refused = await phone.wait_type("error", start=start, timeout=15)
    assert refused["error"]["code"] == "unavailable"
    assert phone.closed_code is None
    pong = await phone.request({"type": "ping"})
    assert pong["type"] == "pong"
    # A device connecting now is told why and closed, not left waiting for a hello.ack
    # the plugin never gets: at accept when the edge cannot be sure of the address'
    # lockouts without Redis, else in answer to its hello (the token is known already).
    tablet = await deployment.client()
    with contextlib.suppress(websockets.ConnectionClosed, ConnectionError):
        await tablet.hello_iris(deployment.token, "tablet")
    refused = await tablet.wait_type("error")
    assert refused["error"]["code"] == "unavailable"
    assert await tablet.wait_closed() == CLOSE_UNAVAILABLE
    redis.restart()
    for _ in range(100):  # the plugin re-registers its tenant within a few seconds
        start = len(phone.frames)
        await phone.send(
            {
                "type": "message.send",
                "chat_id": "android:default",
                "text": "are you there?",
                "client_id": "c-outage",
            }
        )
        try:
            answer = await phone.wait_for(
                lambda f: (
                    f.get("client_id") == "c-outage" and f.get("type") in ("message.ack", "error")
                ),
                3,
                start,
            )
        except TimeoutError:
            # An answer sent while this edge was resubscribing is lost; a client resends
            # the same client_id and gets the original acknowledgement.
            continue
        if answer["type"] == "message.ack":
            break
        await asyncio.sleep(0.2)
    assert answer["type"] == "message.ack"
    await phone.wait_type("run.finished", timeout=60, run_id=answer["run_id"])
    assert phone.closed_code is None


# Short Redis bounds for every process, so that a frozen server is noticed in about a second.
QUICK_REDIS = {"ANDROID_REDIS_COMMAND_TIMEOUT_S": "0.5", "ANDROID_REDIS_HEALTH_CHECK_S": "0.5"}


async def test_while_redis_is_frozen_devices_get_unavailable_and_all_recovers_once_it_thaws(
    scaled: Callable[..., Deployment], redis_factory: Callable[..., RedisServer]
) -> None:
    redis = redis_factory()
    deployment = scaled(edges=1, redis=redis, edge_env=QUICK_REDIS, **QUICK_REDIS)
    phone = await deployment.iris("phone")
    message = {
        "type": "message.send",
        "chat_id": "android:default",
        "text": "[tool] are you there?",
        "client_id": "c-frozen",
    }
    with redis.frozen():  # a silent partition: connections stay up, nothing answers
        start = len(phone.frames)
        await phone.send(message)
        refused = await phone.wait_type("error", start=start, timeout=15)
        assert refused["error"]["code"] == "unavailable"
        assert phone.closed_code is None
        # A device connecting now is told why and closed, never left waiting.
        tablet = await deployment.client()
        with contextlib.suppress(websockets.ConnectionClosed, ConnectionError):
            await tablet.hello_iris(deployment.token, "tablet")
        refused = await tablet.wait_type("error", timeout=15)
        assert refused["error"]["code"] == "unavailable"
        assert await tablet.wait_closed() == CLOSE_UNAVAILABLE
    # The edge's subscription and the plugin's command consumer reconnect by themselves:
    # the same send (a client retries with its client_id) is acknowledged and answered.
    for _ in range(100):
        start = len(phone.frames)
        await phone.send(message)
        try:
            answer = await phone.wait_for(
                lambda f: (
                    f.get("client_id") == "c-frozen" and f.get("type") in ("message.ack", "error")
                ),
                3,
                start,
            )
        except TimeoutError:
            continue  # an answer sent while the edge was resubscribing; resend
        if answer["type"] == "message.ack":
            break
        await asyncio.sleep(0.2)
    assert answer["type"] == "message.ack"
    await phone.wait_type("run.finished", timeout=60, run_id=answer["run_id"])
    assert phone.closed_code is None
    tablet = await deployment.iris("tablet")  # and a new device connects again
    assert tablet.closed_code is None


async def test_after_an_embedded_gateway_restart_mid_turn_hermes_resume_shows_no_empty_runs(
    embedded: Callable[..., Deployment],
) -> None:
    deployment = embedded()
    port = deployment.ws_urls[0].rsplit(":", 1)[1]
    phone = await deployment.iris("phone")
    after = phone.last_cursor
    ack = await _send(phone, "[verylong] a very long story", "c-resume")
    await phone.wait_type("message.update", timeout=60)
    deployment.gateway.stop()
    await phone.wait_closed()  # read what the stopping gateway sent: its cursor moves on
    # Hermes resumes the turn its stop interrupted; on its way it runs its processing
    # hooks for events that produce nothing.
    deployment.gateway.restart(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"))
    back = await deployment.iris("phone", cursor=phone.last_cursor)
    resumed = await back.wait_for(
        lambda f: (
            f["type"] == "message"
            and f.get("kind") == "reply"
            and f.get("text")
            and f["run_id"] != ack["run_id"]
        ),
        timeout=90,
    )
    await back.wait_type("run.finished", timeout=60, run_id=resumed["run_id"])
    replies = [f for f in back.frames if f["type"] == "message" and f.get("role") == "assistant"]
    assert all(reply["text"] for reply in replies), replies
    started = {f["run_id"] for f in back.frames if f["type"] == "run.started"}
    assert started == {resumed["run_id"]}, back.frames
    _assert_clean(
        check_delivery(
            "embedded restart mid-turn", phone.frames + back.frames, deployment.home.path, after
        )
    )


async def test_after_an_embedded_gateway_crash_mid_turn_hermes_resume_continues_the_same_run(
    embedded: Callable[..., Deployment],
) -> None:
    deployment = embedded()
    port = deployment.ws_urls[0].rsplit(":", 1)[1]
    phone = await deployment.iris("phone")
    after = phone.last_cursor
    ack = await _send(phone, "[long] a long story", "c-crash")
    await phone.wait_type("message.update", timeout=60)
    deployment.gateway.kill9()
    await phone.wait_closed()
    # Hermes resumes the turn the crash interrupted, during its start-up restore.
    deployment.gateway.restart(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"))
    back = await deployment.iris("phone", cursor=phone.last_cursor)
    finished = await back.wait_type("run.finished", timeout=90)
    assert finished["run_id"] == ack["run_id"], back.frames
    assert finished["status"] == "completed", finished
    reply = next(f for f in back.frames if f["type"] == "message" and f["run_id"] == ack["run_id"])
    assert reply["text"], reply
    assert not [f for f in back.frames if f["type"] == "run.started"], back.frames
    _assert_clean(
        check_delivery(
            "embedded crash mid-turn", phone.frames + back.frames, deployment.home.path, after
        )
    )


async def test_a_send_is_in_the_outbox_and_the_replay_as_soon_as_it_is_acknowledged(
    embedded: Callable[..., Deployment],
) -> None:
    deployment = embedded()
    phone = await deployment.iris("phone")
    after = phone.last_cursor
    ack = await _send(phone, "[slow] do the slow thing", "c-ack-then-replay")
    # Read by another process the moment the ack arrived: the send is committed.
    stored = outbox_events(deployment.home.path)
    assert [e["type"] for e in stored if e.get("client_id") == "c-ack-then-replay"] == [
        "message.complete",  # the user's message (iris: `message`)
        "run.accepted",
    ], stored
    # A device replaying right after the ack gets it.
    tablet = await deployment.iris("tablet", cursor=after)
    echo = await tablet.wait_for(
        lambda f: f.get("type") == "message" and f.get("client_id") == "c-ack-then-replay", 30
    )
    assert echo["message_id"] == f"u-{ack['client_id']}"
    await tablet.wait_type("run.finished", timeout=90, run_id=ack["run_id"])


async def test_a_gateway_killed_right_after_an_ack_loses_nothing_it_acknowledged(
    embedded: Callable[..., Deployment],
) -> None:
    deployment = embedded()
    port = deployment.ws_urls[0].rsplit(":", 1)[1]
    phone = await deployment.iris("phone")
    after = phone.last_cursor
    ack = await _send(phone, "[slow] do the slow thing", "c-ack-then-kill")
    deployment.gateway.kill9()
    await phone.wait_closed()
    acknowledged = [e for e in outbox_events(deployment.home.path) if e.get("cursor", 0) > after]
    assert {"message.complete", "run.accepted"} <= {
        e["type"] for e in acknowledged if e.get("client_id") == "c-ack-then-kill"
    }, acknowledged
    deployment.gateway.restart(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"))
    back = await deployment.iris("phone", cursor=after)
    echo = await back.wait_for(
        lambda f: f.get("type") == "message" and f.get("client_id") == "c-ack-then-kill", 30
    )
    assert echo["message_id"] == f"u-{ack['client_id']}"
    finished = await back.wait_type("run.finished", timeout=90, run_id=ack["run_id"])
    assert finished["status"] in ("completed", "failed", "cancelled")
    await _until(lambda: _finished(deployment, ack["run_id"]))
    runs = [
        e
        for e in outbox_events(deployment.home.path)
        if e["type"] == "run.finished" and e["run_id"] == ack["run_id"]
    ]
    assert len(runs) == 1

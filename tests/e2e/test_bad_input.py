"""Bad input gets the dialect's specified error; a usable connection stays usable."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from canonical.protocol import MAX_FRAME_BYTES, MAX_TEXT_CHARS
from edge.errors import (
    CLOSE_AUTH_TIMEOUT,
    CLOSE_LOCKED_OUT,
    CLOSE_UNAUTHORIZED,
    CLOSE_VERSION_MISMATCH,
)
from tests.e2e.conftest import Deployment
from tests.e2e.flows import default_conversation, iris_send
from tests.harness.device import DeviceClient


@pytest.fixture
def deployment(embedded: Callable[..., Deployment]) -> Deployment:
    return embedded()


async def test_a_wrong_token_is_unauthorized_and_closed(deployment: Deployment) -> None:
    for hello in (
        {"type": "hello", "secret": "wrong-secret-xxxxxxxx", "protocol_version": 1},
        {"type": "hello", "token": "wrong-token-xxxxxxxxx", "device_id": "p1"},
    ):
        client = await deployment.client()
        await client.send(hello)
        error = await client.wait_type("error")
        assert error["error"]["code"] == "unauthorized"
        assert await client.wait_closed() == CLOSE_UNAUTHORIZED


async def test_a_wrong_protocol_version_is_a_version_mismatch(deployment: Deployment) -> None:
    client = await deployment.client()
    with client.off_schema():
        await client.send({"type": "hello", "secret": deployment.token, "protocol_version": 2})
    assert (await client.wait_type("error"))["error"]["code"] == "version_mismatch"
    assert await client.wait_closed() == CLOSE_VERSION_MISMATCH


async def test_no_hello_within_ten_seconds_is_an_auth_timeout(deployment: Deployment) -> None:
    client = await deployment.client()
    error = await client.wait_type("error", timeout=15)
    assert error["error"]["code"] == "auth_timeout"
    assert await client.wait_closed() == CLOSE_AUTH_TIMEOUT


async def test_five_failed_hellos_lock_the_address_out(deployment: Deployment) -> None:
    for _ in range(5):
        client = await deployment.client()
        await client.hello_pheby("not-the-secret-at-all")
        await client.wait_closed()
    locked = await deployment.client()
    assert (await locked.wait_type("error"))["error"]["code"] == "rate_limited"
    assert await locked.wait_closed() == CLOSE_LOCKED_OUT


async def test_behind_a_trusted_proxy_the_lockout_counts_per_forwarded_address(
    deployment: Deployment,
) -> None:
    async def via(address: str) -> DeviceClient:
        # Loopback is a trusted proxy by default (FORWARDED_ALLOW_IPS): its X-Forwarded-For counts.
        client = DeviceClient(deployment.ws_urls[0] + "/ws")
        deployment.clients.append(client)
        return await client.connect(additional_headers={"X-Forwarded-For": address})

    for _ in range(5):
        client = await via("203.0.113.7")
        await client.hello_pheby("not-the-secret-at-all")
        await client.wait_closed()
    locked = await via("203.0.113.7")
    assert (await locked.wait_type("error"))["error"]["code"] == "rate_limited"
    assert await locked.wait_closed() == CLOSE_LOCKED_OUT
    for neighbour in (await via("203.0.113.8"), await deployment.client()):
        assert (await neighbour.hello_pheby(deployment.token))["type"] == "ready"


@pytest.mark.parametrize("dialect", ["pheby", "iris"])
async def test_garbage_oversize_overlong_and_unknown_frames_get_errors_and_the_connection_stays_usable(
    deployment: Deployment, dialect: str
) -> None:
    client = await (deployment.pheby() if dialect == "pheby" else deployment.iris("p1"))
    await client.send_raw("{this is not json")
    assert (await client.wait_type("error"))["error"]["code"] == "invalid_json"
    start = len(client.frames)
    await client.send_raw(json.dumps({"type": "ping", "pad": "x" * (MAX_FRAME_BYTES + 10)}))
    assert (await client.wait_type("error", start=start))["error"]["code"] == "too_large"
    start = len(client.frames)
    if dialect == "pheby":
        conversation_id = await default_conversation(client)
        long_send = {
            "type": "chat.send",
            "conversation_id": conversation_id,
            "text": "y" * (MAX_TEXT_CHARS + 1),
            "request_id": "long",
        }
    else:
        long_send = {
            "type": "message.send",
            "chat_id": "android:default",
            "text": "y" * (MAX_TEXT_CHARS + 1),
            "client_id": "c1",
            "request_id": "long",
        }
    start = len(client.frames)
    with client.off_schema():
        await client.send(long_send)
        error = await client.wait_type("error", start=start)
        unknown = await client.request({"type": "no.such.frame"})
        bad_field = await client.request(
            {"type": "conversation.open", "conversation_id": 42}
            if dialect == "pheby"
            else {"type": "sync", "cursor": "x"}
        )
    assert error["error"]["code"] == "too_large" and error["request_id"] == "long"
    assert unknown["type"] == "error" and unknown["error"]["code"] == "unknown_type"
    assert bad_field["error"]["code"] == "bad_request"
    pong = await client.request({"type": "ping"})
    assert pong["type"] == "pong"


async def test_an_unknown_conversation_is_conversation_not_found(deployment: Deployment) -> None:
    client = await deployment.pheby()
    reply = await client.request({"type": "conversation.open", "conversation_id": "0" * 32})
    assert reply["error"] == {"code": "conversation_not_found", "message": "Conversation not found"}


async def test_a_second_send_while_a_run_is_active_gets_run_active(deployment: Deployment) -> None:
    client = await deployment.pheby()
    conversation_id = await default_conversation(client)
    await client.send(
        {
            "type": "chat.send",
            "conversation_id": conversation_id,
            "text": "[long] tell me a story",
            "request_id": "first",
        }
    )
    await client.wait_type("run.accepted", request_id="first")
    reply = await client.request(
        {
            "type": "chat.send",
            "conversation_id": conversation_id,
            "text": "and another",
            "request_id": "second",
        }
    )
    assert reply["error"]["code"] == "run_active"
    await client.wait_type("run.finished", timeout=60)


async def test_binary_frames_must_be_utf8_json(deployment: Deployment) -> None:
    client: DeviceClient = await deployment.iris("p2")
    await client.send_raw(b"\xff\xfe\x00")
    assert (await client.wait_type("error"))["error"]["code"] == "invalid_json"


@pytest.mark.parametrize("dialect", ["pheby", "iris"])
async def test_a_lone_surrogate_escape_is_invalid_json_and_an_escaped_pair_is_text(
    deployment: Deployment, dialect: str
) -> None:
    client = await (deployment.pheby() if dialect == "pheby" else deployment.iris("p3"))
    # json.dumps escapes non-ASCII: "\ud800" goes out as that escape, 😀 as a pair of them.
    with client.off_schema():  # a field no ping has, carrying the lone surrogate
        lone = await client.request({"type": "ping", "note": "half of a pair: \ud800"})
    assert lone["type"] == "error" and lone["error"]["code"] == "invalid_json"
    if dialect == "iris":
        send = {"type": "message.send", "chat_id": "android:default", "client_id": "s1"}
        sent = await client.request({**send, "text": "lone \udfff"})
        assert sent["type"] == "error" and sent["error"]["code"] == "invalid_json"
        assert (await iris_send(client, "android:default", "a whole one: 😀"))["type"] == (
            "message.ack"
        )
    with client.off_schema():  # no ping has a note: the server ignores it
        pong = await client.request({"type": "ping", "note": "😀"})
    assert pong["type"] == "pong"


async def test_a_hello_with_a_lone_surrogate_is_refused_as_invalid_json(
    deployment: Deployment,
) -> None:
    client = await deployment.client()
    await client.hello_iris(deployment.token, "p4", device_name="name \ud83d")
    assert (await client.wait_type("error"))["error"]["code"] == "invalid_json"
    assert await client.wait_closed() == CLOSE_UNAUTHORIZED


async def test_a_hello_cursor_that_is_not_a_cursor_is_a_bad_request(
    deployment: Deployment,
) -> None:
    # Taken as "no cursor" these would start the device at the head, skipping what it missed.
    for cursor in (2.0, "2", True, -1, 2**63):
        client = await deployment.client()
        hello = {"type": "hello", "token": deployment.token, "device_id": "p5", "version": 1}
        if cursor == 2.0 and isinstance(cursor, float):
            # JSON Schema counts 2.0 an integer; the server, stricter, refuses it.
            await client.send({**hello, "cursor": cursor})
        else:
            with client.off_schema():
                await client.send({**hello, "cursor": cursor})
        assert (await client.wait_type("error"))["error"]["code"] == "bad_request", cursor
        assert await client.wait_closed() == CLOSE_UNAUTHORIZED


async def test_a_device_ahead_of_the_head_starts_from_the_head_and_gets_new_events(
    deployment: Deployment,
) -> None:
    client = await deployment.iris("p6", cursor=10**15)  # e.g. the server was restored
    assert (await iris_send(client, "android:default", "still there?"))["type"] == "message.ack"
    echo = await client.wait_for(lambda f: f.get("type") == "message" and f.get("role") == "user")
    assert echo["text"] == "still there?" and echo["cursor"] < 10**15


async def test_hello_fields_of_the_wrong_type_are_refused_not_coerced(
    deployment: Deployment,
) -> None:
    pheby = {"type": "hello", "secret": deployment.token, "protocol_version": 1}
    iris = {"type": "hello", "token": deployment.token, "device_id": "p7", "version": 1}
    for hello, code in (
        ({**pheby, "protocol_version": True}, "version_mismatch"),  # true == 1 in Python
        ({**pheby, "protocol_version": 1.0}, "version_mismatch"),
        ({**iris, "version": True}, "version_mismatch"),
        ({**pheby, "request_id": float("nan")}, "bad_request"),  # echoed, it is not JSON
        ({**pheby, "request_id": "r" * 257}, "bad_request"),
        ({**iris, "caps": "streaming"}, "bad_request"),
        ({**iris, "caps": [1, 2]}, "bad_request"),
        ({**iris, "device_name": 42}, "bad_request"),
        ({**iris, "fcm_token": ["t"]}, "bad_request"),
    ):
        client = await deployment.client()
        if isinstance(hello.get("protocol_version"), float):
            # JSON Schema holds 1.0 equal to 1; the server, stricter, refuses it.
            await client.send(hello)
        else:
            with client.off_schema():
                await client.send(hello)
        assert (await client.wait_type("error"))["error"]["code"] == code, hello
        assert await client.wait_closed() in (CLOSE_UNAUTHORIZED, CLOSE_VERSION_MISMATCH)
    client = await deployment.pheby()
    long_id = "r" * 257
    with client.off_schema():
        await client.send({"type": "ping", "request_id": long_id})
    refused = await client.wait_type("error")
    assert refused["error"]["code"] == "bad_request" and refused.get("request_id") is None


async def test_a_reused_pheby_request_id_still_gives_each_send_its_own_user_message(
    deployment: Deployment,
) -> None:
    phone = await deployment.pheby()
    tablet = await deployment.iris("p8")
    conversation_id = await default_conversation(phone)
    for text in ("first", "second"):  # "r1" in every session of a pheby client
        start = len(phone.frames)
        send = {"type": "chat.send", "conversation_id": conversation_id, "request_id": "r1"}
        await phone.send({**send, "text": text})
        accepted = await phone.wait_type("run.accepted", start=start)
        await phone.wait_type("run.finished", timeout=90, start=start, run_id=accepted["run_id"])

    def echoes() -> list[dict[str, object]]:
        return [f for f in tablet.frames if f.get("type") == "message" and f.get("role") == "user"]

    await tablet.wait_for(lambda _: len(echoes()) >= 2)
    assert [e["text"] for e in echoes()] == ["first", "second"]
    assert len({e["message_id"] for e in echoes()}) == 2, echoes()


async def test_a_request_without_a_request_id_is_answered_without_one(
    deployment: Deployment,
) -> None:
    # The id is optional in both dialects; the answer then carries none, never a null one
    # (each frame received is checked against the dialect's schema too).
    pheby = await deployment.pheby()
    for request, answer in (
        ({"type": "conversation.list"}, "conversation.snapshot"),
        ({"type": "conversation.create", "name": "No id"}, "conversation.created"),
        ({"type": "conversation.open", "conversation_id": "f" * 32}, "error"),
    ):
        start = len(pheby.frames)
        await pheby.send(request)
        reply = await pheby.wait_type(answer, start=start)
        assert "request_id" not in reply, reply
    iris = await deployment.iris("phone")
    for request, answer in (
        ({"type": "channel.create", "kind": "channel", "name": "No id"}, "result"),
        ({"type": "history", "chat_id": "android:nope"}, "error"),
    ):
        start = len(iris.frames)
        await iris.send(request)
        reply = await iris.wait_type(answer, start=start)
        assert "request_id" not in reply, reply

"""Scaled mode: stateless edge processes on a real Redis, the plugin in the gateway."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from tests.e2e.conftest import Deployment
from tests.e2e.flows import (
    IRIS_RUN_ORDER,
    PHEBY_RUN_ORDER,
    collapse,
    default_conversation,
    frames_of_run,
    pheby_run,
)
from tests.harness.device import DeviceClient


def _strip_volatile(frames: list[dict]) -> list[tuple]:
    return [
        (f["type"], f.get("message_id"), f.get("text"), f.get("status"))
        for f in frames
        if f["type"] != "message.delta"
    ]


async def test_a_run_sent_on_edge_one_reaches_a_device_on_edge_two_whole_and_in_order(
    scaled: Callable[..., Deployment],
) -> None:
    deployment = scaled(edges=2)
    device_a = await deployment.pheby(edge=0)
    device_b = await deployment.pheby(edge=1)
    conversation_id = await default_conversation(device_a)
    frames_a = await pheby_run(device_a, conversation_id, "[tool] run it across edges")
    frames_b = await frames_of_run(device_b, frames_a[0]["run_id"])
    assert collapse([f["type"] for f in frames_a]) == PHEBY_RUN_ORDER
    assert collapse([f["type"] for f in frames_b]) == PHEBY_RUN_ORDER
    assert _strip_volatile(frames_a) == _strip_volatile(frames_b)
    assert frames_b[-1]["status"] == "completed"
    await deployment.close_clients()


async def test_iris_devices_on_two_edges_see_the_same_cursors(
    scaled: Callable[..., Deployment],
) -> None:
    deployment = scaled(edges=2)
    phone = await deployment.iris("phone", edge=0)
    tablet = await deployment.iris("tablet", edge=1)
    client_id = "c-across-edges"
    start = len(phone.frames)
    await phone.send(
        {
            "type": "message.send",
            "chat_id": "android:default",
            "text": "[tool] hello",
            "client_id": client_id,
        }
    )
    ack = await phone.wait_type("message.ack", start=start, client_id=client_id)
    on_phone = await frames_of_run(phone, ack["run_id"])
    on_tablet = await frames_of_run(tablet, ack["run_id"])
    assert collapse([f["type"] for f in on_phone]) == IRIS_RUN_ORDER
    finals = [(f["type"], f["cursor"]) for f in on_phone if f["type"] != "message.update"]
    assert finals == [(f["type"], f["cursor"]) for f in on_tablet if f["type"] != "message.update"]
    await deployment.close_clients()


async def test_two_tenants_share_redis_and_edges_but_never_see_each_other(
    scaled: Callable[..., Deployment],
) -> None:
    first = scaled(edges=2)
    second = scaled(share_edges_with=first)
    alice = await first.pheby(edge=0)
    bob = await second.pheby(edge=0)
    bob_elsewhere = await second.pheby(edge=1)
    alice_conversation = await default_conversation(alice)
    bob_conversation = await default_conversation(bob)
    assert alice_conversation != bob_conversation
    await pheby_run(alice, alice_conversation, "alice says hi")
    bob_frames = await pheby_run(bob, bob_conversation, "bob says hi")
    await frames_of_run(bob_elsewhere, bob_frames[0]["run_id"])
    await asyncio.sleep(0.3)
    seen_by_bob = {f.get("conversation_id") for f in bob.frames + bob_elsewhere.frames} - {None}
    assert seen_by_bob == {bob_conversation}
    assert {f.get("conversation_id") for f in alice.frames} - {None} == {alice_conversation}
    # One tenant's conversation id means nothing to the other tenant.
    reply = await bob.request({"type": "conversation.open", "conversation_id": alice_conversation})
    assert reply["error"]["code"] == "conversation_not_found"
    await first.close_clients()
    await second.close_clients()


@pytest.mark.parametrize("edge", [0, 1])
async def test_one_tenants_token_never_opens_the_other_tenant(
    scaled: Callable[..., Deployment], edge: int
) -> None:
    first = scaled(edges=2)
    second = scaled(share_edges_with=first)
    intruder = await DeviceClient(first.ws_urls[edge] + "/ws").connect()
    ready = await intruder.hello_pheby(second.token)
    assert ready["type"] == "ready"
    conversations = await intruder.request({"type": "conversation.list"})
    mine = await first.pheby(edge)
    own = await mine.request({"type": "conversation.list"})
    assert {c["conversation_id"] for c in conversations["conversations"]}.isdisjoint(
        {c["conversation_id"] for c in own["conversations"]}
    )
    await intruder.close()
    await first.close_clients()

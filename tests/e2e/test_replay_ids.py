"""Replay, message ids and cursors at the wire: `sync` replays on any edge, one message keeps
one id in live frames, history, search and replay, and cursor holes are told from loss."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from typing import Any

from canonical.model import Json
from tests.e2e.conftest import Deployment
from tests.e2e.flows import frames_of_run
from tests.harness.device import DeviceClient

DEFAULT = "android:default"


async def _send(client: DeviceClient, text: str, request_id: str) -> tuple[Json, list[Json]]:
    """A message.send with a request_id: its ack and the run's frames on this device."""
    client_id = f"c-{uuid.uuid4().hex}"
    start = len(client.frames)
    await client.send(
        {
            "type": "message.send",
            "chat_id": DEFAULT,
            "thread_id": None,
            "text": text,
            "client_id": client_id,
            "request_id": request_id,
        }
    )
    ack = await client.wait_for(
        lambda f: f.get("client_id") == client_id and f.get("type") in ("message.ack", "error"),
        30,
        start,
    )
    assert ack["type"] == "message.ack", ack
    frames = await frames_of_run(client, ack["run_id"], start)
    echo = next(
        f for f in client.frames[start:] if f.get("type") == "message" and f.get("role") == "user"
    )
    return ack, [echo, *frames]


async def _sync(client: DeviceClient, cursor: int, request_id: str) -> tuple[Json, list[Json]]:
    """sync → sync.ack and the `count` sequenced frames after it."""
    start = len(client.frames)
    await client.send({"type": "sync", "cursor": cursor, "request_id": request_id})
    ack = await client.wait_type("sync.ack", 30, start, request_id=request_id)
    index = client.frames.index(ack, start)
    wanted = ack["count"]
    await client.wait_for(
        lambda f: len([g for g in client.frames[index + 1 :] if "cursor" in g]) >= wanted,
        30,
        index,
    )
    return ack, [f for f in client.frames[index + 1 :] if "cursor" in f][:wanted]


def _sequenced(frames: list[Json]) -> list[tuple[str, int, Any]]:
    return [(f["type"], f["cursor"], f.get("message_id")) for f in frames if "cursor" in f]


async def test_sync_replays_on_a_connection_that_started_at_the_head_embedded(
    embedded: Callable[..., Deployment],
) -> None:
    deployment = embedded()
    phone = await deployment.iris("phone")
    ack, live = await _send(phone, "[tool] zucchini soup tonight", "send-1")
    # Every direct answer echoes its request's request_id.
    assert ack["request_id"] == "send-1", ack
    # A connection that never received the run (a fresh hello starts at the head).
    tablet = await deployment.iris("tablet")
    sync_ack, replayed = await _sync(tablet, 0, "s1")
    assert sync_ack["from"] == 0 and sync_ack["gap"] is False, sync_ack
    assert sync_ack["head"] >= max(f["cursor"] for f in live)
    assert sync_ack["count"] == len(replayed) > 0
    # The replay is what the phone saw live, the streaming updates aside (only a
    # message's newest update is kept, and none once it completed).
    final = [f for f in live if f["type"] != "message.update"]
    assert [f for f in _sequenced(replayed) if f[1] >= final[0]["cursor"]] == _sequenced(final)
    # Syncing again on the same connection replays again: the device says what it has.
    again_ack, again = await _sync(tablet, final[0]["cursor"] - 1, "s2")
    assert _sequenced(again) == _sequenced(final), again
    assert again_ack["count"] == len(final)


async def test_cursor_holes_lose_nothing_and_only_gap_says_events_are_gone(
    embedded: Callable[..., Deployment],
) -> None:
    deployment = embedded()
    phone = await deployment.iris("phone")
    _, live = await _send(phone, "[narrate] mind the holes", "send-3")
    tablet = await deployment.iris("tablet")
    sync_ack, replayed = await _sync(tablet, 0, "s4")
    cursors = [f["cursor"] for f in replayed]
    assert cursors == sorted(set(cursors)), cursors  # in order, each once
    # Holes, yet no gap: the replay skips what a device need not see again...
    assert sync_ack["gap"] is False
    assert any(later - earlier > 1 for earlier, later in itertools.pairwise(cursors)), cursors
    assert sync_ack["count"] < sync_ack["head"] - sync_ack["from"]
    # ...the streaming updates the phone saw live, and nothing else.
    updates = {f["cursor"] for f in live if f["type"] == "message.update"}
    assert updates and {f["cursor"] for f in live} - set(cursors) == updates
    # A device whose cursor sits in a hole resumes with everything after it.
    hole = min(updates)
    _, resumed = await _sync(tablet, hole, "s5")
    final = [f for f in live if f["type"] != "message.update"]
    assert _sequenced(resumed) == [s for s in _sequenced(final) if s[1] > hole]


async def test_sync_replays_on_another_edge_scaled(scaled: Callable[..., Deployment]) -> None:
    deployment = scaled(edges=2)
    phone = await deployment.iris("phone", edge=0)
    ack, live = await _send(phone, "[tool] across edges", "send-2")
    assert ack["request_id"] == "send-2", ack
    tablet = await deployment.iris("tablet", edge=1)
    sync_ack, replayed = await _sync(tablet, 0, "s3")
    assert sync_ack["count"] == len(replayed) > 0
    final = [f for f in live if f["type"] != "message.update"]
    assert [f for f in _sequenced(replayed) if f[1] >= final[0]["cursor"]] == _sequenced(final)


async def test_a_message_keeps_one_id_live_in_history_in_search_and_in_replay(
    embedded: Callable[..., Deployment],
) -> None:
    deployment = embedded()
    phone = await deployment.iris("phone")
    turns = []
    for text in ("[tool] zucchini soup tonight", "[narrate] and a parsnip pie"):
        _, frames = await _send(phone, text, f"send-{len(turns)}")
        echo = frames[0]
        final = next(f for f in frames if f["type"] == "message" and f["role"] == "assistant")
        start = next(f for f in frames if f["type"] == "message.start")
        # The draft and the final reply are one message: the id message.start announced.
        assert final["message_id"] == start["message_id"]
        assert echo["message_id"] == f"u-{echo['client_id']}"
        turns.append((echo["message_id"], final["message_id"]))
    (user_1, reply_1), (user_2, reply_2) = turns
    history = await phone.request({"type": "history", "chat_id": DEFAULT, "limit": 100})
    assert [m["message_id"] for m in history["messages"]] == [user_1, reply_1, user_2, reply_2]
    older = await phone.request(
        {"type": "history", "chat_id": DEFAULT, "limit": 100, "before_message_id": user_2}
    )
    assert [m["message_id"] for m in older["messages"]] == [user_1, reply_1]
    unknown = await phone.request(
        {"type": "history", "chat_id": DEFAULT, "before_message_id": "u-never-sent"}
    )
    assert unknown["type"] == "error" and unknown["error"]["code"] == "bad_request", unknown
    for query, wanted in (("zucchini", [user_1]), ("parsnip", [user_2])):
        found = await phone.request({"type": "search", "query": query})
        assert [h["message_id"] for h in found["hits"]] == wanted, found
    replies = await phone.request({"type": "search", "query": "role:assistant hello-from-tool"})
    assert sorted(h["message_id"] for h in replies["hits"]) == sorted([reply_1, reply_2])
    # A device replaying from the start sees the same ids.
    laptop = await deployment.iris("laptop", cursor=0)
    await laptop.wait_type("run.finished", 30)
    named = {
        f["message_id"]
        for f in await _until_last(laptop, reply_2)
        if f.get("type") == "message" and "cursor" in f
    }
    assert named == {user_1, reply_1, user_2, reply_2}


async def _until_last(client: DeviceClient, message_id: str) -> list[Json]:
    await client.wait_for(
        lambda f: f.get("type") == "message" and f.get("message_id") == message_id, 30
    )
    return list(client.frames)

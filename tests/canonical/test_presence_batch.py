"""canonical.presence_batch: presence writes of a short window in one round trip."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import redis.asyncio as aioredis
from hypothesis import given
from hypothesis import strategies as st
from redis.exceptions import ResponseError

from canonical.bus import command_stream, presence_key
from canonical.errors import BusUnavailable
from canonical.presence_batch import BATCH_MAX, PresenceBatch, PresenceWriter
from canonical.redis_bus import RedisBus
from tests.harness.processes import RedisServer

Command = Sequence[Any]


def test_a_batch_sends_the_hellos_first_then_one_hset_and_one_expire_per_tenant() -> None:
    batch = PresenceBatch()
    batch.add("t1", "phone", '{"p":1}', 65, ("XADD", "s1", "*", "d", "hello-phone"))
    batch.add("t1", "desk", '{"d":1}', 35)
    batch.add("t2", "tablet", '{"t":1}', 65, ("XADD", "s2", "*", "d", "hello-tablet"))
    commands, depends = batch.commands(), batch.depends()
    assert commands == [
        ("XADD", "s1", "*", "d", "hello-phone"),
        ("XADD", "s2", "*", "d", "hello-tablet"),
        ("HSET", presence_key("t1"), "phone", '{"p":1}', "desk", '{"d":1}'),
        ("EXPIRE", presence_key("t1"), 65),
        ("HSET", presence_key("t2"), "tablet", '{"t":1}'),
        ("EXPIRE", presence_key("t2"), 65),
    ]
    # Each caller depends on its own hello and its tenant's writes, never another's.
    assert depends == [[0, 2, 3], [2, 3], [1, 4, 5]]


def test_a_device_that_goes_offline_in_the_same_batch_is_only_deleted() -> None:
    batch = PresenceBatch()
    batch.add("t1", "phone", '{"p":1}', 65)
    batch.add("t1", "phone", None)
    commands = batch.commands()
    assert commands == [("HDEL", presence_key("t1"), "phone")]


ops = st.lists(
    st.tuples(
        st.sampled_from(["t1", "t2"]),
        st.sampled_from(["phone", "desk", "tablet"]),
        st.one_of(st.none(), st.text(min_size=1, max_size=3)),
    ),
    min_size=1,
    max_size=30,
)


@given(ops)
def test_a_batch_leaves_redis_as_the_writes_one_by_one_would(
    writes: list[tuple[str, str, str | None]],
) -> None:
    one_by_one: dict[str, dict[str, str]] = {}
    for tenant, device, entry in writes:
        fields = one_by_one.setdefault(presence_key(tenant), {})
        if entry is None:
            fields.pop(device, None)
        else:
            fields[device] = entry
    batch = PresenceBatch()
    for tenant, device, entry in writes:
        batch.add(tenant, device, entry, 60)
    batched: dict[str, dict[str, str]] = {}
    commands, depends = batch.commands(), batch.depends()
    for name, key, *rest in commands:
        fields = batched.setdefault(key, {})
        if name == "HDEL":
            for device in rest:
                fields.pop(device, None)
        elif name == "HSET":
            fields.update(zip(rest[::2], rest[1::2], strict=True))
    assert {k: v for k, v in batched.items() if v} == {k: v for k, v in one_by_one.items() if v}
    assert len(depends) == len(writes)
    assert [c[0] for c in commands].count("HSET") <= 2


class Pipeline:
    """Records the pipelines sent; answers from a script."""

    def __init__(self) -> None:
        self.sent: list[list[Command]] = []
        self.fail: BaseException | None = None
        self.error_on: str | None = None  # a key whose commands get an error reply

    async def __call__(self, commands: Sequence[Command]) -> list[Any]:
        self.sent.append(list(commands))
        await asyncio.sleep(0)
        if self.fail is not None:
            raise self.fail
        return [
            ResponseError("WRONGTYPE") if self.error_on in command else 1 for command in commands
        ]


async def test_writes_of_one_window_share_one_round_trip() -> None:
    pipeline = Pipeline()
    writer = PresenceWriter(pipeline, window_s=0.01)
    waits = [writer.write("t1", f"d{i}", "{}", 65) for i in range(20)]
    await asyncio.gather(*waits)
    assert len(pipeline.sent) == 1
    assert [c[0] for c in pipeline.sent[0]] == ["HSET", "EXPIRE"]


async def test_a_full_batch_goes_out_without_waiting_for_the_window() -> None:
    pipeline = Pipeline()
    writer = PresenceWriter(pipeline, window_s=60.0)
    waits = [writer.write("t1", f"d{i}", "{}", 65) for i in range(BATCH_MAX)]
    async with asyncio.timeout(5):
        await asyncio.gather(*waits)
    assert len(pipeline.sent) == 1


async def test_an_error_reply_fails_only_the_callers_that_depend_on_it() -> None:
    pipeline = Pipeline()
    pipeline.error_on = presence_key("broken")
    writer = PresenceWriter(pipeline, window_s=0.005)
    good = writer.write("t1", "phone", "{}", 65)
    bad = writer.write("broken", "phone", "{}", 65)
    assert await good is None
    with pytest.raises(ResponseError):
        await bad


async def test_a_lost_connection_fails_every_caller_of_the_batch() -> None:
    pipeline = Pipeline()
    pipeline.fail = BusUnavailable("redis connection lost")
    writer = PresenceWriter(pipeline, window_s=0.005)
    waits = [writer.write("t1", "phone", "{}", 65), writer.write("t2", "desk", None)]
    results = await asyncio.gather(*waits, return_exceptions=True)
    assert all(isinstance(result, BusUnavailable) for result in results)


async def test_a_flush_cancelled_with_its_loop_cancels_its_callers() -> None:
    release = asyncio.Event()

    async def hanging(commands: Sequence[Command]) -> list[Any]:
        await release.wait()
        return [1 for _ in commands]

    writer = PresenceWriter(hanging, window_s=0.001)
    waiter = writer.write("t1", "phone", "{}", 65)
    await asyncio.sleep(0.01)
    (flush,) = writer._flushing
    flush.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter


async def test_a_cancelled_caller_does_not_disturb_the_others() -> None:
    pipeline = Pipeline()
    writer = PresenceWriter(pipeline, window_s=0.005)
    gone = writer.write("t1", "phone", "{}", 65)
    kept = writer.write("t1", "desk", "{}", 65)
    gone.cancel()
    assert await kept is None
    assert len(pipeline.sent) == 1


@pytest.fixture
async def raw(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_server.url)
    yield client
    await client.aclose()


async def test_many_set_ups_at_once_write_presence_in_one_hset_on_a_real_redis(
    redis_server: RedisServer, raw: aioredis.Redis
) -> None:
    bus = RedisBus(redis_server.url)
    try:
        await raw.config_resetstat()
        info = {"edge": "e1", "conn": "c", "dialect": "iris"}
        await asyncio.gather(
            *(
                bus.device_online(
                    "t1", f"phone{i}", info, {"cmd": "hello", "device_id": f"phone{i}"}
                )
                for i in range(40)
            )
        )
        online = await bus.presence("t1")
        stats = await raw.info("commandstats")
    finally:
        await bus.close()
    assert sorted(online) == sorted(f"phone{i}" for i in range(40))
    assert stats["cmdstat_hset"]["calls"] == 1
    assert stats["cmdstat_xadd"]["calls"] == 40
    hellos = await raw.xrange(command_stream("t1"))
    assert [json.loads(fields[b"d"])["device_id"] for _, fields in hellos] == [
        f"phone{i}" for i in range(40)
    ]


async def test_a_tenant_whose_presence_key_is_broken_does_not_fail_another_tenant(
    redis_server: RedisServer, raw: aioredis.Redis
) -> None:
    await raw.set(presence_key("broken"), "not a hash")
    bus = RedisBus(redis_server.url)
    try:
        good = bus.device_online_soon("t1", "phone", {"edge": "e1"})
        bad = bus.device_online_soon("broken", "phone", {"edge": "e1"})
        assert await good is None
        with pytest.raises(ResponseError):
            await bad
    finally:
        await bus.close()

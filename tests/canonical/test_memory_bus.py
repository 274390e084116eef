"""The bus contract on the embedded MemoryBus, plus what only the memory bus promises."""

from __future__ import annotations

import time
import types
from collections.abc import AsyncIterator

import pytest

import canonical.memory_bus as memory_bus_module
from canonical.bus import forget_memory_bus, open_bus
from canonical.errors import SettingsError
from canonical.memory_bus import MemoryBus

from .test_bus_contract import BusContract, Recorder


class TestMemoryBusContract(BusContract):
    @pytest.fixture
    async def bus(self) -> AsyncIterator[MemoryBus]:
        bus = MemoryBus()
        yield bus
        await bus.close()


async def test_a_memory_publish_is_delivered_before_publish_returns() -> None:
    bus = MemoryBus()
    recorder = Recorder()
    sub = bus.subscription("edge", recorder)
    await sub.start()
    await sub.add_tenant("t")
    await bus.publish("t", b"now")
    assert recorder.received == [("event", "t", b"now")]
    await sub.close()
    await bus.close()


def test_open_bus_shares_one_memory_bus_per_url_until_forgotten() -> None:
    url = "memory://test-open-bus"
    try:
        first = open_bus(url)
        assert isinstance(first, MemoryBus)
        assert open_bus(url) is first
        assert open_bus("memory://test-open-bus-other") is not first
        forget_memory_bus(url)
        assert open_bus(url) is not first
    finally:
        forget_memory_bus(url)
        forget_memory_bus("memory://test-open-bus-other")


def test_open_bus_refuses_an_unknown_scheme_naming_the_setting() -> None:
    with pytest.raises(SettingsError) as caught:
        open_bus("http://x")
    assert caught.value.setting == "ANDROID_BUS_URL"


async def test_reclaim_keeps_submission_order_within_one_millisecond(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Entry ids are "<ms>-<seq>": within one millisecond "-10" must still follow "-9".
    frozen = types.SimpleNamespace(time=lambda: 1_767_225_600.0, monotonic=time.monotonic)
    monkeypatch.setattr(memory_bus_module, "time", frozen)
    bus = MemoryBus()
    for i in range(12):
        await bus.submit("t", {"n": i})
    batch = await bus.consume("t", "crashed", block_ms=100)
    reclaimed = await bus.reclaim("t", "restarted", min_idle_ms=0)
    assert [c["n"] for _, c in reclaimed] == list(range(12))
    assert reclaimed == batch
    await bus.close()

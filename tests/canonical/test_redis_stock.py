"""canonical.redis_stock: with the Redis fast paths off, the bus on redis-py's own client
and PubSub keeps the whole bus contract and survives the same Redis faults."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from canonical import fastpath
from canonical.redis_bus import RedisBus
from canonical.redis_stock import StockCommands
from tests.harness.processes import RedisServer

from . import test_redis_bus
from .test_bus_contract import BusContract


@pytest.fixture
def stock_paths(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Buses made during the test run redis-py's stock client and PubSub (the process
    decides again afterwards)."""
    fastpath.REGISTRY.reset()
    fastpath.REGISTRY.configure("off")
    assert fastpath.active() == frozenset()
    yield
    fastpath.REGISTRY.reset()


class TestStockRedisBusContract(BusContract):
    @pytest.fixture
    async def bus(self, stock_paths: None, redis_server: RedisServer) -> AsyncIterator[RedisBus]:
        bus = RedisBus(redis_server.url)
        assert isinstance(bus.mux, StockCommands) and bus.endpoint is None
        yield bus
        await bus.close()


FAULTS: list[Callable[..., Awaitable[None]]] = [
    test_redis_bus.test_a_subscription_survives_a_redis_kill9_and_restart_and_calls_on_reconnect,
    test_redis_bus.test_submit_while_redis_is_down_raises_bus_unavailable_and_recovers_after,
    test_redis_bus.test_every_command_to_a_frozen_redis_is_unavailable_and_the_bus_recovers_after,
    test_redis_bus.test_a_subscription_whose_redis_freezes_resubscribes_once_it_thaws,
]
RACES: list[Callable[..., Awaitable[None]]] = [
    test_redis_bus.test_a_tenant_added_while_the_subscription_is_connecting_is_not_lost,
]


@pytest.mark.parametrize("fault", FAULTS, ids=lambda test: test.__name__.removeprefix("test_"))
async def test_the_stock_bus_survives_what_the_fast_one_survives(
    stock_paths: None, redis_factory: Callable[..., RedisServer], fault: Any
) -> None:
    await fault(redis_factory)


@pytest.mark.parametrize("race", RACES, ids=lambda test: test.__name__.removeprefix("test_"))
async def test_the_stock_subscription_wins_the_races_the_fast_one_wins(
    stock_paths: None, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch, race: Any
) -> None:
    await race(redis_server, monkeypatch)

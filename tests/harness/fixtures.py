"""pytest fixtures over :mod:`tests.harness`.

Enable for the whole suite with one line in ``tests/conftest.py``::

    pytest_plugins = ["tests.harness.fixtures"]

Session scope: ``redis_server``, ``scripted_model`` (shared; do not kill them in a test,
use ``redis_factory`` / ``scripted_model_factory`` for a private instance to break).
Function scope factories: ``hermes_home_factory``, ``gateway_factory``, ``edge_factory``,
``redis_factory``, ``scripted_model_factory``; everything they start is stopped at teardown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.harness.hermes_home import HermesHome
from tests.harness.processes import (
    EdgeProcess,
    HermesGateway,
    RedisServer,
    ScriptedModel,
    stop_all,
)

SESSION_CHUNK_DELAY = 0.1


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(workdir=tmp_path_factory.mktemp("redis")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def scripted_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScriptedModel]:
    # chunk_delay 0.1: with faster streams and instant tools Hermes' asynchronous
    # tool-progress send can land after the post-tool text, or not at all (README).
    model = ScriptedModel(
        workdir=tmp_path_factory.mktemp("scripted-model"), chunk_delay=SESSION_CHUNK_DELAY
    ).start()
    try:
        yield model
    finally:
        model.stop()


@pytest.fixture
def redis_factory(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """Private Redis servers (to kill9 / restart) for one test."""
    started: list[RedisServer] = []

    def make(port: int | None = None) -> RedisServer:
        server = RedisServer(port, workdir=tmp_path / f"redis-{len(started)}").start()
        started.append(server)
        return server

    yield make
    for server in reversed(started):
        server.stop()


REDIS_PASSWORD = "s3cret-pass"


@pytest.fixture
async def redis_with_password(redis_factory: Callable[..., RedisServer]) -> str:
    """A private Redis that requires REDIS_PASSWORD: its ``host:port``."""
    import redis.asyncio as aioredis

    server = redis_factory()
    raw = aioredis.from_url(server.url)
    await raw.config_set("requirepass", REDIS_PASSWORD)
    await raw.aclose()
    return server.url.split("://", 1)[1]


@pytest.fixture
def scripted_model_factory(tmp_path: Path) -> Iterator[Callable[..., ScriptedModel]]:
    """Private scripted model servers, e.g. with ``first_token_delay`` / ``chunk_delay``."""
    started: list[ScriptedModel] = []

    def make(**kwargs: Any) -> ScriptedModel:
        kwargs.setdefault("workdir", tmp_path / f"model-{len(started)}")
        model = ScriptedModel(**kwargs).start()
        started.append(model)
        return model

    yield make
    for model in reversed(started):
        model.stop()


@pytest.fixture
def hermes_home_factory(tmp_path: Path, scripted_model: ScriptedModel) -> Callable[..., HermesHome]:
    """``make(**HermesHome kwargs)``; defaults to the session scripted model."""
    count = 0

    def make(**kwargs: Any) -> HermesHome:
        nonlocal count
        count += 1
        kwargs.setdefault("model_base_url", scripted_model.base_url)
        kwargs.setdefault("path", tmp_path / f"hermes-home-{count}")
        return HermesHome(**kwargs)

    return make


@pytest.fixture
def gateway_factory() -> Iterator[Callable[..., HermesGateway]]:
    """``make(home, env=..., ready=None, wait=True, timeout=60)`` -> started gateway.

    Waits for ``ready()`` (default: gateway_state.json says running) unless ``wait=False``.
    """
    started: list[HermesGateway] = []

    def make(
        home: HermesHome,
        *,
        env: Mapping[str, str] | None = None,
        ready: Callable[[], bool] | None = None,
        wait: bool = True,
        timeout: float = 60.0,
        args: Sequence[str] = ("-v",),
    ) -> HermesGateway:
        gateway = HermesGateway(home, env=env, args=args)
        started.append(gateway)
        gateway.start()
        if wait:
            gateway.wait_ready(ready, timeout)
        return gateway

    yield make
    for gateway in reversed(started):
        gateway.stop()


@pytest.fixture
def edge_factory(tmp_path: Path) -> Iterator[Callable[..., EdgeProcess]]:
    """``make(env=..., port=None, port_env=None, args=(), timeout=30)`` -> healthy edge."""
    started: list[EdgeProcess] = []

    def make(*, timeout: float = 30.0, **kwargs: Any) -> EdgeProcess:
        kwargs.setdefault("workdir", tmp_path / f"edge-{len(started)}")
        edge = EdgeProcess(**kwargs)
        started.append(edge)
        return edge.start(timeout)

    yield make
    for edge in reversed(started):
        edge.stop()


@pytest.fixture(scope="session", autouse=True)
def _harness_stops_everything_at_session_end() -> Iterator[None]:
    yield
    stop_all()

"""Deployments for end-to-end tests: a real `hermes gateway run` with the plugin, the
scripted model, and either the embedded edge or edge processes on a private Redis."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.harness.device import DeviceClient
from tests.harness.hermes_home import HermesHome
from tests.harness.processes import EdgeProcess, HermesGateway, RedisServer, free_port, http_ok


@dataclass
class Deployment:
    token: str
    ws_urls: list[str]
    gateway: HermesGateway
    home: HermesHome
    edges: list[EdgeProcess] = field(default_factory=list)
    clients: list[DeviceClient] = field(default_factory=list)

    async def client(self, edge: int = 0) -> DeviceClient:
        client = await DeviceClient(self.ws_urls[edge] + "/ws").connect()
        self.clients.append(client)
        return client

    async def pheby(self, edge: int = 0) -> DeviceClient:
        client = await self.client(edge)
        ready = await client.hello_pheby(self.token)
        assert ready["type"] == "ready", ready
        return client

    async def iris(self, device_id: str, edge: int = 0, cursor: int | None = None) -> DeviceClient:
        client = await self.client(edge)
        ack = await client.hello_iris(self.token, device_id, cursor=cursor)
        assert ack["type"] == "hello.ack", ack
        return client

    async def close_clients(self) -> None:
        """Close every client, then fail if any saw a frame off the schema."""
        failures: list[AssertionError] = []
        for client in self.clients:
            try:
                await client.close()
            except AssertionError as failure:
                failures.append(failure)
        if failures:
            raise failures[0]


def platform_connected(gateway: HermesGateway) -> Callable[[], bool]:
    return lambda: (gateway.platform_state("android") or {}).get("state") == "connected"


@pytest.fixture
async def embedded(
    hermes_home_factory: Callable[..., HermesHome], gateway_factory: Callable[..., HermesGateway]
) -> AsyncIterator[Callable[..., Deployment]]:
    made: list[Deployment] = []

    def make(home_options: dict[str, Any] | None = None, **env: str) -> Deployment:
        token = secrets.token_urlsafe(24)
        port = free_port()
        home = hermes_home_factory(**(home_options or {}))
        gateway = gateway_factory(
            home,
            env={"ANDROID_TOKEN": token, "ANDROID_WS_PORT": str(port), **env},
            ready=lambda: http_ok(f"http://127.0.0.1:{port}/healthz"),
        )
        made.append(Deployment(token, [f"ws://127.0.0.1:{port}"], gateway, home))
        return made[-1]

    yield make
    for deployment in made:
        await deployment.close_clients()


@pytest.fixture
async def scaled(
    redis_server: RedisServer,
    hermes_home_factory: Callable[..., HermesHome],
    gateway_factory: Callable[..., HermesGateway],
    edge_factory: Callable[..., EdgeProcess],
) -> AsyncIterator[Callable[..., Deployment]]:
    """`make(edges=2, redis=None, share_edges_with=None, edge_env=None, **gateway_env)`: a
    gateway on Redis plus edge processes."""

    def make(
        edges: int = 2,
        redis: RedisServer | None = None,
        share_edges_with: Deployment | None = None,
        edge_env: dict[str, str] | None = None,
        **env: Any,
    ) -> Deployment:
        bus = (redis or redis_server).url
        token = secrets.token_urlsafe(24)
        home = hermes_home_factory()
        gateway = gateway_factory(
            home, env={"ANDROID_TOKEN": token, "ANDROID_BUS_URL": bus, **env}, wait=False
        )
        if share_edges_with is not None:
            procs = share_edges_with.edges
        else:
            procs = [
                edge_factory(
                    env={
                        "ANDROID_BUS_URL": bus,
                        "ANDROID_WS_HOST": "127.0.0.1",
                        **(edge_env or {}),
                    },
                    port_env="ANDROID_WS_PORT",
                )
                for _ in range(edges)
            ]
        gateway.wait_ready(platform_connected(gateway), timeout=60)
        made.append(Deployment(token, [e.ws_url for e in procs], gateway, home, edges=procs))
        return made[-1]

    made: list[Deployment] = []
    yield make
    for deployment in made:
        await deployment.close_clients()

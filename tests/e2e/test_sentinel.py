"""Redis failover with Sentinel: a real primary, replica and three sentinels on loopback;
the plugin (a real ``hermes gateway run``), two edges and an arq worker on the
``redis+sentinel://`` URL. The primary is killed with SIGKILL while a turn streams."""

from __future__ import annotations

import asyncio
import secrets
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from canonical.model import Json
from canonical.redis_timeouts import RedisTimeouts
from canonical.sentinel import close_primary_client
from tests.e2e.conftest import Deployment, platform_connected
from tests.e2e.flows import frames_of_run, iris_send
from tests.harness.device import DeviceClient
from tests.harness.hermes_home import HermesHome
from tests.harness.proc import REPO_ROOT
from tests.harness.processes import (
    EdgeProcess,
    HermesGateway,
    ManagedProcess,
    SentinelGroup,
    scrubbed_environ,
)
from tests.workers.fake_services import FakeNtfy, running_ntfy
from workers.jobs import PUSH_QUEUE
from workers.redis_pool import open_arq_pool

TOPIC = "hdg-sentinel-topic"
# From the kill until a new send round-trips: failure detection (down-after 1 s), the
# sentinels' vote and promotion, and every client's reconnect backoff. Measured 3.1-4.2 s.
RECOVERY_BOUND_S = 15.0
# A send unanswered for this long goes again (same client_id): the measured time is
# precise to about this much.
RESEND_S = 0.5


@pytest.fixture
def sentinels(tmp_path: Path) -> Iterator[SentinelGroup]:
    group = SentinelGroup(tmp_path / "sentinel", down_after_ms=1000, failover_timeout_ms=3000)
    try:
        yield group.start()
    finally:
        group.cleanup()


@pytest.fixture
def ntfy() -> Iterator[FakeNtfy]:
    with running_ntfy() as fake:
        yield fake


def _worker(tmp_path: Path, env: dict[str, str]) -> ManagedProcess:
    inherited = {k: v for k, v in scrubbed_environ().items() if not k.startswith(("NTFY_", "HDG_"))}
    worker = ManagedProcess(
        "arq:sentinel",
        [sys.executable, "-m", "arq", "workers.settings.PushWorker"],
        log_path=tmp_path / "worker.log",
        env=inherited | env | {"HDG_MEDIA_ROOT": str(tmp_path / "media")},
        cwd=REPO_ROOT,
    )
    return worker.start()


def _worker_healthy(group: SentinelGroup) -> bool:
    address = group.current_primary()
    if address is None:
        return False
    client = redis.Redis(host=address[0], port=address[1], socket_timeout=1)
    try:
        return bool(client.exists(f"{PUSH_QUEUE}:health-check"))
    except redis.RedisError:
        return False
    finally:
        client.close()


async def _send_until_acked(client: DeviceClient, chat_id: str, text: str, deadline: float) -> Json:
    """One message, sent again with the same client_id (idempotent) until acked."""
    client_id = f"c-{uuid.uuid4().hex}"
    while True:
        start = len(client.frames)
        await client.send(
            {"type": "message.send", "chat_id": chat_id, "text": text, "client_id": client_id}
        )
        try:
            reply = await client.wait_for(
                lambda f: (
                    f.get("client_id") == client_id and f.get("type") in ("message.ack", "error")
                ),
                max(0.1, min(RESEND_S, deadline - time.monotonic())),
                start,
            )
        except TimeoutError:
            reply = {}
        if reply.get("type") == "message.ack":
            return reply
        assert time.monotonic() < deadline, f"no ack within the bound; last reply {reply}"
        await asyncio.sleep(0.1)


async def _pushed_beyond(ntfy: FakeNtfy, count: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(ntfy.published) > count:
            return True
        await asyncio.sleep(0.1)
    return False


def _cursors(frames: list[Json]) -> list[int]:
    """Cursors of the events the outbox keeps (a message's deltas go once it completes)."""
    return [
        f["cursor"]
        for f in frames
        if isinstance(f.get("cursor"), int) and f.get("type") != "message.update"
    ]


async def test_a_primary_killed_mid_stream_is_followed_by_plugin_edges_and_worker(
    tmp_path: Path,
    sentinels: SentinelGroup,
    ntfy: FakeNtfy,
    hermes_home_factory: Callable[..., HermesHome],
    gateway_factory: Callable[..., HermesGateway],
    edge_factory: Callable[..., EdgeProcess],
) -> None:
    url = sentinels.url()
    token = secrets.token_urlsafe(24)
    push = {
        "ANDROID_PUSH_BACKEND": "ntfy",
        "NTFY_SERVER_URL": ntfy.url,
        "NTFY_TOPIC": TOPIC,
        "ANDROID_PUSH_DELAY_S": "0.5",
    }
    timeouts = {"ANDROID_REDIS_CONNECT_TIMEOUT_S": "1", "ANDROID_REDIS_COMMAND_TIMEOUT_S": "2"}
    home = hermes_home_factory()
    gateway = gateway_factory(
        home,
        env={"ANDROID_TOKEN": token, "ANDROID_BUS_URL": url, **push, **timeouts},
        wait=False,
    )
    edges = [
        edge_factory(
            env={"ANDROID_BUS_URL": url, "ANDROID_WS_HOST": "127.0.0.1", **timeouts},
            port_env="ANDROID_WS_PORT",
        )
        for _ in range(2)
    ]
    worker = _worker(
        tmp_path,
        {
            "ANDROID_BUS_URL": url,
            "HDG_POLL_DELAY": "0.1",
            "HDG_HEALTH_CHECK_INTERVAL": "1",
            **push,
            **timeouts,
        },
    )
    gateway.wait_ready(platform_connected(gateway), timeout=60)
    worker.wait_until(lambda: _worker_healthy(sentinels), 30, interval=0.2, what="healthy")
    deployment = Deployment(token, [e.ws_url for e in edges], gateway, home, edges=edges)
    try:
        phone = await deployment.iris("phone", edge=0)
        tablet = await deployment.iris("tablet", edge=1)
        created = await phone.request(
            {"type": "channel.create", "name": "After failover", "kind": "channel"}
        )
        other_chat = created["entry"]["chat_id"]

        # A turn streaming when the primary dies: its tool has started, its answer not yet.
        ack = await iris_send(phone, "android:default", "[slow] run the slow command")
        assert ack["type"] == "message.ack", ack
        run_id = ack["run_id"]
        for device in (phone, tablet):
            await device.wait_for(
                lambda f: f.get("run_id") == run_id and str(f.get("type")).startswith("tool"), 60
            )
        before = {d: list(d.frames) for d in (phone, tablet)}
        old_primary = sentinels.current_primary()
        pushes_before = len(ntfy.published)

        sentinels.primary.kill9()
        killed_at = time.monotonic()
        # A new send in another channel (another Hermes session: it runs beside the slow turn).
        sent = await _send_until_acked(
            tablet, other_chat, "hello after failover", killed_at + RECOVERY_BOUND_S
        )
        recovered_s = time.monotonic() - killed_at
        new_primary = sentinels.current_primary()
        print(f"\nredis failover: kill -9 to a new send acked in {recovered_s:.2f}s")
        assert new_primary is not None and new_primary != old_primary

        # The streaming turn finishes on both devices, on both edges.
        for device in (phone, tablet):
            frames = await frames_of_run(device, run_id, timeout=90)
            assert frames[-1]["type"] == "run.finished", frames[-1]
            assert any(f.get("type") == "message" for f in frames), [f["type"] for f in frames]
        await frames_of_run(tablet, sent["run_id"], timeout=90)

        # Nothing a device had received is lost, and nothing is missing after: a fresh
        # replay from cursor 0 holds every event either device saw, with no gap at the end.
        replay = await deployment.iris("laptop", edge=0, cursor=0)
        await replay.wait_for(
            lambda f: f.get("type") == "run.finished" and f.get("run_id") == sent["run_id"], 60
        )
        replayed = set(_cursors(replay.frames))
        for device in (phone, tablet):
            seen = set(_cursors(device.frames))
            assert set(_cursors(before[device])) <= seen
            assert seen <= replayed, sorted(seen - replayed)
            assert max(seen) == max(replayed)

        # The plugin queued pushes on the new primary and the worker delivered them.
        assert await _pushed_beyond(ntfy, pushes_before, 30), worker.log_tail()
        assert worker.running, worker.log_tail()  # it followed, no restart needed
        assert recovered_s < RECOVERY_BOUND_S
    finally:
        await deployment.close_clients()
        worker.stop(timeout=5)


async def test_an_arq_pool_on_the_sentinel_url_rides_out_a_failover(
    sentinels: SentinelGroup,
) -> None:
    pool = open_arq_pool(sentinels.url(), RedisTimeouts(connect_s=1, command_s=2))
    try:
        await pool.set("before", "1")  # a pooled connection to the primary, now idle
        old_primary = sentinels.current_primary()
        sentinels.primary.kill9()
        started = time.monotonic()
        # Without the ride-out, arq's next poll meets the dead connection and the
        # worker stops; here the command waits for the promoted replica.
        await pool.set("after", "1")
        assert await pool.get("after") == b"1"
        assert sentinels.current_primary() not in (None, old_primary)
        print(f"\narq pool: command answered {time.monotonic() - started:.2f}s after kill -9")
    finally:
        await close_primary_client(pool)

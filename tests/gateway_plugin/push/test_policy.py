"""Push from the plugin's side (gateway_plugin.push.policy): a real controller on a memory bus,
its in-process push worker, and a local FCM that answers like the real one."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from arq import Worker, func
from arq.connections import RedisSettings
from prometheus_client import REGISTRY
from redis.asyncio import Redis
from redis.exceptions import RedisError

from canonical.bus import Bus, Subscription, direct_envelopes
from canonical.memory_bus import MemoryBus
from canonical.model import Json
from canonical.protocol import new_id, now_iso
from canonical.redis_bus import RedisBus
from canonical.settings import load_settings
from gateway_plugin import jobs as jobs_module
from gateway_plugin.controller import Controller
from gateway_plugin.jobs import JobQueue
from gateway_plugin.push.pending import PendingPushes
from gateway_plugin.shutdown import Deadline
from tests.gateway_plugin.plugin_parts import new_controller
from tests.harness.processes import RedisServer
from tests.workers.fake_services import FakeFcm, FcmScript, running_fcm
from workers.config import load_config
from workers.context import RESOURCES_KEY, build_resources, resources
from workers.jobs import PUSH_QUEUE
from workers.push.acks import RedisAcks
from workers.push.jobs import push_notify

TOKEN = "pairing-token-" + "p" * 30
TENANT = "tenant-p"
LANE = ["android:default", None]


async def eventually(check: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    """Poll `check` until it is truthy (awaiting it when it returns an awaitable)."""
    for _ in range(int(timeout / 0.02)):
        value = check()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class _Rig:
    subscription: Subscription

    def __init__(self, controller: Controller, bus: Bus) -> None:
        self.controller = controller
        self.bus = bus
        self.replies: list[Json] = []
        self.queued: list[Json] = []  # every push the scheduler handed to the job queue
        self.replied = 0

    def on_bus(self, kind: str, channel: str, payload: bytes) -> None:
        if kind == "direct":
            self.replies.extend(direct_envelopes(payload))

    async def command(self, device_id: str, cmd: str, **args: Any) -> None:
        """Send one device command and wait until the controller has carried it out."""
        count = len(self.replies)
        await self.bus.submit(
            TENANT,
            {
                "cmd": cmd,
                "edge": "e1",
                "conn": f"c-{device_id}",
                "dialect": "iris",
                "device_id": device_id,
                "request_id": f"r-{cmd}-{count}",
                "args": args,
            },
        )
        if cmd not in ("ack", "read.receipt"):  # those are not answered
            await eventually(lambda: len(self.replies) > count, f"the answer to {cmd}")

    async def hello(self, device_id: str, fcm_token: str | None = None) -> None:
        await self.command(device_id, "hello", cursor=None, fcm_token=fcm_token)

    async def reply_event(self, text: str = "done") -> int:
        """A finished assistant reply (push-worthy); its cursor."""
        self.replied += 1
        reply = {
            "type": "message.complete",
            "role": "assistant",
            "kind": "reply",
            "lane": LANE,
            "message_id": f"draft-{new_id()}",  # as a run's: unique, also across restarts
            "text": text,
            "ts": now_iso(),
        }
        [event] = await self.controller.sequencer.append([reply])
        return int(event["cursor"])

    async def decided(self) -> None:
        """Every push scheduled so far has chosen its devices and been queued."""
        await eventually(lambda: not self.controller.push.pending, "the push decisions")

    def queued_for(self, device_id: str) -> list[Json]:
        return [body for body in self.queued if body["device_id"] == device_id]


@pytest.fixture(scope="module")
def _fcm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeFcm, Path]]:
    with running_fcm(tmp_path_factory.mktemp("fcm")) as running:
        yield running


@pytest.fixture
def fcm(_fcm_server: tuple[FakeFcm, Path]) -> FakeFcm:
    _fcm_server[0].reset()
    return _fcm_server[0]


@pytest.fixture
def fcm_account(
    monkeypatch: pytest.MonkeyPatch, _fcm_server: tuple[FakeFcm, Path], fcm: FakeFcm
) -> Path:
    """The plugin's and its workers' environment: FCM at the local fake, nothing else."""
    for name in list(os.environ):
        if name.startswith(("ANDROID_", "NTFY_", "HDG_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ANDROID_TOKEN", TOKEN)
    monkeypatch.setenv("ANDROID_PUSH_BACKEND", "fcm")
    monkeypatch.setenv("ANDROID_FCM_SERVICE_ACCOUNT", str(_fcm_server[1]))
    monkeypatch.setenv("ANDROID_FCM_API_BASE", fcm.url)
    return _fcm_server[1]


@pytest.fixture
async def make_rig(tmp_path: Path, fcm_account: Path) -> AsyncIterator[Callable[..., Any]]:
    """Start a controller (on a memory bus unless given one) whose pushes are recorded."""
    made: list[_Rig] = []

    async def make(bus: Bus | None = None, **settings: Any) -> _Rig:
        bus = bus or MemoryBus()
        extra = {"push_backend": "fcm", "fcm_service_account": str(fcm_account)}
        controller = new_controller(
            bus, tmp_path, tenant=TENANT, token=TOKEN, **{**extra, **settings}
        )
        rig = _Rig(controller, bus)
        rig.subscription = bus.subscription("e1", rig.on_bus)
        await rig.subscription.start()
        await controller.start()
        queue = controller.push.submit
        assert queue is not None

        async def recorded(body: Json, delay: float) -> None:
            rig.queued.append(body)
            await queue(body, delay)

        controller.push.submit = recorded
        made.append(rig)
        return rig

    yield make
    for rig in made:
        if rig.controller.running:
            await rig.controller.stop()
        await rig.subscription.close()


@pytest.fixture
async def rig(make_rig: Callable[..., Any]) -> _Rig:
    made: _Rig = await make_rig()
    return made


async def test_a_token_fcm_calls_unregistered_is_dropped_and_not_tried_again(
    rig: _Rig, fcm: FakeFcm
) -> None:
    await rig.hello("phone", fcm_token="phone-token")
    fcm.script("phone-token", FcmScript.unregistered())
    await rig.reply_event()
    await eventually(lambda: fcm.attempts["phone-token"] == 1, "the first push")
    await eventually(lambda: rig.controller.jobs.dead_fcm_tokens(TENANT), "the dead-token report")

    await rig.reply_event()
    await rig.decided()
    assert len(rig.queued_for("phone")) == 1  # only the first
    phone = rig.controller.devices.get("phone")
    assert phone is not None and phone.fcm_token is None
    assert await rig.controller.jobs.dead_fcm_tokens(TENANT) == set()
    assert fcm.attempts["phone-token"] == 1


async def test_a_token_fcm_calls_invalid_is_dropped_too(rig: _Rig, fcm: FakeFcm) -> None:
    await rig.hello("phone", fcm_token="phone-token")
    fcm.script("phone-token", FcmScript.invalid_token())
    await rig.reply_event()
    await eventually(lambda: rig.controller.jobs.dead_fcm_tokens(TENANT), "the dead-token report")
    await rig.reply_event()
    await rig.decided()
    assert len(rig.queued_for("phone")) == 1


async def test_a_device_that_registers_its_token_again_is_pushed_again(
    rig: _Rig, fcm: FakeFcm
) -> None:
    await rig.hello("phone", fcm_token="phone-token")
    fcm.script("phone-token", FcmScript.unregistered())
    await rig.reply_event()
    await eventually(lambda: rig.controller.jobs.dead_fcm_tokens(TENANT), "the dead-token report")
    await rig.reply_event()
    await rig.decided()
    phone = rig.controller.devices.get("phone")
    assert phone is not None and phone.fcm_token is None

    await rig.command("phone", "fcm.register", token="phone-token")
    await rig.reply_event()
    await eventually(lambda: fcm.deliveries("phone-token"), "a push to the registered token")
    assert fcm.attempts["phone-token"] == 2


async def test_a_token_registered_again_before_the_report_was_pruned_is_kept(
    rig: _Rig, fcm: FakeFcm
) -> None:
    await rig.hello("phone", fcm_token="phone-token")
    fcm.script("phone-token", FcmScript.unregistered())
    await rig.reply_event()
    await eventually(lambda: rig.controller.jobs.dead_fcm_tokens(TENANT), "the dead-token report")

    await rig.command("phone", "fcm.register", token="phone-token")
    await rig.reply_event()
    await eventually(lambda: fcm.deliveries("phone-token"), "a push to the registered token")


async def test_a_dead_token_is_dropped_only_from_the_device_that_held_it(
    rig: _Rig, fcm: FakeFcm
) -> None:
    await rig.hello("phone", fcm_token="phone-token")
    await rig.hello("tablet", fcm_token="tablet-token")
    fcm.script("phone-token", FcmScript.unregistered())
    await rig.reply_event()
    await eventually(lambda: rig.controller.jobs.dead_fcm_tokens(TENANT), "the dead-token report")
    await eventually(lambda: fcm.deliveries("tablet-token"), "the tablet's push")

    await rig.reply_event()
    await rig.decided()
    assert [b["device_id"] for b in rig.queued] == ["tablet", "phone", "tablet"]
    tablet = rig.controller.devices.get("tablet")
    assert tablet is not None and tablet.fcm_token == "tablet-token"


def pushes_skipped_as_read() -> float:
    value = REGISTRY.get_sample_value(
        "hdg_push_results_total", {"backend": "fcm", "outcome": "acked"}
    )
    return value or 0.0


async def test_a_push_waiting_out_a_retry_after_is_dropped_when_the_user_reads_the_event(
    rig: _Rig, fcm: FakeFcm
) -> None:
    await rig.hello("phone", fcm_token="phone-token")
    await rig.hello("laptop")
    fcm.script("phone-token", FcmScript.quota_exceeded(retry_after=1))
    skipped = pushes_skipped_as_read()
    cursor = await rig.reply_event()
    await eventually(lambda: fcm.attempts["phone-token"] == 1, "the first, refused attempt")

    await rig.command("laptop", "ack", cursor=cursor)  # read on the laptop meanwhile
    await eventually(lambda: pushes_skipped_as_read() == skipped + 1, "the retry to stand down")
    assert fcm.attempts["phone-token"] == 1 and fcm.deliveries("phone-token") == []


async def test_only_an_ack_that_moves_the_mark_is_written_to_the_ack_ledger(
    rig: _Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[int] = []
    note_ack = rig.controller.jobs.note_ack

    async def recorded(tenant: str, cursor: int) -> None:
        written.append(cursor)
        await note_ack(tenant, cursor)

    monkeypatch.setattr(rig.controller.jobs, "note_ack", recorded)
    await rig.hello("phone")
    await rig.hello("laptop")
    first = await rig.reply_event()
    await rig.command("laptop", "ack", cursor=first)
    await rig.command("phone", "ack", cursor=first)  # the ledger has it already
    second = await rig.reply_event()
    await rig.command("phone", "read.receipt", cursor=second)
    await rig.hello("tablet")  # answered, so the unanswered acks before it were carried out
    await eventually(lambda: not rig.controller.push._ack_writes, "the ledger writes done")
    assert written == [first, second]


async def test_a_delayed_push_outlives_a_restart_of_the_embedded_gateway(
    make_rig: Callable[..., Any], fcm: FakeFcm
) -> None:
    bus = MemoryBus()
    rig: _Rig = await make_rig(bus, push_delay_s=1.0)
    rig.controller.devices.seen("phone", fcm_token="phone-token")
    await bus.device_online(TENANT, "laptop", {"edge": "e1", "conn": "c-laptop"})
    await rig.reply_event()  # someone is online: the push waits a second for an ack
    await rig.decided()
    await rig.controller.stop()  # ...and the gateway restarts meanwhile
    assert fcm.deliveries("phone-token") == []

    await make_rig(bus, push_delay_s=1.0)
    await eventually(lambda: fcm.deliveries("phone-token"), "the push after the restart")
    await asyncio.sleep(0.3)
    assert len(fcm.deliveries("phone-token")) == 1


async def test_a_push_left_waiting_is_not_sent_once_its_event_was_read(
    make_rig: Callable[..., Any], fcm: FakeFcm
) -> None:
    bus = MemoryBus()
    rig: _Rig = await make_rig(bus, push_delay_s=1.5)
    await rig.hello("phone", fcm_token="phone-token")
    await rig.hello("laptop")
    await bus.device_online(TENANT, "laptop", {"edge": "e1", "conn": "c-laptop"})
    skipped = pushes_skipped_as_read()
    cursor = await rig.reply_event()
    await rig.decided()
    await rig.controller.stop()

    assert rig.controller.jobs.waiting_pushes() == 0  # closed: the file holds it

    again: _Rig = await make_rig(bus, push_delay_s=1.5)
    await eventually(lambda: again.controller.jobs.waiting_pushes() == 1, "the push queued again")
    await again.command("laptop", "ack", cursor=cursor)  # read before the push came due
    await eventually(lambda: pushes_skipped_as_read() == skipped + 1, "the push to stand down")
    assert fcm.deliveries("phone-token") == []
    await eventually(lambda: again.controller.jobs.waiting_pushes() == 0, "its record gone")


async def test_pushes_left_waiting_are_dropped_when_push_was_turned_off(
    make_rig: Callable[..., Any], fcm: FakeFcm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus = MemoryBus()
    rig: _Rig = await make_rig(bus, push_delay_s=30.0)
    rig.controller.devices.seen("phone", fcm_token="phone-token")
    await bus.device_online(TENANT, "laptop", {"edge": "e1", "conn": "c-laptop"})
    await rig.reply_event()
    await rig.decided()
    await rig.controller.stop()
    kept = PendingPushes(tmp_path / "android" / "pending_pushes.db")
    assert [push.body["device_id"] for push in kept.all()] == ["phone"]
    kept.close()

    monkeypatch.setenv("ANDROID_PUSH_BACKEND", "none")
    controller = new_controller(bus, tmp_path, tenant=TENANT, token=TOKEN)
    await controller.start()
    assert controller.push.submit is None
    try:
        await eventually(lambda: controller.jobs.waiting_pushes() == 0, "the records dropped")
    finally:
        await controller.stop()
    monkeypatch.setenv("ANDROID_PUSH_BACKEND", "fcm")
    await make_rig(bus, push_delay_s=0.1)  # push back on: nothing was kept to send
    await asyncio.sleep(0.5)
    assert fcm.deliveries("phone-token") == []


async def test_a_stop_in_a_hurry_cuts_a_slow_push_short_and_the_next_process_sends_it(
    make_rig: Callable[..., Any], fcm: FakeFcm
) -> None:
    fcm.send_delay = 6.0  # an FCM that answers slowly: the job is still sending at stop
    bus = MemoryBus()
    rig: _Rig = await make_rig(bus)
    rig.controller.devices.seen("phone", fcm_token="phone-token")
    await rig.reply_event()  # nobody online: pushed at once
    await eventually(lambda: fcm.attempts["phone-token"] == 1, "the slow send under way")

    started = time.monotonic()
    await rig.controller.stop(Deadline(1.5))  # Hermes' budget, as shutdown.py reads it
    assert time.monotonic() - started < 3.0  # not the 6 s the send takes

    fcm.send_delay = 0.0
    await make_rig(bus)
    await eventually(lambda: fcm.attempts["phone-token"] == 2, "the push sent again")
    await eventually(lambda: fcm.deliveries("phone-token"), "its delivery")


# -- scaled: pushes are arq jobs in Redis ----------------------------------------------------


async def run_push_worker(url: str) -> None:
    """An arq worker on the push queue until the queue is empty, deferred jobs included."""
    config = load_config(bus_url=url)

    async def startup(ctx: dict[str, Any]) -> None:
        ctx[RESOURCES_KEY] = build_resources(config, redis=ctx["redis"])

    async def shutdown(ctx: dict[str, Any]) -> None:
        await resources(ctx).aclose()

    worker = Worker(
        functions=[func(push_notify, name="push_notify")],
        queue_name=PUSH_QUEUE,
        redis_settings=RedisSettings.from_dsn(url),
        on_startup=startup,
        on_shutdown=shutdown,
        burst=True,
        poll_delay=0.05,
        handle_signals=False,
    )
    try:
        await asyncio.wait_for(worker.main(), 30)
    finally:
        await worker.close()


async def test_a_delayed_push_outlives_a_restart_of_the_gateway(
    make_rig: Callable[..., Any], redis_factory: Callable[..., RedisServer], fcm: FakeFcm
) -> None:
    redis = redis_factory()
    bus = RedisBus(redis.url)
    try:
        rig: _Rig = await make_rig(bus, bus_url=redis.url, push_delay_s=1.0)
        rig.controller.devices.seen("phone", fcm_token="phone-token")
        await bus.device_online(TENANT, "laptop", {"edge": "e1", "conn": "c-laptop"})
        await rig.reply_event()  # someone is online: the push waits a second for an ack
        await rig.controller.stop()  # ...and the gateway restarts meanwhile

        await run_push_worker(redis.url)
        assert len(fcm.deliveries("phone-token")) == 1
    finally:
        await bus.close()


async def test_a_delayed_push_outlives_a_redis_that_restarts_empty(
    make_rig: Callable[..., Any],
    redis_factory: Callable[..., RedisServer],
    fcm: FakeFcm,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(jobs_module, "RECONCILE_S", 0.2)
    redis = redis_factory()
    bus = RedisBus(redis.url)
    try:
        rig: _Rig = await make_rig(bus, bus_url=redis.url, push_delay_s=1.0)
        rig.controller.devices.seen("phone", fcm_token="phone-token")
        await bus.device_online(TENANT, "laptop", {"edge": "e1", "conn": "c-laptop"})
        await rig.reply_event()  # someone is online: the push waits a second, in Redis
        await rig.decided()
        assert rig.controller.jobs.waiting_pushes() == 1
        redis.kill9()  # no persistence: the deferred job is gone with it
        redis.start()
        await eventually(push_queued(redis.url), "the push queued again", timeout=20)

        await run_push_worker(redis.url)
        assert len(fcm.deliveries("phone-token")) == 1
        await eventually(lambda: rig.controller.jobs.waiting_pushes() == 0, "its record gone")
        await run_push_worker(redis.url)  # nothing is queued a second time
        assert len(fcm.deliveries("phone-token")) == 1
    finally:
        await bus.close()


def push_queued(url: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        client = Redis.from_url(url)
        try:
            return bool(await client.zcard(PUSH_QUEUE))
        except RedisError:
            return False
        finally:
            await client.aclose()

    return check


async def test_queueing_a_push_rides_out_a_redis_restart(
    redis_factory: Callable[..., RedisServer], fcm: FakeFcm, fcm_account: Path, tmp_path: Path
) -> None:
    redis = redis_factory()
    settings = load_settings({"token": TOKEN, "bus_url": redis.url, "push_backend": "fcm"})
    queue = JobQueue(settings, tmp_path / "media")
    await queue.start()
    try:
        redis.stop()
        queued = asyncio.create_task(queue.push(push_body("phone-token")))
        await eventually(lambda: not redis.ping(), "Redis to be down")
        await asyncio.sleep(0.2)  # a try or two fail meanwhile
        redis.restart()
        await asyncio.wait_for(queued, 15)
        await run_push_worker(redis.url)
        assert len(fcm.deliveries("phone-token")) == 1
    finally:
        await queue.close()


def push_body(token: str) -> Json:
    return {
        "idempotency_key": f"{TENANT}:phone:1",
        "tenant": TENANT,
        "device_id": "phone",
        "backend": "fcm",
        "token_or_topic": token,
        "kind": "reply",
        "chat_id": "android:default",
        "thread_id": None,
        "cursor": "1",
        "title": "New reply",
    }


async def test_pushes_go_out_after_the_outbox_is_restored_from_a_backup(
    make_rig: Callable[..., Any],
    redis_factory: Callable[..., RedisServer],
    fcm: FakeFcm,
    tmp_path: Path,
) -> None:
    """Restoring outbox.db (docs/operations.md, section 7) takes the cursors back; acks of
    the events the backup lost must not mark the new events with those cursors as read."""
    redis = redis_factory()
    bus = RedisBus(redis.url)
    try:
        rig: _Rig = await make_rig(bus, bus_url=redis.url)
        await rig.hello("laptop")
        backup = tmp_path / "outbox-backup.db"
        rig.controller.outbox._db.execute(f"VACUUM INTO '{backup}'")  # the online backup
        for _ in range(5):  # events after the backup, all read on the laptop
            cursor = await rig.reply_event()
        await rig.command("laptop", "ack", cursor=cursor)
        ledger = RedisAcks(rig.controller.jobs._pool)
        await eventually(lambda: _equals(ledger.acked(TENANT), cursor), "the ack recorded")
        await rig.controller.stop()
        outbox = tmp_path / "android" / "outbox.db"
        for stale in (outbox, outbox.with_name("outbox.db-wal"), outbox.with_name("outbox.db-shm")):
            stale.unlink(missing_ok=True)
        backup.rename(outbox)  # restored

        restored: _Rig = await make_rig(bus, bus_url=redis.url)
        restored.controller.devices.seen("phone", fcm_token="phone-token")
        new = await restored.reply_event()
        assert new <= cursor  # a cursor the lost events had used
        await restored.decided()
        assert len(restored.queued_for("phone")) == 1
        skipped = pushes_skipped_as_read()
        await run_push_worker(redis.url)
        assert pushes_skipped_as_read() == skipped  # not taken for read
        assert len(fcm.deliveries("phone-token")) == 1
    finally:
        await bus.close()


async def _equals(value: Awaitable[int], expected: int) -> bool:
    return await value == expected


async def test_an_event_with_a_cursor_a_lost_event_had_is_pushed_too(
    make_rig: Callable[..., Any],
    redis_factory: Callable[..., RedisServer],
    fcm: FakeFcm,
    tmp_path: Path,
) -> None:
    """After a restore, a new event may get the cursor of one the backup lost and that was
    pushed already: it is another event, and gets its own push."""
    redis = redis_factory()
    bus = RedisBus(redis.url)
    try:
        rig: _Rig = await make_rig(bus, bus_url=redis.url)
        rig.controller.devices.seen("phone", fcm_token="phone-token")
        backup = tmp_path / "outbox-backup.db"
        rig.controller.outbox._db.execute(f"VACUUM INTO '{backup}'")
        lost = await rig.reply_event("lost with the restore")
        await rig.decided()
        await run_push_worker(redis.url)
        assert len(fcm.deliveries("phone-token")) == 1
        await rig.controller.stop()
        outbox = tmp_path / "android" / "outbox.db"
        for stale in (outbox, outbox.with_name("outbox.db-wal"), outbox.with_name("outbox.db-shm")):
            stale.unlink(missing_ok=True)
        backup.rename(outbox)

        restored: _Rig = await make_rig(bus, bus_url=redis.url)
        assert await restored.reply_event("new") == lost
        await restored.decided()
        await run_push_worker(redis.url)
        assert len(fcm.deliveries("phone-token")) == 2
    finally:
        await bus.close()

"""Another process holding the write lock of channels.db (and outbox.db) stalls the
command that writes there, never the gateway's event loop: the device keeps getting
answers from it, the blocked command completes once the lock is released, the commands
queued behind it follow with nothing lost, and a lock held past the busy timeout answers
`unavailable` instead of hanging."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.e2e.conftest import Deployment
from tests.harness.device import DeviceClient

HOME = "android:default"
# Takes every named file's write lock, says so, holds it for argv[1] seconds.
HOLDER = """
import sqlite3, sys, time
conns = [sqlite3.connect(p, isolation_level=None, timeout=10) for p in sys.argv[2:]]
for c in conns:
    c.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[1]))
for c in conns:
    c.execute("COMMIT")
"""


@pytest.fixture
def deployment(embedded: Callable[..., Deployment]) -> Deployment:
    return embedded()


@contextmanager
def locked(seconds: float, *paths: Path) -> Iterator[subprocess.Popen[str]]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(seconds), *map(str, paths)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        holder.kill()
        holder.wait(10)
        if holder.stdout is not None:
            holder.stdout.close()


async def _loop_answers(phone: DeviceClient, times: int) -> None:
    """Pings, answered by the embedded edge on the gateway's own event loop: a loop
    blocked by SQLite would answer none of them in time."""
    for _ in range(times):
        start = len(phone.frames)
        await phone.send({"type": "ping"})
        await phone.wait_type("pong", timeout=1, start=start)
        await asyncio.sleep(0.2)


async def test_a_locked_channels_db_stalls_only_its_own_command_until_released(
    deployment: Deployment,
) -> None:
    phone = await deployment.iris("phone")
    data = Path(deployment.home.path) / "android"
    created = await phone.request({"type": "channel.create", "name": "Lab", "kind": "channel"})
    chat_id = created["entry"]["chat_id"]
    with locked(3.0, data / "channels.db", data / "outbox.db") as holder:
        began = time.monotonic()
        rename = asyncio.ensure_future(
            phone.request(
                {"type": "channel.rename", "chat_id": chat_id, "name": "Lab 2"}, timeout=15
            )
        )
        # A second device says hello meanwhile: its command waits in the stream behind
        # the rename (commands are carried out in order), and is answered after it.
        tablet = await deployment.client()
        hello = asyncio.ensure_future(tablet.hello_iris(deployment.token, "tablet"))
        await _loop_answers(phone, 5)
        assert not rename.done() and holder.poll() is None  # still held: answered beside it
        renamed = await rename
        ack = await hello
    assert renamed["type"] == "result" and renamed["entry"]["name"] == "Lab 2", renamed
    assert time.monotonic() - began >= 2.0  # it did wait for the lock
    seen = await phone.wait_type("channel.renamed")
    assert seen["entry"]["name"] == "Lab 2"
    assert ack["type"] == "hello.ack", ack
    assert any(c["name"] == "Lab 2" for c in ack["channels"])
    listed = await phone.request({"type": "channel.list"})
    assert any(c["name"] == "Lab 2" for c in listed["channels"])


async def test_a_lock_held_past_the_busy_timeout_answers_unavailable(
    deployment: Deployment,
) -> None:
    phone = await deployment.iris("phone")
    data = Path(deployment.home.path) / "android"
    with locked(9.0, data / "channels.db"):
        refused = await phone.request(
            {"type": "channel.create", "name": "Never", "kind": "channel"}, timeout=15
        )
        assert refused["type"] == "error", refused
        assert refused["error"]["code"] == "unavailable", refused
        assert "channels.db" in refused["error"]["message"]
        await _loop_answers(phone, 3)
    created = await phone.request({"type": "channel.create", "name": "Later", "kind": "channel"})
    assert created["type"] == "result", created
    listed = await phone.request({"type": "channel.list"})
    names = [c["name"] for c in listed["channels"]]
    assert "Later" in names and "Never" not in names

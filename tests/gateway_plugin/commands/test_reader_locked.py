"""A command whose outbox.db work stays locked out by another process (a `hermes cron
run`) past the retries is answered `unavailable`, never left hanging, and is not carried
out later behind the device's back: a real controller on a private redis-server."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from gateway_plugin.storage import locked
from tests.gateway_plugin.commands.test_once import (
    HOME,
    PluginFactory,
    _Agent,
    _Edge,
    edge,
    pending,
    private_redis,
    start_plugin,
    until,
)
from tests.harness.processes import RedisServer

__all__ = ["edge", "private_redis", "start_plugin"]  # the fixtures this module uses


async def test_a_send_locked_out_of_the_outbox_is_answered_unavailable_and_not_run_later(
    private_redis: tuple[RedisServer, Any],
    edge: _Edge,
    start_plugin: PluginFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(locked, "FIRST_WAIT_S", 0.001)
    monkeypatch.setattr(locked, "MAX_WAIT_S", 0.002)
    server, raw = private_redis
    await edge.listen()
    agent = _Agent()
    plugin = await start_plugin(server.url, agent)
    await plugin.sequencer.run(plugin.outbox._db.execute, "PRAGMA busy_timeout=20")
    other = sqlite3.connect(plugin.data_dir / "outbox.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process writing: outbox.db's write lock
    try:
        await edge.submit(
            "message.send", "s1", chat_id=HOME, thread_id=None, text="hi", client_id="c1"
        )

        async def answered() -> bool:
            return len(edge.replies) == 1 and await pending(raw) == 0

        await until(answered, "the device got an answer and the entry was acked")
    finally:
        other.execute("ROLLBACK")
        other.close()
    [reply] = edge.replies
    body = reply["body"]
    assert body["type"] == "error" and body["code"] == "unavailable"
    assert "outbox.db" in body["message"] and body["client_id"] == "c1"
    assert agent.turns == []  # not handed to Hermes
    # The same frame again, once the lock is gone, goes through.
    await edge.submit("message.send", "s2", chat_id=HOME, thread_id=None, text="hi", client_id="c1")

    async def accepted() -> bool:
        return any(r["body"]["type"] == "send.accepted" for r in edge.replies)

    await until(accepted, "the retried send was accepted")
    assert agent.turns == ["hi"]

"""The storage thread runs jobs in order off the loop; the read pool runs reads beside it."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from gateway_plugin.storage.thread import ReadPool, StorageClosed, StorageThread


async def test_jobs_run_on_the_storage_thread_in_submission_order() -> None:
    thread = StorageThread("hdg-test")
    seen: list[tuple[int, str]] = []
    try:
        for i in range(50):
            thread.run_nowait(lambda i=i: seen.append((i, threading.current_thread().name)))
        last = await thread.run(lambda: threading.current_thread().name)
    finally:
        thread.stop()
    assert [i for i, _ in seen] == list(range(50))
    assert {name for _, name in seen} == {last}
    assert last != threading.current_thread().name and last.startswith("hdg-test")


async def test_the_loop_keeps_running_while_a_job_blocks() -> None:
    thread = StorageThread("hdg-test")
    release = threading.Event()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while not release.is_set():
            ticks += 1
            await asyncio.sleep(0.001)

    try:
        job = asyncio.ensure_future(thread.run(release.wait, 5))
        tick_task = asyncio.ensure_future(ticker())
        await asyncio.sleep(0.05)
        assert ticks > 5 and not job.done()
        release.set()
        assert await job is True
        await tick_task
    finally:
        thread.stop()


async def test_a_failing_job_raises_to_its_awaiter() -> None:
    thread = StorageThread("hdg-test")
    try:
        with pytest.raises(ZeroDivisionError):
            await thread.run(lambda: 1 // 0)
        assert await thread.run(lambda: 2) == 2
    finally:
        thread.stop()


async def test_a_failing_queued_write_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    thread = StorageThread("hdg-test")
    with caplog.at_level(logging.ERROR, logger="gateway_plugin.storage"):
        thread.run_nowait(lambda: 1 // 0)
        thread.stop()
    assert "a queued write failed" in caplog.text


async def test_a_stopped_thread_refuses_new_jobs_after_finishing_queued_ones() -> None:
    thread = StorageThread("hdg-test")
    done: list[int] = []
    thread.run_nowait(done.append, 1)
    thread.stop()
    assert done == [1]
    with pytest.raises(StorageClosed):
        await thread.run(done.append, 2)


async def test_the_read_pool_runs_reads_while_the_writer_is_busy() -> None:
    writer, reads = StorageThread("hdg-test"), ReadPool(workers=2)
    release = threading.Event()
    try:
        blocked = asyncio.ensure_future(writer.run(release.wait, 5))
        assert await reads.run(lambda: "read") == "read"
        assert not blocked.done()
        release.set()
        await blocked
    finally:
        writer.stop()
        reads.stop()

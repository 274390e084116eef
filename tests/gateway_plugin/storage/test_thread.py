"""The storage thread runs jobs in order off the loop; the read pool runs reads beside it."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

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


async def test_handles_of_one_name_share_the_process_thread_until_the_last_stops() -> None:
    first, second = StorageThread("hdg-shared"), StorageThread("hdg-shared")
    try:
        names = {await first.run(lambda: threading.current_thread().name) for _ in range(3)}
        names |= {await second.run(lambda: threading.current_thread().name) for _ in range(3)}
        assert len(names) == 1
        first.stop()
        with pytest.raises(StorageClosed):
            await first.run(lambda: None)
        assert await second.run(lambda: threading.current_thread().name) in names
    finally:
        second.stop()
    assert not [t for t in threading.enumerate() if t.name.startswith("hdg-shared")]


async def test_the_jobs_of_one_loop_turn_cross_to_the_thread_in_one_hop() -> None:
    thread = StorageThread("hdg-hops")
    hops: list[int] = []
    pool = thread._threads.pool
    submit = pool.submit

    def counting_submit(fn: Any, /, *args: Any) -> Any:
        hops.append(len(args[0]) if args else 0)
        return submit(fn, *args)

    pool.submit = counting_submit  # type: ignore[method-assign]
    try:
        results = await asyncio.gather(*[thread.run(lambda i=i: i * 2) for i in range(100)])
        assert results == [i * 2 for i in range(100)]
        assert hops == [100]
    finally:
        pool.submit = submit  # type: ignore[method-assign]
        thread.stop()


async def test_a_write_queued_directly_runs_after_the_jobs_of_this_turn_queued_before_it() -> None:
    thread = StorageThread("hdg-test")
    seen: list[str] = []
    try:
        pending = asyncio.ensure_future(thread.run(seen.append, "queued for the turn"))
        await asyncio.sleep(0)  # run() has queued its job; the hop has not left yet
        thread.run_nowait(seen.append, "queued directly")
        await pending
        await thread.run(lambda: None)
    finally:
        thread.stop()
    assert seen == ["queued for the turn", "queued directly"]


async def test_each_job_of_a_hop_gets_its_own_result_or_error() -> None:
    thread = StorageThread("hdg-test")
    try:
        results = await asyncio.gather(
            thread.run(lambda: "a"),
            thread.run(lambda: 1 // 0),
            thread.run(lambda: "c"),
            return_exceptions=True,
        )
    finally:
        thread.stop()
    assert results[0] == "a" and isinstance(results[1], ZeroDivisionError) and results[2] == "c"

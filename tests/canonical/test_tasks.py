"""Background tasks someone owns: held until they end, failures logged, all ended on close."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from canonical.tasks import TaskSet

log = logging.getLogger("test.tasks")


def test_a_task_nobody_else_holds_runs_to_its_end() -> None:
    done: list[str] = []

    async def job(finished: asyncio.Event) -> None:
        await asyncio.sleep(0.01)
        gc.collect()
        await asyncio.sleep(0.01)
        done.append("done")
        finished.set()

    async def scenario() -> None:
        tasks = TaskSet(log)
        finished = asyncio.Event()
        tasks.spawn(job(finished), name="job")
        assert len(tasks) == 1
        await asyncio.wait_for(finished.wait(), 30)
        await asyncio.sleep(0)  # its done callback
        assert len(tasks) == 0

    asyncio.run(scenario())
    assert done == ["done"]


def test_a_failure_is_logged_with_its_exception_when_it_happens(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def failing() -> None:
        raise KeyError("boom")

    async def scenario() -> None:
        tasks = TaskSet(log)
        tasks.spawn(failing(), name="hdg-failing")
        await asyncio.sleep(0.01)

    with caplog.at_level(logging.ERROR, logger="test.tasks"):
        asyncio.run(scenario())
    (record,) = caplog.records
    assert "hdg-failing failed: KeyError" in record.getMessage()
    assert record.exc_info is not None and isinstance(record.exc_info[1], KeyError)


def test_close_cancels_what_still_runs_and_waits_for_it_to_end() -> None:
    ended: list[str] = []

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            ended.append("cleaned up")

    async def scenario() -> None:
        tasks = TaskSet(log)
        task = tasks.spawn(forever())
        await asyncio.sleep(0)
        await tasks.close()
        assert task.cancelled() and len(tasks) == 0

    asyncio.run(scenario())
    assert ended == ["cleaned up"]


def test_nothing_new_runs_once_the_set_is_closed() -> None:
    ran: list[str] = []

    async def job() -> None:
        ran.append("ran")

    async def scenario() -> None:
        tasks = TaskSet(log)
        await tasks.close()
        task = tasks.spawn(job())
        await asyncio.sleep(0.01)
        assert task.cancelled()

    asyncio.run(scenario())
    assert ran == []

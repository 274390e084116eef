"""Stopping tasks whose cancellation gets lost (workers/cancel.py), with tasks that
swallow a CancelledError the way a library below arq's poll loop was seen to."""

from __future__ import annotations

import asyncio

from workers.cancel import cancel_and_wait, insist_on_cancel


def _swallowing(times: int) -> tuple[asyncio.Task[None], list[int]]:
    """A polling loop that absorbs its first ``times`` cancellations (not uncancelling)."""
    polls = [0]

    async def loop() -> None:
        swallowed = 0
        while True:
            try:
                await asyncio.sleep(0.005)
            except asyncio.CancelledError:
                if swallowed == times:
                    raise
                swallowed += 1
            polls[0] += 1

    return asyncio.create_task(loop()), polls


async def test_a_lost_cancel_request_is_made_again_until_the_task_stops() -> None:
    task, _ = _swallowing(times=2)
    watch = asyncio.create_task(insist_on_cancel(task, after_s=0.05))
    await asyncio.sleep(0.02)
    task.cancel()  # lost: the loop goes on
    await asyncio.sleep(0.02)
    assert not task.done() and task.cancelling() == 1
    await asyncio.wait_for(watch, 2)
    assert task.cancelled()


async def test_a_task_nobody_cancels_is_left_running() -> None:
    task, polls = _swallowing(times=0)
    watch = asyncio.create_task(insist_on_cancel(task, after_s=0.02))
    await asyncio.sleep(0.2)
    assert not task.done() and polls[0] > 10
    assert not watch.done()
    task.cancel()
    await asyncio.wait_for(watch, 2)  # the watch ends with its task
    assert task.cancelled()


async def test_cancel_and_wait_returns_once_a_task_that_swallows_cancels_is_done() -> None:
    task, _ = _swallowing(times=3)
    await asyncio.sleep(0.01)
    await asyncio.wait_for(cancel_and_wait(task, every_s=0.02), 2)
    assert task.cancelled()


async def test_cancel_and_wait_on_a_finished_task_returns_at_once() -> None:
    async def quick() -> int:
        return 1

    task = asyncio.create_task(quick())
    await task
    await asyncio.wait_for(cancel_and_wait(task), 0.5)
    assert task.result() == 1

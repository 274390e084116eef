"""workers.inprocess: the same job functions on asyncio tasks, no Redis."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.workers.fake_services import FakeFcm, FcmScript
from tests.workers.helpers import notification
from tests.workers.media import samples
from workers.config import WorkerConfig
from workers.inprocess import InProcessJob, InProcessRunner, JobCancelled, JobFailed

Runner = Callable[..., InProcessRunner]


class Sleeps:
    """Records requested back-off delays and sleeps only a token amount."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0)


@pytest.fixture
async def make_runner(
    make_config: Callable[..., WorkerConfig],
    fcm: FakeFcm,
    service_account_file: Path,
    media_root: Path,
) -> AsyncIterator[Runner]:
    runners: list[InProcessRunner] = []

    def make(sleep: Any = None, **overrides: Any) -> InProcessRunner:
        overrides.setdefault("fcm_service_account", service_account_file)
        overrides.setdefault("fcm_api_base", fcm.url)
        overrides.setdefault("media_root", media_root)
        kwargs: dict[str, Any] = {"periodic_retention": overrides.pop("periodic_retention", False)}
        if sleep is not None:
            kwargs["sleep"] = sleep
        runner = InProcessRunner(make_config(**overrides), **kwargs)
        runners.append(runner)
        return runner

    yield make
    for runner in runners:
        await runner.close(wait=0)


async def test_a_push_is_delivered_and_the_ctx_has_no_redis(
    make_runner: Runner, fcm: FakeFcm
) -> None:
    async with make_runner() as runner:
        assert "redis" not in runner.ctx
        job = runner.submit_push(notification())
        assert job is not None
        assert (await job.result(timeout=5))["outcome"] == "delivered"
    assert len(fcm.deliveries("device-token-1")) == 1


async def test_transient_errors_are_retried_with_the_same_backoff_policy(
    make_runner: Runner, fcm: FakeFcm
) -> None:
    sleeps = Sleeps()
    fcm.script("device-token-1", FcmScript.unavailable(), FcmScript.internal())
    async with make_runner(sleep=sleeps, retry_base_seconds=2.0) as runner:
        job = runner.submit_push(notification())
        assert job is not None
        result = await job.result(timeout=5)
    assert result["outcome"] == "delivered"
    assert result["tries"] == job.tries == 3
    assert (
        1.0 <= sleeps.delays[0] <= 2.0 and 2.0 <= sleeps.delays[1] <= 4.0
    )  # 2 s base, doubling, equal jitter


async def test_a_deferred_push_waits_its_delay_before_the_first_try(
    make_runner: Runner, fcm: FakeFcm
) -> None:
    sleeps = Sleeps()
    async with make_runner(sleep=sleeps) as runner:
        job = runner.submit_push(notification(), defer=30.0)
        assert job is not None
        assert (await job.result(timeout=5))["outcome"] == "delivered"
    assert sleeps.delays == [30.0] and job.tries == 1


async def test_retry_after_is_honoured(make_runner: Runner, fcm: FakeFcm) -> None:
    sleeps = Sleeps()
    fcm.script("device-token-1", FcmScript.quota_exceeded(retry_after=42))
    async with make_runner(sleep=sleeps) as runner:
        job = runner.submit_push(notification())
        assert job is not None
        assert (await job.result(timeout=5))["outcome"] == "delivered"
    assert 42.0 <= sleeps.delays[0] <= 46.2


async def test_the_last_try_gives_up(make_runner: Runner, fcm: FakeFcm) -> None:
    fcm.script("device-token-1", *[FcmScript.unavailable()] * 5)
    async with make_runner(sleep=Sleeps(), push_max_tries=3) as runner:
        job = runner.submit_push(notification())
        assert job is not None
        result = await job.result(timeout=5)
    assert result["outcome"] == "failed" and result["tries"] == 3
    assert fcm.attempts["device-token-1"] == 3


async def test_a_duplicate_is_dropped_while_pending_and_answered_from_the_store_after(
    make_runner: Runner, fcm: FakeFcm
) -> None:
    fcm.send_delay = 0.2
    async with make_runner() as runner:
        first = runner.submit_push(notification())
        assert runner.submit_push(notification()) is None
        assert first is not None
        await first.result(timeout=5)
        again = runner.submit_push(notification())
        assert again is not None
        assert (await again.result(timeout=5))["duplicate"] is True
    assert fcm.attempts["device-token-1"] == 1


async def test_a_busy_media_queue_does_not_delay_pushes(
    make_runner: Runner, fcm: FakeFcm, media_root: Path, tmp_path: Path
) -> None:
    clip = samples.video(tmp_path / "clip.mp4", seconds=10, size=(1280, 720), audio=False)
    (media_root / "up").mkdir()
    shutil.copyfile(clip, media_root / "up" / "clip.mp4")
    async with make_runner(media_concurrency=1) as runner:
        media = runner.submit_media(
            {"idempotency_key": "m", "kind": "video", "src_path": "up/clip.mp4", "out_dir": "out"}
        )
        await asyncio.sleep(0.05)  # the transcode is running
        push = runner.submit_push(notification())
        assert push is not None and media is not None
        await push.result(timeout=5)
        # The push was delivered while the transcode was still running: it did not queue
        # behind it (a timing bound would only measure how loaded the machine is).
        assert not media.done()
        assert (await media.result(timeout=30))["outcome"] == "done"


async def test_close_lets_running_jobs_finish(make_runner: Runner, fcm: FakeFcm) -> None:
    fcm.send_delay = 0.3
    runner = make_runner()
    await runner.start()
    job = runner.submit_push(notification())
    await asyncio.sleep(0.05)
    await runner.close(wait=5)
    assert job is not None
    assert (await job.result(timeout=1))["outcome"] == "delivered"
    with pytest.raises(RuntimeError, match="closed"):
        runner.submit_push(notification(idempotency_key="late"))


async def test_close_cancels_what_outlives_the_grace_period(
    make_runner: Runner, fcm: FakeFcm
) -> None:
    fcm.send_delay = 2.0
    runner = make_runner()
    await runner.start()
    job = runner.submit_push(notification())
    await asyncio.sleep(0.05)
    await runner.close(wait=0.1)
    assert job is not None
    with pytest.raises(JobCancelled, match="cancelled"):
        await job.result(timeout=1)
    assert job.cancelled_at_shutdown()


async def test_a_deferred_job_the_runner_closes_on_is_told_apart_from_one_that_ran(
    make_runner: Runner, fcm: FakeFcm
) -> None:
    runner = make_runner()
    await runner.start()
    outcomes: list[tuple[str, bool]] = []

    def note(job: InProcessJob) -> None:
        outcomes.append((job.job_id, job.cancelled_at_shutdown()))

    ran = runner.submit_push(notification(idempotency_key="now"))
    waiting = runner.submit_push(notification(idempotency_key="later"), defer=60)
    assert ran is not None and waiting is not None
    ran.add_done_callback(note)
    waiting.add_done_callback(note)
    assert (await ran.result(timeout=5))["outcome"] == "delivered"
    await runner.close(wait=0.1)
    await asyncio.sleep(0)
    assert outcomes == [("push:now", False), ("push:later", True)]
    late: list[str] = []
    ran.add_done_callback(lambda job: late.append(job.job_id))  # already done: called soon
    await asyncio.sleep(0)
    assert late == ["push:now"]


async def test_a_job_over_its_timeout_fails(make_runner: Runner, fcm: FakeFcm) -> None:
    fcm.send_delay = 1.0
    async with make_runner(push_job_timeout=0.2) as runner:
        job = runner.submit_push(notification())
        assert job is not None
        with pytest.raises(JobFailed, match="timed out"):
            await job.result(timeout=5)


async def test_retention_runs_periodically(make_runner: Runner, media_root: Path) -> None:
    old = media_root / "old.jpg"
    old.write_bytes(b"x")
    then = time.time() - 30 * 86_400
    os.utime(old, (then, then))
    async with make_runner(periodic_retention=True, retention_sweep_interval=0.05):
        for _ in range(100):
            if not old.exists():
                break
            await asyncio.sleep(0.02)
    assert not old.exists()

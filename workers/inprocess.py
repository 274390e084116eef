"""Embedded mode: the same job functions, run on asyncio tasks in this process.

Without Redis there is no arq; :class:`InProcessRunner` plays its part for a single
process. It builds the same ``ctx`` (resources under ``ctx["hdg"]``, ``job_id``,
``job_try``, no ``redis``), honours the same ``arq.Retry(defer=...)`` the job functions
raise, applies the same per-job timeouts and max tries, and keeps the queues apart:
each queue has its own concurrency limit, so transcodes never hold up pushes.

Differences from arq, by design: the runner itself keeps nothing on disk (jobs still
queued, deferred or backing off when the process stops end as :class:`JobCancelled`, so
an owner that must outlive a restart keeps its own record: the plugin does for deferred
pushes, ``gateway_plugin.push.pending``), and duplicates are dropped only while a job
with the same id is pending or running (the idempotency store then covers finished ones).

Usage::

    async with InProcessRunner(load_config(bus_url="memory://")) as runner:
        job = runner.submit_push(notification)
        outcome = await job.result()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx
from arq import Retry

from .config import WorkerConfig
from .context import RESOURCES_KEY, WorkerResources, build_resources
from .idempotency import IdempotencyStore
from .jobs import MAINTENANCE_QUEUE, MEDIA_QUEUE, PUSH_QUEUE, JobSpec, job_specs
from .push.acks import AckLedger
from .push.dead_tokens import DeadTokenRegistry

__all__ = ["InProcessJob", "InProcessRunner", "JobCancelled", "JobFailed"]

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]


class JobFailed(RuntimeError):
    """The job raised, timed out or ran out of tries (like arq's failed job result)."""


class JobCancelled(JobFailed):
    """The runner closed before the job finished: it never ran to an outcome of its own."""


class InProcessJob:
    """A handle on a submitted job."""

    def __init__(self, job_id: str, function: str) -> None:
        self.job_id = job_id
        self.function = function
        self.tries = 0
        self._done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def add_done_callback(self, callback: Callable[[InProcessJob], None]) -> None:
        """Call ``callback(job)`` once the job has its outcome (at once if it has)."""
        self._done.add_done_callback(lambda _: callback(self))

    def cancelled_at_shutdown(self) -> bool:
        """Finished because the runner closed, not by running to an outcome."""
        return (
            self._done.done()
            and not self._done.cancelled()
            and isinstance(self._done.exception(), JobCancelled)
        )

    async def result(self, timeout: float | None = None) -> Any:
        """The job's return value; raises :class:`JobFailed` if it failed."""
        return await asyncio.wait_for(asyncio.shield(self._done), timeout)

    def done(self) -> bool:
        return self._done.done()

    def _finish(self, value: Any = None, error: BaseException | None = None) -> None:
        if self._done.done():
            return
        if error is not None:
            self._done.set_exception(error)
            self._done.exception()  # mark retrieved: a caller may never ask
        else:
            self._done.set_result(value)


class InProcessRunner:
    """Runs ``push_notify``, ``media_transcode`` and ``retention_sweep`` in-process."""

    def __init__(
        self,
        config: WorkerConfig,
        *,
        idempotency: IdempotencyStore | None = None,
        dead_tokens: DeadTokenRegistry | None = None,
        acks: AckLedger | None = None,
        http: httpx.AsyncClient | None = None,
        periodic_retention: bool = True,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.config = config
        self._store = idempotency
        self._dead_tokens = dead_tokens
        self._acks = acks
        self._http = http
        self._periodic_retention = periodic_retention
        self._sleep = sleep
        self.specs: dict[str, JobSpec] = job_specs(config)
        self._limits = {
            PUSH_QUEUE: asyncio.Semaphore(config.push_concurrency),
            MEDIA_QUEUE: asyncio.Semaphore(config.media_concurrency),
            MAINTENANCE_QUEUE: asyncio.Semaphore(1),
        }
        self._resources: WorkerResources | None = None
        self._jobs: dict[str, InProcessJob] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._running: set[asyncio.Task[Any]] = set()
        self._periodic: asyncio.Task[None] | None = None
        self._closed = False
        self._counter = 0

    # -- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        if self._resources is not None:
            return
        self._resources = build_resources(
            self.config,
            http=self._http,
            idempotency=self._store,
            dead_tokens=self._dead_tokens,
            acks=self._acks,
        )
        if self._periodic_retention:
            self._periodic = asyncio.create_task(self._retention_loop(), name="hdg:retention")

    async def __aenter__(self) -> InProcessRunner:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self, wait: float | None = None) -> None:
        """Stop accepting jobs; let running ones finish for up to ``wait`` seconds
        (default ``HDG_JOB_COMPLETION_WAIT``), then cancel the rest."""
        self._closed = True
        if self._periodic is not None:
            self._periodic.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._periodic
        grace = self.config.job_completion_wait if wait is None else wait
        if self._running:
            await asyncio.wait(set(self._running), timeout=grace)
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._resources is not None:
            await self._resources.aclose()
            self._resources = None

    @property
    def ctx(self) -> dict[str, Any]:
        """The base ``ctx`` every job sees (without the per-try keys)."""
        if self._resources is None:
            raise RuntimeError("InProcessRunner.start() has not been awaited")
        return {RESOURCES_KEY: self._resources}

    # -- submitting ---------------------------------------------------------------------

    def submit(
        self, function: str, *args: Any, job_id: str | None = None, defer: float = 0.0
    ) -> InProcessJob | None:
        """Start ``function(ctx, *args)`` after ``defer`` seconds; ``None`` if ``job_id`` is
        pending or running."""
        if self._closed:
            raise RuntimeError("the runner is closed")
        if self._resources is None:
            raise RuntimeError("InProcessRunner.start() has not been awaited")
        spec = self.specs[function]
        if job_id is None:
            self._counter += 1
            job_id = f"{function}:{self._counter}"
        current = self._jobs.get(job_id)
        if current is not None and not current.done():
            return None
        job = InProcessJob(job_id, function)
        self._jobs[job_id] = job
        task = asyncio.create_task(self._execute(spec, job, args, defer), name=f"hdg:{job_id}")
        self._tasks.add(task)
        task.add_done_callback(self._forget(job_id, job))
        return job

    def submit_push(
        self, notification: Mapping[str, Any], defer: float = 0.0
    ) -> InProcessJob | None:
        return self.submit(
            "push_notify",
            dict(notification),
            job_id=f"push:{notification['idempotency_key']}",
            defer=defer,
        )

    def submit_media(self, job: Mapping[str, Any]) -> InProcessJob | None:
        return self.submit("media_transcode", dict(job), job_id=f"media:{job['idempotency_key']}")

    async def run(self, function: str, *args: Any) -> Any:
        """Submit and wait for the result."""
        job = self.submit(function, *args)
        assert job is not None  # generated ids never collide
        return await job.result()

    def _forget(self, job_id: str, job: InProcessJob) -> Callable[[asyncio.Task[None]], None]:
        def done(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            if self._jobs.get(job_id) is job:
                del self._jobs[job_id]
            if task.cancelled():
                job._finish(error=JobCancelled(f"{job_id} cancelled at shutdown"))

        return done

    # -- execution ----------------------------------------------------------------------

    async def _execute(
        self, spec: JobSpec, job: InProcessJob, args: tuple[Any, ...], defer: float = 0.0
    ) -> None:
        enqueued = datetime.now(UTC)
        if defer > 0:
            await self._sleep(defer)
        job_try = 0
        while True:
            job_try += 1
            job.tries = job_try
            if job_try > spec.max_tries:
                job._finish(error=JobFailed(f"{job.job_id}: max {spec.max_tries} tries exceeded"))
                return
            ctx = {
                **self.ctx,
                "job_id": job.job_id,
                "job_try": job_try,
                "enqueue_time": enqueued,
                "score": int(time.time() * 1000),
            }
            try:
                async with self._limits[spec.queue]:
                    run = asyncio.create_task(
                        asyncio.wait_for(spec.function(ctx, *args), spec.timeout)
                    )
                    self._running.add(run)
                    try:
                        value = await asyncio.shield(run)
                    finally:
                        if run.done():
                            self._running.discard(run)
                        else:  # we were cancelled (shutdown): stop the job too
                            run.cancel()
                            self._running.discard(run)
            except Retry as retry:
                delay = (retry.defer_score or 0) / 1000
                log.info("%s try %d: retrying in %.2fs", job.job_id, job_try, delay)
                await self._sleep(delay)
                continue
            except TimeoutError:
                job._finish(error=JobFailed(f"{job.job_id}: timed out after {spec.timeout}s"))
                return
            except Exception as exc:  # the job's own failure becomes its result, like arq
                log.exception("%s failed", job.job_id)
                failure = JobFailed(f"{job.job_id}: {exc!r}")
                failure.__cause__ = exc
                job._finish(error=failure)
                return
            job._finish(value)
            return

    async def _retention_loop(self) -> None:
        while True:
            await self._sleep(self.config.retention_sweep_interval)
            job = self.submit("retention_sweep", job_id="retention_sweep")
            if job is not None:
                with contextlib.suppress(JobFailed):
                    await job.result()

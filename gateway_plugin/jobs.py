"""The plugin's handle on the worker queues: arq on Redis in scaled mode, the same job
functions on the in-process runner in embedded mode. Push and media both go through it."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from canonical.backoff import Backoff
from canonical.model import Json
from canonical.settings import GatewaySettings
from gateway_plugin.push.pending import PendingPushes, remaining_delay
from gateway_plugin.shutdown import UNBOUNDED, Deadline
from gateway_plugin.storage.thread import StorageThread

log = logging.getLogger("hdg.plugin.jobs")

T = TypeVar("T")

MEDIA_RESULT_TIMEOUT_S = 600.0
# A Redis blip (failover, restart) while queueing a push: 6 tries, the waits between
# them drawn below 0.1, 0.2, 0.4, 0.8 and 1.6 s (at most 3.1 s in all).
ENQUEUE_TRIES = 6
ENQUEUE_BACKOFF = Backoff(first_s=0.1, max_s=1.6)
# Scaled: how often the pushes on record are checked against their jobs in Redis.
RECONCILE_S = 5.0


class JobQueue:
    def __init__(
        self,
        settings: GatewaySettings,
        media_root: Path,
        pending_path: Path | None = None,
        pending_writes: StorageThread | None = None,
    ) -> None:
        self.settings = settings
        self.media_root = media_root
        # Where queued pushes are remembered until their job has an outcome, across a
        # restart of this process (embedded) or of Redis (scaled): pending_pushes.
        self._pending_path = pending_path
        self._pending: PendingPushes | None = None
        # pending_pushes.db's storage thread: the embedded path's records are written
        # there, in order, never on the event loop (without it: in place).
        self._pending_writes = pending_writes
        self._reconciler: asyncio.Task[None] | None = None
        self._runner: Any = None
        self._pool: Any = None
        # Where workers report dead FCM tokens: shared with the in-process runner
        # (embedded) or the Redis set the arq workers write (scaled).
        self._dead_tokens: Any = None
        # How far the tenant's devices have read, for the push jobs to check before
        # each send (same split as above).
        self._acks: Any = None

    async def start(self) -> None:
        if self.settings.embedded:
            from workers.config import load_config
            from workers.inprocess import InProcessRunner
            from workers.push.acks import MemoryAcks
            from workers.push.dead_tokens import MemoryDeadTokens

            try:
                config = load_config(bus_url="memory://", media_root=self.media_root)
            except Exception as exc:
                log.warning("background jobs disabled: %s", exc)
                return
            self._dead_tokens = MemoryDeadTokens()
            self._acks = MemoryAcks()
            self._runner = InProcessRunner(
                config, periodic_retention=False, dead_tokens=self._dead_tokens, acks=self._acks
            )
            await self._runner.start()
            if self._pending_path is not None:
                self._pending = PendingPushes(self._pending_path)
        else:
            from workers.push.acks import RedisAcks
            from workers.push.dead_tokens import RedisDeadTokens
            from workers.redis_pool import open_arq_pool

            # Connects on the first enqueue; a Redis that is down or silent then fails
            # that enqueue (logged by the caller), never start-up.
            self._pool = open_arq_pool(self.settings.bus_url, self.settings.redis_timeouts())
            self._dead_tokens = RedisDeadTokens(self._pool)
            self._acks = RedisAcks(self._pool)
            if self._pending_path is not None:
                self._pending = await asyncio.to_thread(PendingPushes, self._pending_path)

    @property
    def ready(self) -> bool:
        return self._runner is not None or self._pool is not None

    async def push(self, body: Json, delay: float = 0.0) -> None:
        """Queue one push to run `delay` seconds from now, remembered on disk until its job
        has an outcome. Embedded, the in-process runner holds the delay (resume_pushes
        queues what a previous process left). On Redis it is an arq deferred job; a failed
        enqueue is tried again for a few seconds (the job id makes a repeat of one that did
        land harmless), and the record outlives a Redis that restarts empty: `reconcile`
        queues it again."""
        not_before = time.time() + delay
        if self._runner is not None:
            self._submit_embedded(body, not_before)
        elif self._pool is not None:
            if self._pending is not None:
                await asyncio.to_thread(self._pending.add, _push_job_id(body), body, not_before)
            try:
                await self._enqueue_push(body, datetime.fromtimestamp(not_before, UTC))
            except Exception:
                if self._pending is None:
                    raise
                log.warning("could not queue a push; it is kept and queued once Redis answers")

    async def resume_pushes(self, *, enabled: bool) -> int:
        """Queue the pushes a previous process left waiting, each due when it was (at once
        if that has passed); how many. Push turned off since: they are dropped. Call it
        once the ack ledger is set (PushScheduler.sync_acks), so a push for an event read
        meanwhile is skipped rather than sent. Scaled, this starts the reconciler, which
        queues them (and any a Redis restart lost later on)."""
        if self._pending is None:
            return 0
        if not enabled:
            await self._on_pending_thread(self._pending.clear)
            return 0
        left = await self._on_pending_thread(self._pending.all)
        if self._runner is not None:
            for push in left:
                self._submit_embedded(push.body, push.not_before)
        elif self._pool is not None and self._reconciler is None:
            self._reconciler = asyncio.create_task(
                self._reconcile_forever(), name="hdg-push-reconcile"
            )
        return len(left)

    def waiting_pushes(self) -> int:
        """Pushes queued and not yet at an outcome."""
        return self._pending.count() if self._pending is not None else 0

    async def reconcile(self) -> None:
        """Scaled: each push on record against its job in Redis. A job with a result is
        done (its record goes); a job Redis no longer knows (it restarted empty, or the
        enqueue never landed) is queued again, due when it was. arq keeps a push's result
        for an hour and refuses a job id it still knows, so nothing done is sent twice."""
        from arq.jobs import Job, JobStatus

        from workers.jobs import PUSH_QUEUE

        assert self._pending is not None and self._pool is not None
        pending = self._pending
        for push in await self._on_pending_thread(pending.all):
            status = await Job(push.job_id, self._pool, _queue_name=PUSH_QUEUE).status()
            if status is JobStatus.complete:
                await self._on_pending_thread(functools.partial(pending.remove, push.job_id))
            elif status is JobStatus.not_found:
                log.info("a push Redis no longer had is queued again")
                await self._enqueue_push(push.body, datetime.fromtimestamp(push.not_before, UTC))

    async def _reconcile_forever(self) -> None:
        failing = False
        await asyncio.sleep(random.uniform(0, RECONCILE_S))  # gateways out of step
        while True:
            try:
                await self.reconcile()
                failing = False
            except Exception as exc:
                if not failing:  # once per outage, not every round
                    log.warning("checking queued pushes failed (%s); retrying", type(exc).__name__)
                failing = True
            await asyncio.sleep(RECONCILE_S)

    def _submit_embedded(self, body: Json, not_before: float) -> None:
        job_id = _push_job_id(body)
        if self._pending is not None:
            self._write_pending(self._pending.add, job_id, body, not_before)
        job = self._runner.submit_push(body, defer=remaining_delay(not_before, time.time()))
        if job is not None and self._pending is not None:
            job.add_done_callback(self._push_done)

    def _push_done(self, job: Any) -> None:
        # Cancelled by the runner's close: still owed, so the next process sends it.
        if self._pending is not None and not job.cancelled_at_shutdown():
            self._write_pending(self._pending.remove, job.job_id)

    async def _on_pending_thread(self, fn: Callable[[], T]) -> T:
        """`fn()` on pending_pushes.db's thread, behind the writes queued (or inline
        without one: a worker process)."""
        if self._pending_writes is not None:
            return await self._pending_writes.run(fn)
        return fn()

    def _write_pending(self, fn: Callable[..., object], *args: Any) -> None:
        if self._pending_writes is not None:
            self._pending_writes.run_nowait(fn, *args)
        else:
            fn(*args)

    async def _enqueue_push(self, body: Json, not_before: datetime) -> None:
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import TimeoutError as RedisTimeoutError

        from workers.jobs import enqueue_push

        for attempt in range(1, ENQUEUE_TRIES + 1):
            try:
                await enqueue_push(self._pool, body, not_before=not_before)
                return
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                if attempt == ENQUEUE_TRIES:
                    raise
                wait = ENQUEUE_BACKOFF.delay(attempt - 1)
                log.warning(
                    "queueing a push failed (%s); try %d of %d in %.1fs",
                    type(exc).__name__,
                    attempt + 1,
                    ENQUEUE_TRIES,
                    wait,
                )
                await asyncio.sleep(wait)

    async def note_ack(self, tenant: str, cursor: int) -> None:
        """A device has everything up to `cursor`: queued pushes for it are moot."""
        if self._acks is not None:
            await self._acks.record(tenant, cursor)

    async def reset_acks(self, tenant: str, cursor: int) -> None:
        """Set the push workers' ack mark to `cursor`, the outbox's own (even if lower)."""
        if self._acks is not None:
            await self._acks.reset(tenant, cursor)

    async def dead_fcm_tokens(self, tenant: str) -> set[str]:
        """FCM tokens the workers found dead and the registry still has to drop."""
        if self._dead_tokens is None:
            return set()
        return set(await self._dead_tokens.members(tenant))

    async def forget_dead_fcm_tokens(self, tenant: str, tokens: set[str]) -> None:
        if self._dead_tokens is not None and tokens:
            await self._dead_tokens.discard(tenant, tokens)

    async def media(self, body: Json) -> Json | None:
        """Run one transcode and wait for its outcome (None when it could not be queued)."""
        if self._runner is not None:
            job = self._runner.submit_media(body)
            if job is None:
                return None
            result = await job.result(MEDIA_RESULT_TIMEOUT_S)
            return dict(result) if isinstance(result, dict) else None
        if self._pool is not None:
            from workers.jobs import enqueue_media

            job = await enqueue_media(self._pool, body)
            if job is None:
                return None
            result = await job.result(timeout=MEDIA_RESULT_TIMEOUT_S)
            return dict(result) if isinstance(result, dict) else None
        return None

    async def close(self, deadline: Deadline = UNBOUNDED) -> None:
        """Stop; running jobs get HDG_JOB_COMPLETION_WAIT, or what `deadline` leaves."""
        if self._reconciler is not None:
            self._reconciler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reconciler
            self._reconciler = None
        if self._runner is not None:
            await self._runner.close(deadline.left(self._runner.config.job_completion_wait))
            await asyncio.sleep(0)  # the finished jobs' _push_done callbacks run first
        if self._pending is not None:
            if self._pending_writes is not None:
                await self._pending_writes.run(self._pending.close)  # behind what is queued
            else:
                await asyncio.to_thread(self._pending.close)
            self._pending = None
        if self._pool is not None:
            await self._pool.aclose()


def _push_job_id(body: Json) -> str:
    return f"push:{body['idempotency_key']}"

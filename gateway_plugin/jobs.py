"""The plugin's handle on the worker queues: arq on Redis in scaled mode, the same job
functions on the in-process runner in embedded mode. Push and media both go through it."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from canonical.settings import GatewaySettings

log = logging.getLogger("hdg.plugin.jobs")

Json = dict[str, Any]
MEDIA_RESULT_TIMEOUT_S = 600.0
# A Redis blip (failover, restart) while queueing a push: 6 tries over about 2-3 s.
ENQUEUE_TRIES = 6


def enqueue_backoff(attempt: int) -> float:
    """Seconds before enqueue try `attempt + 1`: 0.1 s doubling, capped at 1.6 s."""
    return float(min(0.1 * 2 ** (attempt - 1), 1.6))


class JobQueue:
    def __init__(self, settings: GatewaySettings, media_root: Path) -> None:
        self.settings = settings
        self.media_root = media_root
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
        else:
            from workers.push.acks import RedisAcks
            from workers.push.dead_tokens import RedisDeadTokens
            from workers.redis_pool import open_arq_pool

            # Connects on the first enqueue; a Redis that is down or silent then fails
            # that enqueue (logged by the caller), never start-up.
            self._pool = open_arq_pool(self.settings.bus_url, self.settings.redis_timeouts())
            self._dead_tokens = RedisDeadTokens(self._pool)
            self._acks = RedisAcks(self._pool)

    @property
    def ready(self) -> bool:
        return self._runner is not None or self._pool is not None

    async def push(self, body: Json, delay: float = 0.0) -> None:
        """Queue one push to run `delay` seconds from now. On Redis the delay is an arq
        deferred job, so it outlives this process; a failed enqueue is tried again for a
        few seconds (the job id makes a repeat of one that did land harmless)."""
        if self._runner is not None:
            self._runner.submit_push(body, defer=delay)
        elif self._pool is not None:
            await self._enqueue_push(body, datetime.now(UTC) + timedelta(seconds=delay))

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
                wait = enqueue_backoff(attempt)
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

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.close()
        if self._pool is not None:
            await self._pool.aclose()

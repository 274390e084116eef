"""The plugin's handle on the worker queues: arq on Redis in scaled mode, the same job
functions on the in-process runner in embedded mode. Push and media both go through it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from canonical.settings import GatewaySettings

log = logging.getLogger("hdg.plugin.jobs")

Json = dict[str, Any]
MEDIA_RESULT_TIMEOUT_S = 600.0


class JobQueue:
    def __init__(self, settings: GatewaySettings, media_root: Path) -> None:
        self.settings = settings
        self.media_root = media_root
        self._runner: Any = None
        self._pool: Any = None

    async def start(self) -> None:
        if self.settings.embedded:
            from workers.config import load_config
            from workers.inprocess import InProcessRunner

            try:
                config = load_config(bus_url="memory://", media_root=self.media_root)
            except Exception as exc:
                log.warning("background jobs disabled: %s", exc)
                return
            self._runner = InProcessRunner(config, periodic_retention=False)
            await self._runner.start()
        else:
            from workers.redis_pool import open_arq_pool

            # Connects on the first enqueue; a Redis that is down or silent then fails
            # that enqueue (logged by the caller), never start-up.
            self._pool = open_arq_pool(self.settings.bus_url, self.settings.redis_timeouts())

    @property
    def ready(self) -> bool:
        return self._runner is not None or self._pool is not None

    async def push(self, body: Json) -> None:
        if self._runner is not None:
            self._runner.submit_push(body)
        elif self._pool is not None:
            from workers.jobs import enqueue_push

            await enqueue_push(self._pool, body)

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

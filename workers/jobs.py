"""Queues, the job table, and enqueue helpers for producers (plugin, edges).

Three queues keep slow work from delaying fast work: a 60-second video transcode on
``media`` never holds up a push on ``push``. Each job function is registered on exactly
one queue; producers must enqueue on that queue (the helpers below do).

Job ids are the payload's idempotency key (prefixed by job kind), so arq itself drops
a duplicate enqueue while the first is queued, running, or its result is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from arq import ArqRedis
from arq.jobs import Job

from .config import WorkerConfig
from .maintenance.retention import retention_sweep
from .media.jobs import media_transcode
from .push.jobs import push_notify

__all__ = [
    "MAINTENANCE_QUEUE",
    "MEDIA_QUEUE",
    "PUSH_QUEUE",
    "JobSpec",
    "enqueue_media",
    "enqueue_push",
    "job_specs",
]

PUSH_QUEUE = "hdg:queue:push"
MEDIA_QUEUE = "hdg:queue:media"
MAINTENANCE_QUEUE = "hdg:queue:maintenance"

JobFunction = Callable[..., Coroutine[Any, Any, dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class JobSpec:
    """How one job function runs, shared by the arq settings and the in-process runner."""

    name: str
    function: JobFunction
    queue: str
    max_tries: int
    timeout: float


def job_specs(config: WorkerConfig) -> dict[str, JobSpec]:
    """The job table for ``config`` (timeouts and tries are settings)."""
    specs = (
        JobSpec(
            "push_notify", push_notify, PUSH_QUEUE, config.push_max_tries, config.push_job_timeout
        ),
        JobSpec(
            "media_transcode",
            media_transcode,
            MEDIA_QUEUE,
            config.media_max_tries,
            config.media_job_timeout,
        ),
        JobSpec(
            "retention_sweep", retention_sweep, MAINTENANCE_QUEUE, 1, config.maintenance_job_timeout
        ),
    )
    return {spec.name: spec for spec in specs}


async def enqueue_push(
    redis: ArqRedis, notification: Mapping[str, Any], *, not_before: datetime | None = None
) -> Job | None:
    """Queue a ``push_notify`` job, to run at ``not_before`` at the earliest (a deferred
    job lives in Redis: it survives a restart of whoever queued it); ``None`` if that
    idempotency key is already known."""
    key = str(notification["idempotency_key"])
    return await redis.enqueue_job(
        "push_notify",
        dict(notification),
        _job_id=f"push:{key}",
        _queue_name=PUSH_QUEUE,
        _defer_until=not_before,
    )


async def enqueue_media(redis: ArqRedis, job: Mapping[str, Any]) -> Job | None:
    """Queue a ``media_transcode`` job; ``None`` if that idempotency key is already known."""
    key = str(job["idempotency_key"])
    return await redis.enqueue_job(
        "media_transcode", dict(job), _job_id=f"media:{key}", _queue_name=MEDIA_QUEUE
    )

"""arq worker settings: one worker process per queue.

::

    arq workers.settings.PushWorker          # push queue (fast, many concurrent jobs)
    arq workers.settings.MediaWorker         # media queue (Pillow + PyAV, few jobs)
    arq workers.settings.MaintenanceWorker   # retention cron (unique across replicas)
    arq --check workers.settings.PushWorker  # health check: exit 0 healthy, 1 not

Run one process of each (or more of push and media): each queue is stopped, restarted
and scaled on its own, as arq intends. On SIGTERM a worker stops picking jobs and gives
its running ones ``HDG_JOB_COMPLETION_WAIT`` seconds to finish; give it a stop grace
period of at least twice that.

The settings are plain dicts. arq reads a settings *class* through its own
``__dict__``, so a subclass silently loses every inherited attribute; dicts built by
one function cannot fall into that trap.

Each queue's worker gets its own arq client built with the ``ANDROID_REDIS_*`` timeouts
(:mod:`workers.redis_pool`), connected on its first command. If Redis is unreachable at
start, goes away, or stops answering (a command waits ``ANDROID_REDIS_COMMAND_TIMEOUT_S``
at most), the worker exits non-zero within a poll interval (arq's own behaviour): run it
under a supervisor that restarts it (compose ``restart:``, systemd ``Restart=``).

Configuration is read from the environment when this module is imported, because the
``arq`` CLI reads ``redis_settings`` from these dicts at import time. A bad setting
stops import with a :class:`~workers.errors.ConfigError` naming it.
"""

from __future__ import annotations

from typing import Any

from arq import cron, func
from arq.connections import RedisSettings

from canonical.sentinel import is_sentinel_url, parse_sentinel_url

from .config import WorkerConfig, load_config
from .context import RESOURCES_KEY, build_resources, resources
from .errors import ConfigError
from .jobs import MAINTENANCE_QUEUE, MEDIA_QUEUE, PUSH_QUEUE, job_specs
from .maintenance.retention import retention_sweep
from .redis_pool import open_arq_pool, with_connect_timeout

__all__ = [
    "CONFIG",
    "MaintenanceWorker",
    "MediaWorker",
    "PushWorker",
    "queue_settings",
    "redis_settings",
]


def redis_settings(config: WorkerConfig) -> RedisSettings:
    """arq's connection settings from ``ANDROID_BUS_URL``."""
    if config.bus_url.startswith("memory://"):
        raise ConfigError(
            "ANDROID_BUS_URL",
            "is memory:// (embedded mode); arq workers need redis://host:port/db. Embedded "
            "deployments run jobs in-process with workers.inprocess.InProcessRunner",
        )
    try:
        if is_sentinel_url(config.bus_url):
            target = parse_sentinel_url(config.bus_url)
            settings = RedisSettings(
                host=list(target.sentinels),
                sentinel=True,
                sentinel_master=target.service,
                database=target.db,
                username=target.username,
                password=target.password,
            )
        else:
            settings = RedisSettings.from_dsn(config.bus_url)
    except (ValueError, TypeError) as exc:
        raise ConfigError("ANDROID_BUS_URL", f"is not a valid Redis URL: {exc}") from None
    return with_connect_timeout(settings, config.redis_timeouts())


# -- start-up and shut-down hooks ---------------------------------------------------------

_metrics_started = False


def _start_metrics(config: WorkerConfig) -> None:
    global _metrics_started
    if config.metrics_port is not None and not _metrics_started:
        from prometheus_client import start_http_server

        start_http_server(config.metrics_port)
        _metrics_started = True


async def _on_startup(ctx: dict[str, Any]) -> None:
    ctx[RESOURCES_KEY] = build_resources(CONFIG, redis=ctx["redis"])
    _start_metrics(CONFIG)


async def _on_shutdown(ctx: dict[str, Any]) -> None:
    if RESOURCES_KEY in ctx:
        await resources(ctx).aclose()


# -- settings -----------------------------------------------------------------------------


def queue_settings(queue: str, config: WorkerConfig) -> dict[str, Any]:
    """arq ``Worker`` keyword arguments for one queue."""
    specs = [spec for spec in job_specs(config).values() if spec.queue == queue]
    functions = [
        func(spec.function, name=spec.name, timeout=spec.timeout, max_tries=spec.max_tries)
        for spec in specs
        if spec.name != "retention_sweep"
    ]
    cron_jobs = [
        cron(
            retention_sweep,
            name="retention_sweep",
            minute=7,  # hourly, at :07
            unique=True,
            timeout=config.maintenance_job_timeout,
            max_tries=1,
            keep_result=3600,  # the sweep report, for operators and on-demand runs
        )
        for spec in specs
        if spec.name == "retention_sweep"
    ]
    fast = queue == PUSH_QUEUE
    max_jobs = {PUSH_QUEUE: config.push_concurrency, MEDIA_QUEUE: config.media_concurrency}.get(
        queue, 1
    )
    return {
        "queue_name": queue,
        "functions": functions,
        "cron_jobs": cron_jobs,
        "redis_settings": redis_settings(config),  # for `arq --check`; workers use the pool
        "redis_pool": open_arq_pool(config.bus_url, config.redis_timeouts()),
        "on_startup": _on_startup,
        "on_shutdown": _on_shutdown,
        "max_jobs": max_jobs,
        "job_timeout": max(spec.timeout for spec in specs),
        "max_tries": max(spec.max_tries for spec in specs),
        "keep_result": 3600,
        "poll_delay": config.push_poll_delay if fast else config.poll_delay,
        "job_completion_wait": config.job_completion_wait,
        "health_check_interval": config.health_check_interval,
        "retry_jobs": True,
    }


CONFIG: WorkerConfig = load_config()

PushWorker: dict[str, Any] = queue_settings(PUSH_QUEUE, CONFIG)
MediaWorker: dict[str, Any] = queue_settings(MEDIA_QUEUE, CONFIG)
MaintenanceWorker: dict[str, Any] = queue_settings(MAINTENANCE_QUEUE, CONFIG)

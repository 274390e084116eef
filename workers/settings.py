"""arq worker settings: one worker per queue, or one worker for all three.

::

    arq workers.settings.PushWorker          # push queue only (fast, many concurrent jobs)
    arq workers.settings.MediaWorker         # media queue only (Pillow + PyAV, few jobs)
    arq workers.settings.MaintenanceWorker   # retention cron (unique across replicas)
    arq workers.settings.WorkerSettings      # all three queues in one process
    arq --check workers.settings.PushWorker  # health check: exit 0 healthy, 1 not

The settings are plain dicts. arq reads a settings *class* through its own
``__dict__``, so a subclass silently loses every inherited attribute; dicts built by
one function cannot fall into that trap.

``WorkerSettings`` runs the push queue on arq's main worker and starts one extra arq
``Worker`` per other queue inside the same event loop (without their own signal
handlers). On SIGTERM the push queue stops picking jobs at once and finishes its
running ones; then the media and maintenance queues stop picking and get
``HDG_JOB_COMPLETION_WAIT`` seconds to finish theirs. Give the process a stop grace
period of at least twice that.

``arq --check workers.settings.WorkerSettings`` checks the push queue's health key;
if any of the process's queue workers dies the whole process exits non-zero, so that
key is the health of all three.

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

import asyncio
import contextlib
import logging
from typing import Any

from arq import Worker, cron, func
from arq.connections import RedisSettings

from canonical.sentinel import is_sentinel_url, parse_sentinel_url

from .cancel import cancel_and_wait, insist_on_cancel
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
    "WorkerSettings",
    "queue_settings",
    "redis_settings",
]

log = logging.getLogger(__name__)
_SUBQUEUES_KEY = "hdg_subqueues"
_STOP_WATCH_KEY = "hdg_stop_watch"


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
    # on_startup runs in arq's main task: the task its stop cancels (workers/cancel.py).
    main_task = asyncio.current_task()
    if main_task is not None:
        ctx[_STOP_WATCH_KEY] = asyncio.create_task(
            insist_on_cancel(main_task), name="arq:stop-watch"
        )


async def _on_shutdown(ctx: dict[str, Any]) -> None:
    watch = ctx.pop(_STOP_WATCH_KEY, None)
    if isinstance(watch, asyncio.Task):
        watch.cancel()
    if RESOURCES_KEY in ctx:
        await resources(ctx).aclose()


class _SubQueues:
    """Extra arq workers for the media and maintenance queues inside the host process."""

    def __init__(self, host_task: asyncio.Task[Any] | None, shared: dict[str, Any]) -> None:
        self._host_task = host_task
        self._workers = [
            Worker(
                **{
                    **settings,
                    "handle_signals": False,
                    "on_startup": None,
                    "on_shutdown": None,
                    "ctx": dict(shared),
                }
            )
            for settings in (MediaWorker, MaintenanceWorker)
        ]
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self.crashed: str | None = None

    def start(self) -> None:
        for worker in self._workers:
            task = asyncio.create_task(worker.async_run(), name=f"arq:{worker.queue_name}")
            task.add_done_callback(self._on_exit)
            self._tasks.append(task)

    def _on_exit(self, task: asyncio.Task[None]) -> None:
        if self._stopping:
            return
        error = task.exception() if not task.cancelled() else None
        self.crashed = f"{task.get_name()} stopped unexpectedly: {error!r}"
        log.error("%s; stopping the worker", self.crashed)
        if self._host_task is not None:
            self._host_task.cancel()

    async def stop(self, wait: float) -> None:
        """Stop picking jobs, let running ones finish for up to ``wait`` s, then close."""
        self._stopping = True
        for worker in self._workers:
            worker.allow_pick_jobs = False
        running = [t for worker in self._workers for t in worker.tasks.values() if not t.done()]
        if running and wait > 0:
            await asyncio.wait(running, timeout=wait)
        for worker in self._workers:
            await worker.close()  # cancels what is still running (arq re-queues it)
            if worker.main_task is not None:  # its poll loop, cancelled by close()
                await cancel_and_wait(worker.main_task)
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def _on_startup_all(ctx: dict[str, Any]) -> None:
    await _on_startup(ctx)
    subqueues = _SubQueues(asyncio.current_task(), {RESOURCES_KEY: ctx[RESOURCES_KEY]})
    subqueues.start()
    ctx[_SUBQUEUES_KEY] = subqueues


async def _on_shutdown_all(ctx: dict[str, Any]) -> None:
    subqueues = ctx.get(_SUBQUEUES_KEY)
    try:
        if isinstance(subqueues, _SubQueues):
            await subqueues.stop(CONFIG.job_completion_wait)
    finally:
        await _on_shutdown(ctx)
    if isinstance(subqueues, _SubQueues) and subqueues.crashed:
        raise RuntimeError(subqueues.crashed)  # exit non-zero so the supervisor restarts us


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

#: All three queues in one process: the push queue on arq's main worker, media and
#: maintenance on in-process sub-workers (see the module docstring).
WorkerSettings: dict[str, Any] = {
    **PushWorker,
    "on_startup": _on_startup_all,
    "on_shutdown": _on_shutdown_all,
}

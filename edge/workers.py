"""Several edge processes behind one port (``ANDROID_EDGE_WORKERS`` > 1), run by uvicorn's
own process manager (``uvicorn.supervisors.Multiprocess``).

One edge process is one event loop on one core: a connection storm saturates it while
the host's other cores idle. ``python -m edge`` binds the listening sockets once and
hands them to uvicorn's manager, which starts that many workers, replaces one that dies
(or stops answering its health check), stops them on SIGTERM/SIGINT, replaces them one
by one on SIGHUP, and stops altogether if a worker fails before it serves (exit 2 here).
A shared socket, not one ``SO_REUSEPORT`` socket per worker: the kernel hands a new
connection to whichever worker accepts first, so a busy worker takes fewer, and
connections queued in the backlog survive a worker's restart.

Each worker is a complete, stateless edge with its own edge id (its own reply channel on
the bus), built inside the worker when uvicorn loads its config there (``WorkerConfig``).
What uvicorn's stock server lacks, a worker adds in its app's lifespan
(``worker_lifespan``): devices hear 1001 (going away) before uvicorn would close them with
1012, a worker stops once the manager is gone, and its metrics go where any worker's
scrape finds them (prometheus_client's multiprocess mode, ``edge.metrics.SharedFigures``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import stat
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess

from canonical import logredact
from canonical.bus import open_bus
from canonical.settings import GatewaySettings, load_settings
from canonical.tasks import TaskSet

from . import fastpath, metrics
from .app import EdgeState, WorkerParts, build_app
from .server import going_away, guard_options, make_state, tune_gc, uvicorn_options

EXIT_BAD_SETTINGS = 2
BACKLOG = 2048  # uvicorn's default
# prometheus_client's multiprocess files: a private directory the manager makes and
# removes, named after its pid so that the directory of a manager killed outright
# (SIGKILL, OOM) is found and removed by the next one.
METRICS_DIR_PREFIX = "hdg-edge-metrics-"
PUBLISH_S = 1.0
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

log = logging.getLogger("hdg.edge")


def listen_sockets(host: str, port: int) -> list[socket.socket]:
    """The listening sockets every worker inherits, bound as a lone edge binds them
    (asyncio's ``create_server``): one per address ``host`` resolves to (both families
    for a name such as ``localhost``, every interface for an empty host), and an IPv6
    socket only for IPv6 (``::`` must not start taking IPv4 because workers were asked).
    """
    infos = socket.getaddrinfo(
        host or None, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE
    )
    socks: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(BACKLOG)
    except OSError:
        for sock in socks:
            sock.close()
        raise
    return socks


def worker_edge_id(edge_id: str | None, pid: int) -> str | None:
    """A configured edge id made unique per worker (each needs its own reply channel);
    a worker that replaces a dead one is a new edge, so replies meant for the dead one's
    devices never reach it."""
    return None if edge_id is None else f"{edge_id}-{pid}"


def stale_metrics_dirs(names: Iterable[str], alive: Callable[[int], bool]) -> list[str]:
    """The names among ``names`` of metrics directories whose manager is gone."""
    stale = []
    for name in names:
        if not name.startswith(METRICS_DIR_PREFIX):
            continue
        pid, _, rest = name[len(METRICS_DIR_PREFIX) :].partition("-")
        if pid.isdigit() and rest and not alive(int(pid)):
            stale.append(name)
    return stale


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # somebody else's process: alive
        return True
    return True


def remove_stale_metrics_dirs(parent: str | None = None) -> list[str]:
    """Remove the metrics directories left by managers that died without cleaning up
    (our own only: real directories owned by this user); the paths removed."""
    parent = parent or tempfile.gettempdir()
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    removed = []
    for name in stale_metrics_dirs(names, _pid_alive):
        path = os.path.join(parent, name)
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


class WorkerConfig(uvicorn.Config):
    """The config uvicorn's manager hands each worker: the edge (its bus connection, edge
    id, guard) is built in the worker, when uvicorn loads the config there."""

    def configure_logging(self) -> None:
        super().configure_logging()
        logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
        logredact.install()  # tokens, secrets and message bodies never reach a log line

    def load(self) -> None:
        settings = load_settings()  # checked by the manager already
        settings.edge_id = worker_edge_id(settings.edge_id, os.getpid())
        fastpath.configure(settings.fastpath)  # a spawned worker decides again
        try:
            bus = open_bus(settings.bus_url, settings.redis_timeouts())
        except ValueError as exc:  # a URL the scheme check let through: a port, an option
            print(f"edge: bad setting ANDROID_BUS_URL: {exc}", file=sys.stderr)
            sys.exit(STARTUP_FAILURE)  # the manager stops instead of restarting workers
        state = make_state(settings, bus)
        directory = os.environ["PROMETHEUS_MULTIPROC_DIR"]
        shared = metrics.SharedFigures()
        parts = WorkerParts(shared, directory, worker_lifespan(directory, shared))
        app = build_app(state, own_bus=True, worker=parts)
        for key, value in guard_options(app, {"http": self.http}, settings).items():
            setattr(self, key, value)
        self.app = app
        super().load()
        tune_gc()
        log.info("edge %s listening on %s:%d", state.edge_id, self.host, self.port)


def worker_lifespan(
    directory: str, shared: metrics.SharedFigures
) -> Callable[[EdgeState], contextlib.AbstractAsyncContextManager[None]]:
    """What a worker adds to its app's lifespan (see the module docstring)."""

    @contextlib.asynccontextmanager
    async def lifespan(state: EdgeState) -> AsyncIterator[None]:
        tasks = TaskSet(log)
        tasks.spawn(_publish(shared), name="hdg-metrics-publish")
        _going_away_first(state, tasks)
        _stop_with_manager()
        try:
            yield
        finally:
            await tasks.close()
            # This worker's gauges end with it; its counters stay in the totals.
            metrics.mark_dead(os.getpid(), directory)

    return lifespan


async def _publish(shared: metrics.SharedFigures) -> None:
    while True:
        shared.publish()
        await asyncio.sleep(PUBLISH_S)


def _going_away_first(state: EdgeState, tasks: TaskSet) -> None:
    """Close devices with 1001 before uvicorn's own stop (1012), as a lone edge does.

    uvicorn's server, which its manager runs, sets its SIGTERM/SIGINT handlers before the
    app starts: each is called once the devices are told. SIGHUP belongs to the manager
    (a rolling restart): a hang-up reaching the whole group leaves workers to it."""
    loop = asyncio.get_running_loop()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    for signum in (signal.SIGTERM, signal.SIGINT):
        stop = signal.getsignal(signum)
        if not callable(stop):
            continue

        def handler(
            received: int, frame: FrameType | None, stop: Callable[[int, Any], Any] = stop
        ) -> None:
            loop.call_soon_threadsafe(
                lambda: tasks.spawn(_then(going_away(state), stop, received), name="hdg-stop")
            )

        signal.signal(signum, handler)


async def _then(first: Any, stop: Callable[[int, Any], Any], signum: int) -> None:
    try:
        await first
    finally:
        stop(signum, None)


def _stop_with_manager() -> None:
    """Stop this worker as SIGTERM would once the manager is gone (killed outright), so
    no worker outlives it holding the port: the manager's end of a pipe every spawned
    process holds becomes readable then, even if it died before this worker started."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    loop = asyncio.get_running_loop()
    sentinel = parent.sentinel

    def gone() -> None:
        loop.remove_reader(sentinel)
        log.warning("the edge manager is gone: stopping")
        signal.raise_signal(signal.SIGTERM)

    loop.add_reader(sentinel, gone)


def run(settings: GatewaySettings) -> int:
    """``ANDROID_EDGE_WORKERS`` > 1: bind once, let uvicorn run that many edge workers."""
    try:
        socks = listen_sockets(settings.ws_host, settings.ws_port)
    except OSError as exc:
        print(
            f"edge: cannot listen on {settings.ws_host}:{settings.ws_port}: {exc}", file=sys.stderr
        )
        return EXIT_BAD_SETTINGS
    for path in remove_stale_metrics_dirs():
        log.info("removed the metrics directory of an edge manager that died: %s", path)
    # mode 0700; set before any worker imports prometheus_client
    directory = tempfile.mkdtemp(prefix=f"{METRICS_DIR_PREFIX}{os.getpid()}-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    config = WorkerConfig(
        "edge.workers:WorkerConfig",  # never imported: WorkerConfig.load builds the app
        workers=settings.edge_workers,
        **uvicorn_options(settings),
    )
    # The manager says when it replaces a worker; the workers keep uvicorn's warnings.
    logging.getLogger("uvicorn.error").setLevel(logging.INFO)
    log.info(
        "edge: %d workers listening on %s:%d",
        settings.edge_workers,
        settings.ws_host,
        settings.ws_port,
    )
    manager = Multiprocess(config, sockets=socks)
    try:
        manager.run()
    finally:
        for sock in socks:
            sock.close()
        shutil.rmtree(directory, ignore_errors=True)
    if any(process.exitcode == STARTUP_FAILURE for process in manager.processes):
        return EXIT_BAD_SETTINGS
    return 0


__all__ = [
    "EXIT_BAD_SETTINGS",
    "METRICS_DIR_PREFIX",
    "WorkerConfig",
    "listen_sockets",
    "remove_stale_metrics_dirs",
    "run",
    "stale_metrics_dirs",
    "worker_edge_id",
]

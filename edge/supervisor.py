"""Several edge processes behind one port (``ANDROID_EDGE_WORKERS`` > 1).

One edge process is one event loop on one core: a connection storm saturates it while
the host's other cores idle. The supervisor binds the listening socket once and starts
that many ``python -m edge`` workers that inherit it. Each worker is a complete,
stateless edge with its own edge id (its own reply channel on the bus), so nothing is
shared between them but the socket. A shared socket, not one ``SO_REUSEPORT`` socket per
worker: the kernel hands a new connection to whichever worker accepts first, so a busy
worker takes fewer, and connections queued in the backlog survive a worker's restart.

The supervisor restarts a worker that dies, with a growing delay while it keeps dying
young; forwards SIGTERM/SIGINT/SIGHUP as SIGTERM (each worker closes its devices with 1001);
and gives up with exit status 2 if a worker cannot even start (a bad setting). Workers
stop by themselves if the supervisor disappears.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import FrameType

LISTEN_FD_ENV = "HDG_EDGE_LISTEN_FD"
WORKER_INDEX_ENV = "HDG_EDGE_WORKER"
SUPERVISOR_PID_ENV = "HDG_EDGE_SUPERVISOR"
# The workers' shared metrics snapshots (edge/worker_metrics.py): a private directory the
# supervisor makes and removes, named after its pid so that the directory of a supervisor
# killed outright (SIGKILL, OOM) is found and removed by the next one.
METRICS_DIR_ENV = "HDG_EDGE_METRICS_DIR"
METRICS_DIR_PREFIX = "hdg-edge-metrics-"
EXIT_BAD_SETTINGS = 2
BACKLOG = 2048  # uvicorn's default

log = logging.getLogger("hdg.edge.supervisor")


@dataclass
class RestartBackoff:
    """When to restart a worker that exited: at once after a long life, later and later
    while it keeps dying young (a crash loop must not spin the CPU or flood the log)."""

    first_s: float = 0.5
    max_s: float = 30.0
    healthy_after_s: float = 30.0
    _delay: float = field(default=0.0, init=False)

    def next_delay(self, lived_s: float) -> float:
        if lived_s >= self.healthy_after_s:
            self._delay = 0.0
        self._delay = min(self.max_s, self._delay * 2 if self._delay else self.first_s)
        return self._delay


def gives_up(exit_code: int, lived_s: float, started_ok_before: bool) -> bool:
    """A worker refusing its settings at start-up will refuse them again: stop trying."""
    return exit_code == EXIT_BAD_SETTINGS and not started_ok_before and lived_s < 10.0


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
            sock.set_inheritable(True)
    except OSError:
        for sock in socks:
            sock.close()
        raise
    return socks


def inherited_sockets() -> list[socket.socket] | None:
    """In a worker: the supervisor's listening sockets, else None (a lone edge binds its own)."""
    fds = os.environ.get(LISTEN_FD_ENV)
    if not fds:
        return None
    return [socket.socket(fileno=int(fd)) for fd in fds.split(",")]


def worker_edge_id(edge_id: str | None) -> str | None:
    """A configured edge id made unique per worker (each needs its own reply channel)."""
    index = os.environ.get(WORKER_INDEX_ENV)
    if edge_id is None or index is None:
        return edge_id
    return f"{edge_id}-{index}"


def watch_parent(stop: Callable[[], None], interval_s: float = 1.0) -> None:
    """In a worker: call ``stop`` once the supervisor is gone (the worker was re-parented),
    so an edge never outlives its supervisor holding the port."""
    if WORKER_INDEX_ENV not in os.environ:
        return
    # The supervisor's pid from its environment, not getppid() now: a supervisor killed
    # while this worker was still importing has already left it re-parented, and the
    # worker would then watch its new parent and outlive the supervisor holding the port.
    parent = int(os.environ.get(SUPERVISOR_PID_ENV) or os.getppid())

    def poll() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        stop()

    threading.Thread(target=poll, name="edge-parent-watch", daemon=True).start()


def stale_metrics_dirs(names: Iterable[str], alive: Callable[[int], bool]) -> list[str]:
    """The names among ``names`` of metrics directories whose supervisor is gone."""
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
    """Remove the metrics directories left by supervisors that died without cleaning up
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


@dataclass
class _Worker:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restart_at: float | None = None
    started_ok: bool = False
    backoff: RestartBackoff = field(default_factory=RestartBackoff)


class Supervisor:
    """Runs ``count`` workers on ``socks`` until SIGTERM/SIGINT; returns the exit status."""

    def __init__(
        self,
        socks: list[socket.socket],
        count: int,
        *,
        argv: list[str] | None = None,
        grace_s: float = 10.0,
        poll_s: float = 0.1,
    ) -> None:
        self.socks = socks
        self.argv = argv or [sys.executable, "-m", "edge"]
        self.grace_s = grace_s
        self.poll_s = poll_s
        self.workers = [_Worker(i) for i in range(count)]
        self._stopping = False
        self.metrics_dir = ""

    def _start(self, worker: _Worker) -> None:
        env = dict(os.environ)
        fds = tuple(sock.fileno() for sock in self.socks)
        env[LISTEN_FD_ENV] = ",".join(map(str, fds))
        env[WORKER_INDEX_ENV] = str(worker.index)
        env[SUPERVISOR_PID_ENV] = str(os.getpid())
        env[METRICS_DIR_ENV] = self.metrics_dir
        worker.proc = subprocess.Popen(self.argv, env=env, pass_fds=fds)
        worker.started = time.monotonic()
        worker.restart_at = None
        log.info("edge worker %d started (pid %d)", worker.index, worker.proc.pid)

    def _restart(self, worker: _Worker) -> None:
        """Start a worker again; a spawn that fails (the interpreter replaced by a deploy,
        no memory or pids left) is tried again later, like a worker that died at once,
        instead of ending the supervisor and every worker still serving."""
        try:
            self._start(worker)
        except OSError as exc:
            delay = worker.backoff.next_delay(0.0)
            worker.restart_at = time.monotonic() + delay
            log.error(
                "edge worker %d could not be started (%s); trying again in %.1f s",
                worker.index,
                exc,
                delay,
            )

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True

    def run(self) -> int:
        previous = {
            sig: signal.signal(sig, self._on_signal)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # a hang-up: stop too
        }
        for path in remove_stale_metrics_dirs():
            log.info("removed the metrics directory of a supervisor that died: %s", path)
        # mode 0700
        self.metrics_dir = tempfile.mkdtemp(prefix=f"{METRICS_DIR_PREFIX}{os.getpid()}-")
        try:
            for worker in self.workers:
                self._start(worker)
            status = self._watch()
        finally:
            self._stop_all()
            shutil.rmtree(self.metrics_dir, ignore_errors=True)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return status

    def _watch(self) -> int:
        while not self._stopping:
            now = time.monotonic()
            for worker in self.workers:
                if worker.restart_at is not None:
                    if now >= worker.restart_at:
                        self._restart(worker)
                    continue
                assert worker.proc is not None
                code = worker.proc.poll()
                lived = now - worker.started
                if code is None:
                    if lived >= 10.0:
                        worker.started_ok = True
                    continue
                if gives_up(code, lived, worker.started_ok):
                    log.error(
                        "edge worker %d refused to start (exit %d): stopping", worker.index, code
                    )
                    return EXIT_BAD_SETTINGS
                delay = worker.backoff.next_delay(lived)
                worker.restart_at = now + delay
                log.warning(
                    "edge worker %d (pid %d) exited with %s; restarting in %.1f s",
                    worker.index,
                    worker.proc.pid,
                    code,
                    delay,
                )
            time.sleep(self.poll_s)
        return 0

    def _stop_all(self) -> None:
        live = [w.proc for w in self.workers if w.proc is not None and w.proc.poll() is None]
        for proc in live:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for proc in live:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("edge worker pid %d did not stop in time: killed", proc.pid)
                proc.kill()
                proc.wait()
        for sock in self.socks:
            sock.close()

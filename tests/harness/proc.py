"""Core of the process harness: ports, scrubbed environments, HTTP probes and
:class:`ManagedProcess` (one child in its own session, recorded until reaped).

Every process is started with ``start_new_session=True`` so it leads its own process group;
it is recorded in a module registry and stopped by pid / that process group only (never by
name). :func:`stop_all` (also run at interpreter exit) stops whatever is still recorded.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.prefix) / "bin"
PYTHON = sys.executable
LOOPBACK = "127.0.0.1"

# Environment variables never inherited by Hermes / edge children: they could point a
# test at a real provider, a real Hermes home, or leak a developer's tokens.
SCRUBBED_ENV_PREFIXES = (
    "HERMES_",
    "ANDROID_",
    "GATEWAY_",
    "OPENAI_",
    "OPENROUTER_",
    "ANTHROPIC_",
    "NOUS_",
    "TIRITH_",
)
SCRUBBED_ENV_SUFFIXES = ("_API_KEY",)
# Kept although ANDROID_*: the run's choice of stock paths (scripts/test's second run,
# benchmarks of the stock stack) must reach every gateway, edge and worker it starts.
KEPT_ENV = frozenset(("ANDROID_FASTPATH",))


class ProcessFailed(RuntimeError):
    """A managed process exited (or never became ready); the message carries its log tail."""


# Ports servers are started on come from a block of this test process's own, below the
# kernel's ephemeral range (32768+), taken in turn: parallel pytest workers and outgoing
# connections never hand one port to two servers, and a port a stopped server just left
# is not reused while a client of it may still be knocking (the suite runs in three
# workers; kernel-chosen ports collided across them). Eight blocks: 10,000-29,999.
_PORT_BLOCK = 2_500
_PORT_BASE = 10_000
_port_turn = itertools.count(os.getpid() % _PORT_BLOCK)


def _worker_index() -> int:
    name = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ...; unset: one process
    return int(name[2:]) % 8 if name.startswith("gw") and name[2:].isdigit() else 0


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that was free on ``host`` a moment ago, from this process's block."""
    start = _PORT_BASE + _worker_index() * _PORT_BLOCK
    for _ in range(_PORT_BLOCK):
        port = start + next(_port_turn) % _PORT_BLOCK
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue  # in use (or lingering): the next one
            return port
    raise RuntimeError(f"no free port in {start}..{start + _PORT_BLOCK - 1}")


def port_is_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def scrubbed_environ(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """``os.environ`` minus provider keys / Hermes / Android settings (but ``KEPT_ENV``),
    plus ``extra``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key in KEPT_ENV
        or not (key.startswith(SCRUBBED_ENV_PREFIXES) or key.endswith(SCRUBBED_ENV_SUFFIXES))
    }
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    return env


def http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    """GET ``url``; returns (status, body). Connection errors raise ``OSError``."""
    request = urllib.request.Request(url, method="GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as err:
        body = err.read()
        err.close()
        return int(err.code), body


def http_ok(url: str, timeout: float = 1.0) -> bool:
    try:
        return http_get(url, timeout)[0] == 200
    except OSError:
        return False


# --------------------------------------------------------------------------- registry

_LIVE: dict[int, ManagedProcess] = {}
_LIVE_LOCK = threading.Lock()


def live_processes() -> list[ManagedProcess]:
    with _LIVE_LOCK:
        return list(_LIVE.values())


def stop_all(timeout: float = 5.0) -> None:
    """Stop every process this module started and has not reaped yet."""
    for proc in reversed(live_processes()):
        with contextlib.suppress(Exception):
            proc.stop(timeout=timeout)


atexit.register(stop_all, 2.0)


class ManagedProcess:
    """One child process in its own session, output appended to ``log_path``."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_path = Path(log_path)
        self.env = dict(env) if env is not None else scrubbed_environ()
        self.cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> ManagedProcess:
        if self.running:
            raise RuntimeError(f"{self.name} already running (pid {self.pid})")
        if self._proc is not None:  # an earlier run that exited on its own
            self._proc.wait()
            self._kill_group(signal.SIGKILL)
            self._reaped()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(
                f"\n=== [harness] start #{self.starts + 1} {time.strftime('%H:%M:%S')}: "
                f"{' '.join(self.argv)}\n".encode()
            )
            log.flush()
            self._proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=str(self.cwd) if self.cwd else None,
                start_new_session=True,
            )
        self.starts += 1
        with _LIVE_LOCK:
            _LIVE[self._proc.pid] = self
        return self

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError(f"{self.name} was never started")
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def _reaped(self) -> None:
        if self._proc is None:
            return
        with _LIVE_LOCK:
            _LIVE.pop(self._proc.pid, None)

    def _kill_group(self, sig: int) -> None:
        """Signal the process group this process leads (it was started with a new session)."""
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)

    def send_signal(self, sig: int) -> None:
        if self.running and self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(sig)

    def wait(self, timeout: float) -> int | None:
        if self._proc is None:
            return None
        try:
            code = self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        return code

    def stop(self, timeout: float = 10.0, *, first_signal: int = signal.SIGTERM) -> int | None:
        """``first_signal`` to the pid, then SIGTERM, then SIGKILL to its group; reap it."""
        if self._proc is None:
            return None
        code: int | None = self._proc.poll()
        if code is None:
            for sig, share in ((first_signal, 0.7), (signal.SIGTERM, 0.3)):
                self.send_signal(sig)
                code = self.wait(max(0.5, timeout * share))
                if code is not None:
                    break
        if code is None:
            self._kill_group(signal.SIGKILL)
            code = self._proc.wait(timeout=10)
        # Leftover children in our own process group (e.g. shells it spawned).
        self._kill_group(signal.SIGKILL)
        self._reaped()
        return code

    def kill9(self) -> int:
        """SIGKILL the whole process group at once (a crash) and reap the leader."""
        if self._proc is None:
            raise RuntimeError(f"{self.name} was never started")
        self._kill_group(signal.SIGKILL)
        code = self._proc.wait(timeout=10)
        self._reaped()
        return code

    # -- logs / waiting ----------------------------------------------------------------
    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def wait_until(
        self,
        predicate: Callable[[], bool],
        timeout: float,
        *,
        interval: float = 0.1,
        what: str = "ready",
    ) -> None:
        """Poll ``predicate`` until true; fail fast (with the log tail) if the process exits."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.running:
                raise ProcessFailed(
                    f"{self.name} exited with code {self.returncode} before it was {what}.\n"
                    f"--- log tail ({self.log_path}) ---\n{self.log_tail()}"
                )
            with contextlib.suppress(Exception):
                if predicate():
                    return
            if time.monotonic() >= deadline:
                raise ProcessFailed(
                    f"{self.name} (pid {self.pid}) was not {what} within {timeout:.1f}s.\n"
                    f"--- log tail ({self.log_path}) ---\n{self.log_tail()}"
                )
            time.sleep(interval)

    def __repr__(self) -> str:
        state = f"pid={self._proc.pid}" if self._proc else "not started"
        return f"<{type(self).__name__} {self.name} {state}>"


def make_workdir(prefix: str, workdir: Path | None) -> Path:
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
        return workdir
    return Path(tempfile.mkdtemp(prefix=prefix))

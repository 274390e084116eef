"""Shared pieces of the performance benchmarks (Issue 7): processes, CPU/RSS accounting,
a lean WebSocket client, statistics and result files.

Nothing here is a test. Every benchmark starts what it measures on 127.0.0.1, bounds each
loop in count and time, and stops only the processes it started (by pid / own group).

CPU placement (2 cores): servers (edges, peers, redis-server) are pinned to CPU 0 with
``taskset``; load generators (device clients) and the event producers (plugin-side
publisher, socket.io emitter) to CPU 1. ``CPU_SERVER`` / ``CPU_CLIENT`` below.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import resource
import shutil
import socket
import struct
import sys
import time
from array import array
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
# Before/after comparisons: BENCH_CODE_ROOT=<a copy of canonical/, edge/, gateway_plugin/>
# runs the edges and the plugin side from that copy (the bench itself stays this one).
CODE = Path(os.environ.get("BENCH_CODE_ROOT") or REPO).resolve()
if CODE != REPO:
    sys.path.insert(0, str(CODE))

from tests.harness.proc import (
    PYTHON,
    ManagedProcess,
    free_port,
    http_ok,
    make_workdir,
    scrubbed_environ,
)

RESULTS = REPO / "bench" / "results"
LOOPBACK = "127.0.0.1"
CPU_SERVER = "0"
CPU_CLIENT = "1"
CLK_TCK = os.sysconf("SC_CLK_TCK")
HAVE_TASKSET = shutil.which("taskset") is not None and (os.cpu_count() or 1) >= 2

Json = dict[str, Any]


# --------------------------------------------------------------------------- host facts


def raise_nofile() -> int:
    """Raise this process's RLIMIT_NOFILE soft limit to its hard limit; return it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def machine() -> Json:
    cpu_model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    versions: Json = {}
    for name in ("websockets", "uvicorn", "starlette", "redis", "uvloop", "socketio", "engineio"):
        try:
            module = __import__(name)
            versions[name] = getattr(module, "__version__", "?")
        except Exception:
            versions[name] = None
    try:
        import importlib.metadata as md

        versions["python-socketio"] = md.version("python-socketio")
        versions["hiredis"] = md.version("hiredis")
    except Exception:
        pass
    redis_bin = shutil.which("redis-server")
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model,
        "mem_gib": round(mem_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "nofile_limit": resource.getrlimit(resource.RLIMIT_NOFILE),
        "redis_server": redis_bin,
        "versions": versions,
        "pinning": (
            f"servers + redis-server on CPU {CPU_SERVER}; clients and event producers on CPU "
            f"{CPU_CLIENT} (taskset)"
            if HAVE_TASKSET
            else "no pinning (taskset missing or < 2 CPUs)"
        ),
    }


def cpu_seconds(pid: int) -> float:
    """user + system CPU of one process (not its children), from /proc/<pid>/stat."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return 0.0
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def machine_busy_seconds() -> float:
    """CPU time spent busy by the whole machine (all CPUs), from /proc/stat."""
    try:
        fields = [
            int(x)
            for x in Path("/proc/stat").read_text(encoding="utf-8").split("\n", 1)[0].split()[1:]
        ]
    except OSError:
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / CLK_TCK


class CpuMeter:
    """CPU seconds of named groups of pids between start() and stop(); ``other_cpu_s`` is
    what the rest of the machine (other users, kernel threads) used meanwhile."""

    def __init__(self, groups: dict[str, Sequence[int]]) -> None:
        self.groups = {k: list(v) for k, v in groups.items()}
        self._t0 = 0.0
        self._before: dict[int, float] = {}

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._before = {pid: cpu_seconds(pid) for pids in self.groups.values() for pid in pids}
        self._busy0 = machine_busy_seconds()

    def stop(self) -> Json:
        wall = time.monotonic() - self._t0
        out: Json = {"wall_s": round(wall, 3)}
        ours = 0.0
        for name, pids in self.groups.items():
            used = sum(cpu_seconds(pid) - self._before.get(pid, 0.0) for pid in pids)
            out[f"{name}_cpu_s"] = round(used, 3)
            ours += used
        out["other_cpu_s"] = round(max(0.0, machine_busy_seconds() - self._busy0 - ours), 3)
        return out


# --------------------------------------------------------------------------- processes


def pinned(argv: Sequence[str], cpu: str | None) -> list[str]:
    if cpu is None or not HAVE_TASKSET:
        return list(argv)
    return ["taskset", "-c", cpu, *argv]


def spawn(
    name: str,
    argv: Sequence[str],
    *,
    cpu: str | None,
    env: dict[str, str] | None = None,
    workdir: Path | None = None,
    cwd: Path | None = None,
) -> ManagedProcess:
    """Start a process in its own session (stopped later by pid/own group only)."""
    workdir = make_workdir("hdg-bench-", workdir)
    extra = dict(env or {})
    if CODE != REPO:
        extra["BENCH_CODE_ROOT"] = str(CODE)
    proc = ManagedProcess(
        name,
        pinned(argv, cpu),
        log_path=workdir / f"{name.replace(':', '-')}.log",
        env=scrubbed_environ(extra),
        cwd=cwd or REPO,
    )
    return proc.start()


class Redis:
    """A private redis-server on a free loopback port, pinned to the server CPU."""

    def __init__(self) -> None:
        from tests.harness.services import RedisServer

        self.server = RedisServer()
        self.server.process.argv = pinned(self.server.process.argv, CPU_SERVER)

    def start(self) -> Redis:
        self.server.start()
        return self

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def pid(self) -> int:
        return self.server.pid

    def stop(self) -> None:
        self.server.cleanup()


class Edge:
    """`python -m edge` on the Redis bus, pinned to the server CPU."""

    def __init__(self, bus_url: str, *, extra_env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        env = {
            "ANDROID_BUS_URL": bus_url,
            "ANDROID_WS_HOST": LOOPBACK,
            "ANDROID_WS_PORT": str(self.port),
            **(extra_env or {}),
        }
        self.proc = spawn(
            f"edge-{self.port}", [PYTHON, "-m", "edge"], cpu=CPU_SERVER, env=env, cwd=CODE
        )

    def wait(self, timeout: float = 30.0) -> Edge:
        self.proc.wait_until(
            lambda: http_ok(f"http://{LOOPBACK}:{self.port}/healthz"), timeout, interval=0.05
        )
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def ws_url(self) -> str:
        return f"ws://{LOOPBACK}:{self.port}/ws"

    def stop(self) -> None:
        self.proc.stop(timeout=10)


def wait_port(port: int, proc: ManagedProcess, timeout: float = 30.0) -> None:
    def is_open() -> bool:
        with socket.socket() as probe:
            probe.settimeout(0.2)
            return probe.connect_ex((LOOPBACK, port)) == 0

    proc.wait_until(is_open, timeout, interval=0.05, what=f"listening on {port}")


def uses_uvloop(pid: int) -> bool:
    try:
        return "uvloop" in Path(f"/proc/{pid}/maps").read_text(encoding="utf-8")
    except OSError:
        return False


# --------------------------------------------------------------------------- child control


class Child:
    """A benchmark role in its own process, driven by JSON lines on stdin/stdout."""

    def __init__(self, name: str, argv: Sequence[str], *, cpu: str | None, env: Json | None = None):
        self.name = name
        self._argv = pinned(argv, cpu)
        extra = {k: str(v) for k, v in (env or {}).items()}
        if CODE != REPO:
            extra["BENCH_CODE_ROOT"] = str(CODE)
        self._env = scrubbed_environ(extra)
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> Child:
        self.proc = await asyncio.create_subprocess_exec(
            *self._argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=None,
            env=self._env,
            cwd=str(REPO),
            start_new_session=True,
            limit=64 * 1024 * 1024,
        )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def call(self, op: str, rpc_timeout: float = 120.0, **args: Any) -> Json:
        assert self.proc is not None and self.proc.stdin and self.proc.stdout
        self.proc.stdin.write((json.dumps({"op": op, **args}) + "\n").encode())
        await self.proc.stdin.drain()
        line = await asyncio.wait_for(self.proc.stdout.readline(), rpc_timeout)
        if not line:
            raise RuntimeError(f"{self.name} exited (code {self.proc.returncode}) during {op}")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"{self.name} {op}: {reply['error']}")
        return dict(reply)

    async def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        try:
            await asyncio.wait_for(self.call("quit", rpc_timeout=timeout), timeout)
        except Exception:
            pass
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            try:
                os.killpg(self.proc.pid, 9)
            except ProcessLookupError:
                pass
            await self.proc.wait()


async def serve_stdio(handlers: dict[str, Callable[..., Any]]) -> None:
    """A child's control loop: one JSON command per stdin line, one JSON reply per line."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = sys.stdout
    while True:
        line = await reader.readline()
        if not line:
            return
        command = json.loads(line)
        op = command.pop("op")
        if op == "quit":
            out.write(json.dumps({"ok": True}) + "\n")
            out.flush()
            return
        try:
            reply = await handlers[op](**command)
        except Exception as exc:  # reported to the parent, which stops the run
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


def run_loop(main: Callable[[], Any]) -> None:
    """asyncio on uvloop (what uvicorn uses for the edge)."""
    try:
        import uvloop

        uvloop.run(main())
    except ImportError:  # pragma: no cover
        asyncio.run(main())


# --------------------------------------------------------------------------- lean client

_UPGRADE = (
    "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


def client_frame(payload: bytes, opcode: int = 1) -> bytes:
    """A masked client frame. The all-zero mask leaves the payload as it is (RFC 6455 lets
    any key through; servers unmask with it), so no per-byte work in Python."""
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    return head + b"\x00\x00\x00\x00" + payload


class LeanWs(asyncio.Protocol):
    """A minimal WebSocket client: handshake, then text frames to ``on_text(self, payload,
    now_ns)``. Answers pings; never copies more than one partial frame."""

    __slots__ = (
        "transport",
        "opened",
        "closed",
        "_buf",
        "_upgraded",
        "_request",
        "on_text",
        "tag",
        "close_code",
    )

    def __init__(self, host: str, path: str, on_text: Callable[[LeanWs, bytes, int], None]):
        self.transport: asyncio.Transport | None = None
        loop = asyncio.get_running_loop()
        self.opened = loop.create_future()
        self.closed = loop.create_future()
        self._buf = b""
        self._upgraded = False
        self._request = _UPGRADE.format(path=path, host=host).encode()
        self.on_text = on_text
        self.tag: Any = None
        self.close_code: int | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        transport.write(self._request)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.opened.done():
            self.opened.set_exception(ConnectionError("closed before the handshake"))
        if not self.closed.done():
            self.closed.set_result(self.close_code)

    def send_text(self, text: str | bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            data = text.encode() if isinstance(text, str) else text
            self.transport.write(client_frame(data))

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(client_frame(struct.pack("!H", 1000), opcode=8))
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        if self._buf:
            data = self._buf + data
            self._buf = b""
        if not self._upgraded:
            end = data.find(b"\r\n\r\n")
            if end < 0:
                self._buf = data
                return
            if not data.startswith(b"HTTP/1.1 101"):
                if not self.opened.done():
                    self.opened.set_exception(
                        ConnectionError(data[: data.find(b"\r\n")].decode(errors="replace"))
                    )
                self.transport.close()  # type: ignore[union-attr]
                return
            self._upgraded = True
            if not self.opened.done():
                self.opened.set_result(None)
            data = data[end + 4 :]
        i = 0
        n = len(data)
        on_text = self.on_text
        while n - i >= 2:
            b0 = data[i]
            length = data[i + 1] & 0x7F
            if length < 126:
                start = i + 2
            elif length == 126:
                if n - i < 4:
                    break
                length = (data[i + 2] << 8) | data[i + 3]
                start = i + 4
            else:
                if n - i < 10:
                    break
                length = int.from_bytes(data[i + 2 : i + 10], "big")
                start = i + 10
            end = start + length
            if end > n:
                break
            opcode = b0 & 0x0F
            if opcode == 1 or opcode == 2:
                on_text(self, data[start:end], now)
            elif opcode == 9:
                self.transport.write(client_frame(data[start:end], opcode=10))  # type: ignore[union-attr]
            elif opcode == 8:
                if length >= 2:
                    self.close_code = (data[start] << 8) | data[start + 1]
                self.transport.close()  # type: ignore[union-attr]
                return
            i = end
        if i < n:
            self._buf = data[i:]


async def lean_connect(
    url: str, on_text: Callable[[LeanWs, bytes, int], None], timeout: float = 10.0, tag: Any = None
) -> LeanWs:
    """ws://host:port/path → an open LeanWs (``tag`` is set before any frame arrives)."""
    rest = url.split("://", 1)[1]
    hostport, _, path = rest.partition("/")
    host, _, port = hostport.partition(":")
    loop = asyncio.get_running_loop()

    def factory() -> LeanWs:
        proto = LeanWs(hostport, "/" + path, on_text)
        proto.tag = tag
        return proto

    _, proto = await asyncio.wait_for(loop.create_connection(factory, host, int(port)), timeout)
    await asyncio.wait_for(proto.opened, timeout)
    return proto


async def bounded_gather(
    factories: Iterable[Callable[[], Any]], concurrency: int, deadline: float
) -> list[Any]:
    """Run coroutine factories with at most ``concurrency`` in flight; stop starting new
    ones at ``deadline`` (monotonic). Exceptions are returned, not raised."""
    sem = asyncio.Semaphore(concurrency)
    results: list[Any] = []

    async def one(factory: Callable[[], Any]) -> Any:
        async with sem:
            if time.monotonic() > deadline:
                return TimeoutError("deadline passed before start")
            try:
                return await factory()
            except Exception as exc:
                return exc

    results = await asyncio.gather(*(one(f) for f in factories))
    return results


# --------------------------------------------------------------------------- statistics


def percentile(ordered: Sequence[float], q: float) -> float:
    if not ordered:
        return float("nan")
    return float(ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))])


def summary_ms(values_us: array | list[float]) -> Json:
    ordered = sorted(values_us)
    if not ordered:
        return {"n": 0}
    return {
        "n": len(ordered),
        "p50_ms": round(percentile(ordered, 0.50) / 1000, 2),
        "p90_ms": round(percentile(ordered, 0.90) / 1000, 2),
        "p99_ms": round(percentile(ordered, 0.99) / 1000, 2),
        "max_ms": round(ordered[-1] / 1000, 2),
    }


def write_result(name: str, data: Json) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    return path


def now_stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


# --------------------------------------------------------------------------- plugin side


class BenchAgent:
    """Stand-in for Hermes (AgentPort) with only what hello, sync and replay touch.

    The benchmarks measure the gateway's own paths (outbox, bus, edge); Hermes is not part
    of what they measure, so a real `hermes gateway run` is used only by turn_overhead.py.
    """

    async def wait_ready(self) -> None:
        return None

    def cron_jobs(self) -> list[Json]:
        return []


async def start_controllers(
    bus_url: str, tenants: Sequence[tuple[str, str]], data_root: Path
) -> list[Any]:
    """One real gateway_plugin Controller per (tenant, token), sharing one RedisBus (as a
    host running several Hermes gateways would not; one process keeps the bench small)."""
    from canonical.bus import open_bus
    from canonical.settings import load_settings
    from gateway_plugin.controller import Controller

    for name in ("ANDROID_ADMIN_TOKEN", "ANDROID_ADMIN_DEVICES", "ANDROID_METRICS_PORT"):
        os.environ.pop(name, None)
    bus = open_bus(bus_url)
    controllers = []
    for tenant, token in tenants:
        settings = load_settings({"token": token})
        root = data_root / tenant
        controller = Controller(
            settings,
            bus,
            tenant=tenant,
            token=token,
            data_dir=root / "android",
            state_db=root / "state.db",
            agent=BenchAgent(),
        )
        await controller.start()
        controllers.append(controller)
    return controllers


def tenant_token(index: int, run: str) -> tuple[str, str]:
    return f"bench{run}-t{index:03d}", f"bench-token-{run}-{index:04d}-" + "k" * 24

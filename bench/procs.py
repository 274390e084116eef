"""Processes the benchmarks start: pinned servers (redis-server, edges, peers), benchmark
roles in child processes driven by JSON lines (``Child`` / ``serve_stdio``), and py-spy.

Every process is started in its own session and stopped by pid / its own group only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.host import (
    CODE,
    CPU_CLIENT,
    CPU_SERVER,
    HAVE_TASKSET,
    LOOPBACK,
    REPO,
    Json,
    process_tree,
)
from tests.harness.proc import (
    PYTHON,
    ManagedProcess,
    free_port,
    http_ok,
    make_workdir,
    scrubbed_environ,
)
from tests.harness.services import RedisServer

PEERS = REPO / "bench" / "peers"


def pinned(argv: Sequence[str], cpu: str | None) -> list[str]:
    if cpu is None or not HAVE_TASKSET:
        return list(argv)
    return ["taskset", "-c", cpu, *argv]


def child_environ(extra: dict[str, str]) -> dict[str, str]:
    """A scrubbed environment for a child; it loads the same code (``BENCH_CODE_ROOT``)."""
    if CODE != REPO:
        extra = {**extra, "BENCH_CODE_ROOT": str(CODE)}
    return scrubbed_environ(extra)


# --------------------------------------------------------------------------- servers


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
    proc = ManagedProcess(
        name,
        pinned(argv, cpu),
        log_path=workdir / f"{name.replace(':', '-')}.log",
        env=child_environ(dict(env or {})),
        cwd=cwd or REPO,
    )
    return proc.start()


class Redis(RedisServer):
    """A private redis-server on a free loopback port, pinned to the server CPU unless told
    otherwise (stop it, and remove its directory, with ``cleanup()``)."""

    def __init__(self, cpu: str = CPU_SERVER) -> None:
        super().__init__()
        self.process.argv = pinned(self.process.argv, cpu)


class Edge:
    """`python -m edge` on the Redis bus, pinned to the server CPU."""

    def __init__(
        self, bus_url: str, *, extra_env: dict[str, str] | None = None, workers: int = 1
    ) -> None:
        self.port = free_port()
        env = {
            "ANDROID_BUS_URL": bus_url,
            "ANDROID_WS_HOST": LOOPBACK,
            "ANDROID_WS_PORT": str(self.port),
            "ANDROID_EDGE_WORKERS": str(workers),
            # Every bench device connects from 127.0.0.1, where real devices come from many
            # addresses: the per-address limit on sockets before hello would refuse (429) the
            # bench's concurrent set-ups, not protect anything.
            "ANDROID_MAX_UNAUTHENTICATED_PER_ADDRESS": "100000",
            **(extra_env or {}),
        }
        # BENCH_CPROFILE_DIR: the edge under cProfile (bench/cprofile_edge.py).
        argv = [PYTHON, "-m", "edge"]
        if os.environ.get("BENCH_CPROFILE_DIR"):
            argv = [PYTHON, str(REPO / "bench" / "cprofile_edge.py")]
            env["BENCH_CPROFILE_DIR"] = os.environ["BENCH_CPROFILE_DIR"]
        # Several workers (edge/workers.py, uvicorn's process manager) get every core: pinned, they would share one.
        cpu = CPU_SERVER if workers == 1 else None
        self.workers = workers
        self.proc = spawn(f"edge-{self.port}", argv, cpu=cpu, env=env, cwd=CODE)

    def _all_listening(self) -> bool:
        if self.workers == 1:
            return http_ok(f"http://{LOOPBACK}:{self.port}/healthz")
        # Every worker logs "edge <id> listening on ..." once it serves (appended log).
        log = self.proc.log_path.read_text(encoding="utf-8", errors="replace")
        return log.count(" listening on ") >= self.workers + 1  # + the manager's line

    def wait(self, timeout: float = 30.0) -> Edge:
        self.proc.wait_until(self._all_listening, timeout, interval=0.05)
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def pids(self) -> list[int]:
        """The edge process, and its workers when it supervises several."""
        return process_tree(self.proc.pid)

    @property
    def ws_url(self) -> str:
        return f"ws://{LOOPBACK}:{self.port}/ws"

    def stop(self) -> None:
        self.proc.stop(timeout=10)


def start_edges(bus_url: str, count: int, extra_env: dict[str, str] | None = None) -> list[Edge]:
    """``count`` edges on the bus (``extra_env`` added to their environment), all launched
    before any is waited for; none is left running if one does not come up."""
    edges = [Edge(bus_url, extra_env=extra_env) for _ in range(count)]
    try:
        for edge in edges:
            edge.wait()
    except BaseException:
        for edge in edges:
            edge.stop()
        raise
    return edges


def wait_port(port: int, proc: ManagedProcess, timeout: float = 30.0) -> None:
    def is_open() -> bool:
        with socket.socket() as probe:
            probe.settimeout(0.2)
            return probe.connect_ex((LOOPBACK, port)) == 0

    proc.wait_until(is_open, timeout, interval=0.05, what=f"listening on {port}")


def start_peer(
    kind: str, script: str, *args: str, cpu: str | None = CPU_SERVER, processes: int = 1
) -> tuple[int, ManagedProcess]:
    """``bench/peers/<script> --port P [args]`` on a free port, pinned to the server CPU
    (unless ``cpu`` is None), once it listens and its process tree has ``processes``
    processes (stopped again if not). A supervisor's port opens when it binds, before it
    has started its workers: measured then, their CPU and memory would be left out."""
    port = free_port()
    proc = spawn(
        f"{kind}-{port}",
        [PYTHON, str(PEERS / script), "--port", str(port), *args],
        cpu=cpu,
    )
    try:
        wait_port(port, proc)
        proc.wait_until(
            lambda: len(process_tree(proc.pid)) >= processes,
            30.0,
            interval=0.05,
            what=f"{processes} processes",
        )
    except BaseException:
        proc.stop()
        raise
    return port, proc


async def start_py_spy(pid: int, seconds: int, output: Path) -> asyncio.subprocess.Process:
    """py-spy (from this venv) recording ``pid`` for ``seconds`` into ``output`` (raw)."""
    return await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "py-spy"),
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(seconds),
        "--rate",
        os.environ.get("BENCH_PY_SPY_RATE", "250"),  # more samples rank smaller pieces
        "--format",
        "raw",
        # py-spy refuses native frames without pausing the process (slower, but exact).
        *(["--native"] if os.environ.get("BENCH_PY_SPY_NATIVE") else ["--nonblocking"]),
        "--output",
        str(output),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )


# --------------------------------------------------------------------------- child control


class Child:
    """A benchmark role in its own process, driven by JSON lines on stdin/stdout."""

    def __init__(self, name: str, argv: Sequence[str], *, cpu: str | None, env: Json | None = None):
        self.name = name
        self._argv = pinned(argv, cpu)
        self._env = child_environ({k: str(v) for k, v in (env or {}).items()})
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


async def start_role(script: str, role: str, *args: str, env: Json | None = None) -> Child:
    """``python <script> <role> [args]``: a Child named after its role, on the client CPU
    (device clients, plugin side, producers), with ``env`` added to its environment."""
    return await Child(role, [PYTHON, script, role, *args], cpu=CPU_CLIENT, env=env).start()


def role_parser(doc: str | None, *roles: str) -> argparse.ArgumentParser:
    """A script's command line: its docstring as help, and ``[role]`` (default
    ``orchestrate``, the run itself; the others are its children)."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("role", nargs="?", default="orchestrate", choices=["orchestrate", *roles])
    return parser


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

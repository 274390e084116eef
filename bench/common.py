"""Shared pieces of the performance benchmarks, in one import: what the modules
below define, re-exported for ``from bench.common import X``.

- ``bench.host``: the code the bench loads (``BENCH_CODE_ROOT``), CPU placement, host
  facts, CPU/RSS accounting (``CpuMeter``);
- ``bench.procs``: pinned servers (``Redis``, ``Edge``, peers), roles in child processes
  driven by JSON lines (``Child``, ``serve_stdio``), py-spy;
- ``bench.lean_ws``: the lean WebSocket client (``LeanWs``, ``lean_connect``);
- ``bench.stats``: percentiles; ``bench.results``: the result files (``begin``, ``figure``);
- ``bench.plugin_side``: real Controllers with the stand-in AgentPort (``BenchAgent``).

Nothing here is a test. Every benchmark starts what it measures on 127.0.0.1, bounds each
loop in count and time, and stops only the processes it started (by pid / own group).
"""

from __future__ import annotations

from bench.host import (
    CLK_TCK,
    CODE,
    CPU_CLIENT,
    CPU_SERVER,
    HAVE_TASKSET,
    LOOPBACK,
    REPO,
    RESULTS,
    CpuMeter,
    Json,
    cpu_seconds,
    machine_busy_seconds,
    raise_nofile,
    rss_bytes,
    uses_uvloop,
)
from bench.lean_ws import LeanWs, bounded_gather, client_frame, iris_hello, lean_connect
from bench.plugin_side import (
    BenchAgent,
    delta_event,
    running_controllers,
    start_controllers,
    tenant_token,
)
from bench.procs import (
    Child,
    Edge,
    Redis,
    pinned,
    role_parser,
    run_loop,
    serve_stdio,
    spawn,
    start_edges,
    start_peer,
    start_py_spy,
    start_role,
    wait_port,
)
from bench.results import Run, begin, figure
from bench.stats import percentile, result_name, summary_ms, write_timed_result
from tests.harness.proc import PYTHON, free_port

__all__ = [
    "CLK_TCK",
    "CODE",
    "CPU_CLIENT",
    "CPU_SERVER",
    "HAVE_TASKSET",
    "LOOPBACK",
    "PYTHON",
    "REPO",
    "RESULTS",
    "BenchAgent",
    "Child",
    "CpuMeter",
    "Edge",
    "Json",
    "LeanWs",
    "Redis",
    "Run",
    "begin",
    "bounded_gather",
    "client_frame",
    "cpu_seconds",
    "delta_event",
    "figure",
    "free_port",
    "iris_hello",
    "lean_connect",
    "machine_busy_seconds",
    "percentile",
    "pinned",
    "raise_nofile",
    "result_name",
    "role_parser",
    "rss_bytes",
    "run_loop",
    "running_controllers",
    "serve_stdio",
    "spawn",
    "start_controllers",
    "start_edges",
    "start_peer",
    "start_py_spy",
    "start_role",
    "summary_ms",
    "tenant_token",
    "uses_uvloop",
    "wait_port",
    "write_timed_result",
]

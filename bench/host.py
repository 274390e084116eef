"""Where the benchmarks run: the code they load, CPU placement, host facts, and CPU/RSS
accounting of the processes they start.

Importing this module is what puts the project on ``sys.path`` (``BENCH_CODE_ROOT`` first,
when set): every other bench module that loads project code imports it before doing so.

CPU placement (2 cores): servers (edges, peers, redis-server) are pinned to CPU 0 with
``taskset``; load generators (device clients) and the event producers (plugin-side
publisher, socket.io emitter) to CPU 1. ``CPU_SERVER`` / ``CPU_CLIENT`` below.
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from canonical.model import Json

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
# Before/after comparisons: BENCH_CODE_ROOT=<a copy of canonical/, edge/, gateway_plugin/>
# runs the edges and the plugin side from that copy (the bench itself stays this one).
CODE = Path(os.environ.get("BENCH_CODE_ROOT") or REPO).resolve()
if CODE != REPO:
    sys.path.insert(0, str(CODE))

RESULTS = REPO / "bench" / "results"
LOOPBACK = "127.0.0.1"
CPU_SERVER = "0"
CPU_CLIENT = "1"
CLK_TCK = os.sysconf("SC_CLK_TCK")
HAVE_TASKSET = shutil.which("taskset") is not None and (os.cpu_count() or 1) >= 2
# The stock path: our gateway told to leave its fast path (the code that reaches into
# libraries' internals) and run the libraries' stock uvicorn/websockets/redis-py paths, so
# what the fast path gains is measured in the same run.
STOCK_ENV = {"ANDROID_FASTPATH": "off"}


def stock_switch_present() -> bool:
    """Whether the code measured reads ``ANDROID_FASTPATH`` at all: without it, a stock run
    measures the fast path a second time, and its result says so."""
    name = next(iter(STOCK_ENV))
    return any(
        name in path.read_text(encoding="utf-8", errors="replace")
        for package in ("edge", "canonical")
        for path in (CODE / package).rglob("*.py")
    )


# --------------------------------------------------------------------------- host facts


def raise_nofile() -> int:
    """Raise this process's RLIMIT_NOFILE soft limit to its hard limit; return it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def uses_uvloop(pid: int) -> bool:
    try:
        return "uvloop" in Path(f"/proc/{pid}/maps").read_text(encoding="utf-8")
    except OSError:
        return False


# --------------------------------------------------------------------------- CPU and RSS


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


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a supervisor and its workers), from /proc."""
    out = [pid]
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            children = (task / "children").read_text(encoding="ascii").split()
        except OSError:
            continue
        for child in children:
            out.extend(process_tree(int(child)))
    return out


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

    def __init__(self, groups: Mapping[str, Sequence[int]]) -> None:
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

"""The result files of the benchmarks: one small JSON document per run, the one format the
report (``bench/report.py``) reads, so every figure in the docs can be traced to a file.

    {
      "schema": 1,
      "bench": "fanout",                      # what ran
      "parameters": {...},                    # how it was asked to run
      "machine": {"cpu_model", "cores", "mem_gib", "kernel", "python",
                  "versions": {uvicorn, websockets, redis, redis-server, hermes, ...},
                  "loadavg_start": [1, 5, 15], "loadavg_end": [1, 5, 15]},
      "git": {"commit": "<sha>", "dirty": false},
      "timestamp": "2026-12-05T13:00:00Z",    # UTC, when the run started
      "wall_s": 312.4,
      "figures": [{"name": "max_sustained_rate", "value": 100000,
                   "unit": "deliveries/s", "labels": {"system": "ours", "n": 100}}],
      "detail": {...}                         # the bench's own record (steps, CPU, ...)
    }

``figures`` are what the report may quote; ``detail`` is what a reader checks them against.
A run's load average is recorded because the machine may be shared: compare figures of one
file, and trust a quiet run over a busy one.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import platform
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from canonical.model import Json

SCHEMA = 1
REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
# Where a bench writes without --out: kept out of git, so an ad-hoc run never replaces the
# committed results the docs are generated from.
LOCAL = RESULTS / "local"
VERSIONED = {
    "uvicorn": "uvicorn",
    "websockets": "websockets",
    "redis": "redis",
    "hiredis": "hiredis",
    "starlette": "starlette",
    "uvloop": "uvloop",
    "hermes": "hermes-agent",
    "python-socketio": "python-socketio",
}
MEASURED = ("bench/", "canonical/", "edge/", "gateway_plugin/", "workers/", "pyproject.toml")
NOT_MEASURED = ("bench/results/", "bench/report", "bench/README.md")
TOP_KEYS = ("schema", "bench", "parameters", "machine", "git", "timestamp", "wall_s", "figures")


@dataclass(frozen=True)
class Run:
    """When and under what load a run started (``begin()``)."""

    monotonic: float = field(default_factory=time.monotonic)
    timestamp: str = field(
        default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    )
    loadavg: tuple[float, ...] = field(default_factory=lambda: _loadavg())


def begin() -> Run:
    return Run()


def _loadavg() -> tuple[float, ...]:
    try:
        return tuple(round(x, 2) for x in os.getloadavg())
    except OSError:
        return ()


def figure(name: str, value: float | int | None, unit: str, **labels: Any) -> Json:
    """One quotable figure. ``value`` None: measured but nothing passed (e.g. no step)."""
    if isinstance(value, float) and not math.isfinite(value):
        value = None
    return {"name": name, "value": value, "unit": unit, "labels": labels}


def _first_line(path: Path, prefix: str) -> str:
    try:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith(prefix):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _redis_server_version() -> str | None:
    try:
        out = subprocess.run(
            ["redis-server", "--version"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for word in out.split():
        if word.startswith("v="):
            return word[2:]
    return None


def machine(run: Run) -> Json:
    versions: Json = {}
    for key, dist in VERSIONED.items():
        try:
            versions[key] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[key] = None
    versions["redis-server"] = _redis_server_version()
    mem = _first_line(Path("/proc/meminfo"), "MemTotal:")
    return {
        "cpu_model": _first_line(Path("/proc/cpuinfo"), "model name"),
        "cores": os.cpu_count(),
        "mem_gib": round(int(mem.split()[0]) / 2**20, 1) if mem else None,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "versions": versions,
        "loadavg_start": list(run.loadavg),
        "loadavg_end": list(_loadavg()),
    }


def git_state() -> Json:
    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {
        "commit": git("rev-parse", "HEAD") or None,
        # Uncommitted changes to code that runs when measuring: the code is not the commit.
        "dirty": any(
            line[3:].startswith(MEASURED) and not line[3:].startswith(NOT_MEASURED)
            for line in git("status", "--porcelain", "--untracked-files=no").splitlines()
        ),
    }


def out_path(out: str | Path | None, default_name: str) -> Path:
    """``--out`` as given, else ``bench/results/local/<default_name>.json``."""
    return Path(out) if out else LOCAL / f"{default_name}.json"


def document(
    run: Run, *, bench: str, parameters: Json, figures: list[Json], detail: Json | None = None
) -> Json:
    return {
        "schema": SCHEMA,
        "bench": bench,
        "parameters": parameters,
        "machine": machine(run),
        "git": git_state(),
        "timestamp": run.timestamp,
        "wall_s": round(time.monotonic() - run.monotonic, 1),
        "figures": figures,
        "detail": detail or {},
    }


def write(
    out: str | Path,
    run: Run,
    *,
    bench: str,
    parameters: Json,
    figures: list[Json],
    detail: Json | None = None,
) -> Path:
    """Write one result file (the only way a bench writes one); says where."""
    doc = document(run, bench=bench, parameters=parameters, figures=figures, detail=detail)
    problems = validate(doc)
    if problems:
        raise ValueError(f"{bench}: not a valid result: {problems}")
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    print(f"wrote {path} in {doc['wall_s']} s ({len(figures)} figures)", flush=True)
    return path


def validate(doc: Json) -> list[str]:
    """What makes ``doc`` not a result file of this schema (empty: it is one)."""
    problems = [f"missing {key}" for key in TOP_KEYS if key not in doc]
    if problems:
        return problems
    if doc["schema"] != SCHEMA:
        problems.append(f"schema {doc['schema']} != {SCHEMA}")
    for key in ("cpu_model", "cores", "python", "versions", "loadavg_start", "loadavg_end"):
        if key not in doc["machine"]:
            problems.append(f"machine.{key} missing")
    for i, fig in enumerate(doc["figures"]):
        if set(fig) != {"name", "value", "unit", "labels"}:
            problems.append(f"figures[{i}] keys {sorted(fig)}")
        elif not (fig["value"] is None or isinstance(fig["value"], int | float)):
            problems.append(f"figures[{i}] value {fig['value']!r}")
    return problems


def load(path: Path) -> Json:
    doc: Json = json.loads(path.read_text(encoding="utf-8"))
    problems = validate(doc)
    if problems:
        raise ValueError(f"{path}: {problems}")
    return doc


def find(doc: Json, name: str, **labels: Any) -> Json | None:
    """The one figure called ``name`` whose labels include ``labels`` (None: no such)."""
    hits = [
        f
        for f in doc["figures"]
        if f["name"] == name and all(f["labels"].get(k) == v for k, v in labels.items())
    ]
    if len(hits) > 1:
        raise LookupError(f"{doc['bench']}: {len(hits)} figures match {name} {labels}")
    return hits[0] if hits else None

"""Statistics and result files of the benchmarks: percentiles of latency samples and
``bench/results/<name>.json``."""

from __future__ import annotations

import json
import time
from array import array
from collections.abc import Sequence
from pathlib import Path

from bench.host import RESULTS, Json


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


def result_name(name: str | None, quick: bool, default: str) -> str:
    """``--name``, else ``<default>`` or, with ``--quick``, ``<default>-quick``."""
    return name or (f"{default}-quick" if quick else default)


def write_timed_result(name: str, data: Json, started: float) -> Path:
    """``write_result`` with ``wall_s`` (since ``started``, monotonic) last; says where."""
    data["wall_s"] = round(time.monotonic() - started, 1)
    path = write_result(name, data)
    print(f"wrote {path} in {data['wall_s']} s")
    return path


def now_stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")

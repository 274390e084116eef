"""Statistics of the benchmarks and their result files: percentiles of latency samples, and
a bench's record written as a result file (``bench.results``)."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from pathlib import Path

from bench import results
from bench.host import Json
from bench.results import Run


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


def result_name(name: str | None, quick: bool, default: str) -> str:
    """``--name``, else ``<default>`` or, with ``--quick``, ``<default>-quick``."""
    return name or (f"{default}-quick" if quick else default)


def write_timed_result(
    out: str | Path | None, name: str, data: Json, run: Run, figures: list[Json]
) -> Path:
    """A bench's record as a result file (``bench.results``): ``--out``, else
    ``bench/results/local/<name>.json``. ``data``'s ``benchmark`` and ``method`` become the
    file's ``bench`` and ``parameters``; the rest is its ``detail``."""
    detail = {k: v for k, v in data.items() if k not in ("benchmark", "method")}
    return results.write(
        results.out_path(out, name),
        run,
        bench=data["benchmark"],
        parameters=data.get("method", {}),
        figures=figures,
        detail=detail,
    )

"""Prometheus metrics of the workers (default registry).

``hdg_push_results_total{backend,outcome}`` counts every push *attempt* by its outcome
(``delivered``, ``token_invalid``, ``retry_after``, ``retry``, ``failed``, and
``acked`` when a device read the event before the attempt), so retries
show up as ``retry`` followed by a terminal outcome.

``hdg_job_duration_seconds{job}`` times each run of a job function (each try).
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

__all__ = ["JOB_DURATION", "PUSH_RESULTS"]

PUSH_RESULTS = Counter(
    "hdg_push_results_total",
    "Push attempts by backend and outcome.",
    ["backend", "outcome"],
)

JOB_DURATION = Histogram(
    "hdg_job_duration_seconds",
    "Wall time of one run of a worker job function.",
    ["job"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
)

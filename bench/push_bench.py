"""Benchmark push latency: job enqueue -> request arriving at FCM.

    .venv/bin/python bench/push_bench.py [--pushes 50] [--poll-delays 0.1,0.05,0.5]

Starts a private redis-server, the local fake OAuth + FCM service (answering with no
added delay) and one real ``arq workers.settings.PushWorker`` process per poll delay.
Pushes are enqueued one at a time (no queueing behind each other), each after a random
pause so it lands at a random phase of the worker's poll loop (arq polls Redis every
``poll_delay`` seconds; it has no blocking pop). The latency of a push is the fake
FCM's arrival timestamp minus the enqueue timestamp (same host clock).
The OAuth token is fetched by a warm-up push first, so the figures are steady state.

Writes ``--out`` (else bench/results/local/push.json), a result file of ``bench.results``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import redis as redis_client
from arq import create_pool
from arq.connections import RedisSettings

from bench import results
from tests.harness.processes import ManagedProcess, RedisServer, scrubbed_environ
from tests.workers.fake_services import running_fcm
from workers.jobs import PUSH_QUEUE, enqueue_push


def healthy(redis_url: str) -> bool:
    probe = redis_client.Redis.from_url(redis_url)
    try:
        return bool(probe.exists(f"{PUSH_QUEUE}:health-check"))
    finally:
        probe.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(redis_url: str, fcm: Any, pushes: int, poll_delay: float) -> dict[str, Any]:
    pool = await create_pool(RedisSettings.from_dsn(redis_url))
    latencies: list[float] = []
    completions: list[float] = []
    try:
        rng = random.Random(7)
        for n in range(pushes + 1):
            # A random phase against the worker's poll loop: without it, back-to-back
            # pushes lock onto the loop and every one waits a full poll delay.
            await asyncio.sleep(rng.uniform(0, poll_delay))
            seen = len(fcm.arrivals)
            payload = {
                "idempotency_key": f"bench-{time.time_ns()}-{n}",
                "tenant": "bench",
                "device_id": "dev",
                "backend": "fcm",
                "token_or_topic": f"token-{n}",
                "kind": "reply",
                "chat_id": "chat-1",
                "title": "Hermes",
            }
            enqueued = time.time()
            job = await enqueue_push(pool, payload)
            assert job is not None
            while len(fcm.arrivals) == seen:  # noqa: ASYNC110 - the fake FCM runs on another thread
                await asyncio.sleep(0.0005)
            arrived = fcm.arrivals[seen]
            result = await job.result(timeout=10, poll_delay=0.01)
            done = time.time()
            assert result["outcome"] == "delivered", result
            if n == 0:
                continue  # warm-up: includes the OAuth grant
            latencies.append(arrived - enqueued)
            completions.append(done - enqueued)
    finally:
        await pool.aclose()
    ms = [x * 1000 for x in latencies]
    return {
        "pushes": len(ms),
        "median_ms": round(statistics.median(ms), 2),
        "p90_ms": round(percentile(ms, 0.9), 2),
        "min_ms": round(min(ms), 2),
        "max_ms": round(max(ms), 2),
        "median_enqueue_to_result_ms": round(statistics.median(c * 1000 for c in completions), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pushes", type=int, default=50)
    parser.add_argument(
        "--poll-delays", default="0.1,0.05,0.5", help="HDG_PUSH_POLL_DELAY values to compare"
    )
    parser.add_argument("--out", default=None, help="result file (bench/results/<name>.json)")
    args = parser.parse_args()
    run = results.begin()
    report: dict[str, Any] = {"runs": {}}
    with tempfile.TemporaryDirectory(prefix="hdg-push-bench-") as tmp:
        workdir = Path(tmp)
        redis = RedisServer(workdir=workdir / "redis").start()
        try:
            with running_fcm(workdir) as (fcm, account_file):
                for delay in args.poll_delays.split(","):
                    worker = ManagedProcess(
                        f"arq-push-{delay}",
                        [sys.executable, "-m", "arq", "workers.settings.PushWorker"],
                        log_path=workdir / f"worker-{delay}.log",
                        env=scrubbed_environ(
                            {
                                "ANDROID_BUS_URL": redis.url,
                                "ANDROID_FCM_SERVICE_ACCOUNT": str(account_file),
                                "ANDROID_FCM_API_BASE": fcm.url,
                                "HDG_PUSH_POLL_DELAY": delay,
                                "HDG_HEALTH_CHECK_INTERVAL": "1",
                            }
                        ),
                        cwd=REPO,
                    ).start()
                    try:
                        worker.wait_until(lambda: healthy(redis.url), 20)
                        figures = asyncio.run(measure(redis.url, fcm, args.pushes, float(delay)))
                    finally:
                        worker.stop(timeout=10)
                    report["runs"][f"poll_delay_{delay}s"] = figures
                    print(
                        f"poll delay {delay}s: enqueue -> FCM request median {figures['median_ms']} ms, "
                        f"p90 {figures['p90_ms']} ms (min {figures['min_ms']}, max {figures['max_ms']}), "
                        f"enqueue -> result {figures['median_enqueue_to_result_ms']} ms, n={figures['pushes']}"
                    )
        finally:
            redis.stop()
    results.write(
        results.out_path(args.out, "push"),
        run,
        bench="push",
        parameters={"pushes": args.pushes, "poll_delays_s": args.poll_delays.split(",")},
        figures=[
            results.figure(
                "enqueue_to_fcm_request", f["median_ms"], "ms", poll_delay=key, stat="median"
            )
            for key, f in report["runs"].items()
        ],
        detail=report,
    )


if __name__ == "__main__":
    main()

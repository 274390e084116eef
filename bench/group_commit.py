"""Group commit of the outbox: plugin CPU per event, durable events/s, emit→subscriber latency.

A real ``Controller`` (bench.plugin_side, with the stand-in AgentPort) on a real
``redis-server``; N lanes stream at once: every loop turn each lane emits one
``message.delta`` of its message (cumulative, so each replaces the lane's previous delta,
as live streaming does), through ``Controller.emit`` as Hermes' callbacks do. A subscriber
in its own process (an edge's Redis subscription) timestamps every event it gets.

Two paths in the same run, one after the other, each on a fresh outbox:

- ``group``: today's path (``Controller.emit`` queues; one transaction per loop turn on the
  outbox's storage thread; published once committed);
- ``before``: the previous path, one ``Outbox.append_encoded`` transaction per emit on the
  loop, then ``Publisher.ring`` (what ``Controller.emit`` did before group commit).

Figures per path: plugin CPU µs per event (the plugin process' CPU time, all threads,
over the events made durable), durable events/s (events committed over the time until
the last is durable), and emit→subscriber p50/p99 (wall clock, one machine). The emitter
waits for durability every ``--window`` events, so the queue stays bounded.

    .venv/bin/python bench/group_commit.py [--lanes 100] [--events 40000] [--rate 10000]
        [--out bench/results/group-commit.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.host import Json
from bench.plugin_side import running_controllers, tenant_token
from bench.procs import Redis, role_parser, run_loop, serve_stdio, start_role
from bench.results import begin, figure
from bench.stats import summary_ms, write_timed_result

TEXT = "x" * 160  # a ~200 B delta frame with its envelope


async def subscriber_main(redis_url: str) -> None:
    """Counts the events of one tenant and how long each took from its emit."""
    from canonical.redis_bus import RedisBus

    bus = RedisBus(redis_url)
    latencies_us: list[float] = []
    state: Json = {"subscription": None, "count": 0, "expected": None}
    all_in = asyncio.Event()

    def handler(kind: str, _tenant: Any, payload: bytes) -> None:
        if kind != "event":
            return
        event = json.loads(payload)
        sent = event.get("sent")
        if sent is None:
            return
        state["count"] += 1
        latencies_us.append((time.time() - float(sent)) * 1e6)
        if state["expected"] is not None and state["count"] >= state["expected"]:
            all_in.set()

    async def follow(tenant: str) -> Json:
        subscription = bus.subscription(f"bench-sub-{tenant}", handler, lambda: None)
        await subscription.start()
        await subscription.add_tenant(tenant)
        state["subscription"] = subscription
        latencies_us.clear()
        state["count"] = 0
        return {"ok": True}

    async def collect(expected: int, timeout: float = 60.0) -> Json:
        state["expected"] = expected
        if state["count"] < expected:
            try:
                await asyncio.wait_for(all_in.wait(), timeout)
            except TimeoutError:
                pass  # reported as fewer received
        all_in.clear()
        state["expected"] = None
        subscription = state["subscription"]
        if subscription is not None:
            await subscription.close()
            state["subscription"] = None
        return {"received": state["count"], "latency": summary_ms(latencies_us)}

    await serve_stdio({"follow": follow, "collect": collect})
    await bus.close()


def _delta(lane: int, seq: int) -> Json:
    return {
        "type": "message.delta",
        "lane": ["bench", f"t{lane}"],
        "conversation_id": f"bench-{lane}",
        "run_id": f"run-{lane}",
        "message_id": f"draft-run-{lane}",
        "text": f"{TEXT}{seq}",
    }


async def _saturate(controller: Any, emit: Any, options: argparse.Namespace) -> Json:
    """Every lane emits once per loop turn, as fast as the loop goes."""
    lanes, total, window = options.lanes, options.events, options.window
    sent, next_sync = 0, window
    cpu0, wall0 = time.process_time(), time.perf_counter()
    while sent < total:
        for lane in range(lanes):
            emit([{**_delta(lane, sent), "sent": time.time()}])
            sent += 1
            if sent >= total:
                break
        if sent >= next_sync:
            await controller.sequencer.durable()
            next_sync += window
        await asyncio.sleep(0)  # the loop turn a Hermes callback would end with
    await controller.sequencer.durable()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return {
        "events": total,
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 3),
        "cpu_us_per_event": round(cpu / total * 1e6, 1),
        "durable_events_per_s": round(total / wall),
    }


async def _paced(controller: Any, emit: Any, options: argparse.Namespace) -> Json:
    """Every lane emits once per tick, `--rate` events/s in all (live streaming)."""
    lanes, total = options.lanes, options.paced_events
    tick = lanes / options.rate
    sent = 0
    cpu0, start = time.process_time(), time.perf_counter()
    while sent < total:
        for lane in range(lanes):
            emit([{**_delta(lane, sent), "sent": time.time()}])
            sent += 1
        next_tick = start + (sent // lanes) * tick
        await asyncio.sleep(max(0.0, next_tick - time.perf_counter()))
    await controller.sequencer.durable()
    cpu = time.process_time() - cpu0
    return {"events": sent, "rate": options.rate, "cpu_us_per_event": round(cpu / sent * 1e6, 1)}


async def one_path(redis: Redis, sub: Any, path: str, options: argparse.Namespace) -> Json:
    result: Json = {"path": path, "lanes": options.lanes}
    for phase in ("saturated", "paced"):
        tenant, token = tenant_token(0, f"{path}{phase}{int(time.time())}")
        async with running_controllers(redis.url, [(tenant, token)]) as (controller,):
            await sub.call("follow", tenant=tenant)
            await asyncio.sleep(0.2)  # the subscription in place

            def emit_before(events: list[Json], controller: Any = controller) -> None:
                stored = controller.outbox.append_encoded(events)
                controller.publisher.ring(
                    [e for e, _ in stored], [body.encode() for _, body in stored]
                )

            emit = controller.emit if path == "group" else emit_before
            run = _saturate if phase == "saturated" else _paced
            figures = await run(controller, emit, options)
            figures["transactions"] = (
                controller.sequencer.batches_committed if path == "group" else figures["events"]
            )
            got = await sub.call("collect", expected=figures["events"])
            figures["received"] = got["received"]
            figures["emit_to_subscriber"] = got["latency"]
        result[phase] = figures
        latency = figures["emit_to_subscriber"]
        print(
            f"{path} {phase}: {figures['cpu_us_per_event']} µs CPU/event, "
            f"{figures.get('durable_events_per_s', '-')} durable events/s, "
            f"{figures['transactions']} transactions, emit→subscriber p50 "
            f"{latency.get('p50_ms')} ms p99 {latency.get('p99_ms')} ms "
            f"({figures['received']}/{figures['events']} received)",
            flush=True,
        )
    return result


async def orchestrate(options: argparse.Namespace) -> None:
    run = begin()
    redis = Redis().start()
    sub = await start_role(__file__, "subscriber", "--redis", redis.url)
    out: Json = {}
    try:
        for path in ("before", "group"):
            out[path] = await one_path(redis, sub, path, options)
    finally:
        await sub.stop()
        redis.cleanup()
    data = {
        "benchmark": "group-commit",
        "method": {
            "plugin": "real Controller (bench.plugin_side, stand-in AgentPort) in this process, "
            "real redis-server; a subscriber process (RedisBus subscription) timestamps events",
            "load": f"{options.lanes} lanes, each emitting one message.delta per loop turn "
            f"(coalescing its previous delta). saturated: {options.events} events as fast as "
            f"the loop goes, durability awaited every {options.window} events (CPU, events/s); "
            f"paced: {options.paced_events} events at {options.rate}/s in all (latency)",
            "cpu": "time.process_time() of the plugin process (all its threads) / events",
            "latency": "wall clock from emit to the subscriber's receipt",
            "before": "one Outbox.append_encoded transaction per emit on the loop, then "
            "Publisher.ring (the path before group commit)",
        },
        **out,
    }
    figures = []
    for path in ("before", "group"):
        saturated, paced = (
            out.get(path, {}).get("saturated", {}),
            out.get(path, {}).get("paced", {}),
        )
        figures += [
            figure("plugin_cpu_per_event", saturated.get("cpu_us_per_event"), "µs", path=path),
            figure(
                "durable_events_per_s", saturated.get("durable_events_per_s"), "events/s", path=path
            ),
            figure("plugin_cpu_per_event_paced", paced.get("cpu_us_per_event"), "µs", path=path),
        ]
        for phase, record in (("saturated", saturated), ("paced", paced)):
            latency = record.get("emit_to_subscriber", {})
            for pct in (50, 99):
                figure_name = f"emit_to_subscriber_p{pct}"
                figures.append(
                    figure(figure_name, latency.get(f"p{pct}_ms"), "ms", path=path, load=phase)
                )
    write_timed_result(options.out, options.name or "group-commit", data, run, figures)


def main() -> None:
    parser = role_parser(__doc__, "subscriber")
    parser.add_argument("--lanes", type=int, default=100)
    parser.add_argument("--events", type=int, default=40_000)
    parser.add_argument("--window", type=int, default=2_000)
    parser.add_argument("--paced-events", type=int, default=20_000)
    parser.add_argument("--rate", type=int, default=10_000, help="paced: events/s in all")
    parser.add_argument("--name", default=None)
    parser.add_argument("--out", default=None, help="result file (bench/results/<name>.json)")
    parser.add_argument("--redis")
    options = parser.parse_args()
    if options.role == "subscriber":
        run_loop(lambda: subscriber_main(options.redis))
    else:
        asyncio.run(orchestrate(options))


if __name__ == "__main__":
    main()

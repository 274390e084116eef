"""Replay benchmark: how fast a device that missed events is caught up on reconnect.

    .venv/bin/python bench/replay.py [--missed 1000] [--rounds 5] [--storm 1000]
                                     [--storm-missed 50] [--quick]

1. One device connects fresh (``hello`` without a cursor: ``hello.ack.sync_cursor`` is the
   head), disconnects, misses ``--missed`` events, reconnects with its cursor: the time
   from sending ``hello`` to receiving the last replayed event (every cursor checked: all
   of them, once, in order).
2. Reconnect storm: ``--storm`` devices connect fresh, all disconnect, miss
   ``--storm-missed`` events, then all reconnect at once (bounded concurrency): per device
   the time from opening its socket to its last replayed event; p50/p99/max, how many were
   fully replayed, and the window the storm took.

The replay is answered by the plugin side as in production: the edge turns the cursor in
``hello`` into a command; ``gateway_plugin.commands.runs.cmd_hello`` / ``_replay`` read the
outbox and send the events back as a direct reply. The plugin is a real ``Controller``
with a stand-in AgentPort (``bench.common.BenchAgent``: ``wait_ready`` returns at once,
no cron jobs) — Hermes is not part of what is measured. Two edges (CPU 0) on a private
redis-server (CPU 0); plugin and clients on CPU 1.

Writes ``--out`` (else bench/results/local/replay[-quick].json), a result file of
``bench.results``.
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

from bench.host import CPU_CLIENT, CPU_SERVER, CpuMeter, Json, raise_nofile
from bench.lean_ws import bounded_gather, iris_hello, lean_connect
from bench.peers.workload import pad_for, stamp
from bench.plugin_side import delta_event, running_controllers, tenant_token
from bench.procs import Edge, Redis, role_parser, run_loop, serve_stdio, start_edges, start_role
from bench.results import begin, figure
from bench.stats import result_name, summary_ms, write_timed_result

# =========================================================================== roles


class Device:
    __slots__ = (
        "ack",
        "count",
        "done",
        "from_cursor",
        "last",
        "order_ok",
        "proto",
        "sync_cursor",
        "target",
    )

    def __init__(self) -> None:
        self.proto: Any = None
        self.ack: asyncio.Future[None] | None = None
        self.done: asyncio.Future[None] | None = None
        self.sync_cursor = 0
        self.from_cursor: int | None = None
        self.last = 0
        self.count = 0
        self.target = 0
        self.order_ok = True


class Replayer:
    def __init__(self) -> None:
        self.devices: list[Device] = []

    def on_text(self, proto: Any, payload: bytes, now: int) -> None:
        dev: Device = self.devices[proto.tag]
        p = payload.find(b'"cursor":')
        if p >= 0:
            c0 = p + 9
            cursor = int(payload[c0 : payload.find(b",", c0)])
            if dev.last and cursor != dev.last + 1:
                dev.order_ok = False
            dev.last = cursor
            dev.count += 1
            if cursor >= dev.target and dev.done is not None and not dev.done.done():
                dev.done.set_result(None)
            return
        if b"hello.ack" in payload and dev.ack is not None and not dev.ack.done():
            if dev.from_cursor is None:  # fresh: starts at the head
                dev.sync_cursor = int(json.loads(payload).get("sync_cursor") or 0)
            dev.ack.set_result(None)

    async def _hello(
        self, d: int, url: str, token: str, cursor: int | None, target: int
    ) -> tuple[float, float]:
        """(seconds from socket open to the target cursor, from hello to the target)."""
        loop = asyncio.get_running_loop()
        dev = self.devices[d]
        dev.ack = loop.create_future()
        dev.done = loop.create_future() if cursor is not None else None
        dev.from_cursor = cursor
        dev.last = cursor or 0
        dev.count = 0
        dev.order_ok = True
        dev.target = target
        t0 = time.monotonic()
        dev.proto = await lean_connect(url, self.on_text, tag=d)
        hello = iris_hello(token, f"replay{d:05d}")
        if cursor is not None:
            hello["cursor"] = cursor
        t1 = time.monotonic()
        dev.proto.send_text(json.dumps(hello))
        await asyncio.wait_for(dev.ack, 60)
        if dev.done is not None and target > cursor:  # type: ignore[operator]
            await asyncio.wait_for(dev.done, 60)
        t2 = time.monotonic()
        return t2 - t0, t2 - t1

    async def fresh(self, urls: list[str], token: str, n: int, concurrency: int) -> Json:
        """Connect n fresh devices, remember their sync cursors, disconnect them."""
        self.devices = [Device() for _ in range(n)]
        results = await bounded_gather(
            [lambda d=d: self._hello(d, urls[d % len(urls)], token, None, 0) for d in range(n)],
            concurrency,
            time.monotonic() + 120,
        )
        errors = [repr(r) for r in results if isinstance(r, BaseException)]
        cursors = [dev.sync_cursor for dev in self.devices]
        for dev in self.devices:
            dev.proto.close()
        await asyncio.sleep(1.0)
        return {"errors": errors[:3], "cursors": sorted(set(cursors))}

    async def reconnect(self, urls: list[str], token: str, target: int, concurrency: int) -> Json:
        """Every device reconnects with its cursor and waits for `target`."""
        n = len(self.devices)
        started = time.monotonic()
        results = await bounded_gather(
            [
                lambda d=d: self._hello(
                    d, urls[d % len(urls)], token, self.devices[d].sync_cursor, target
                )
                for d in range(n)
            ],
            concurrency,
            started + 120,
        )
        window = time.monotonic() - started
        ok = [r for r in results if isinstance(r, tuple)]
        errors = [repr(r) for r in results if isinstance(r, BaseException)]
        complete = sum(
            1
            for dev in self.devices
            if dev.last == target and dev.order_ok and dev.count == target - (dev.from_cursor or 0)
        )
        out = {
            "devices": n,
            "complete": complete,
            "errors": len(errors),
            "first_errors": errors[:3],
            "window_s": round(window, 3),
            "open_to_last_event": summary_ms([r[0] * 1e6 for r in ok]),
            "hello_to_last_event": summary_ms([r[1] * 1e6 for r in ok]),
            "replayed_per_device": sorted({dev.count for dev in self.devices})[:5],
        }
        for dev in self.devices:
            dev.proto.close()
            dev.sync_cursor = dev.last
        await asyncio.sleep(1.0)
        return out


async def client_main() -> None:
    raise_nofile()
    replayer = Replayer()
    await serve_stdio({"fresh": replayer.fresh, "reconnect": replayer.reconnect})


async def plugin_main(redis_url: str) -> None:
    pair = tenant_token(0, "replay")
    counter = {"i": 0}
    async with running_controllers(redis_url, [pair]) as (controller,):

        async def info() -> Json:
            return {"token": pair[1], "head": controller.outbox.head()}

        async def emit(count: int, size: int = 200) -> Json:
            pad = pad_for(size)
            for _ in range(count):
                counter["i"] += 1
                event = delta_event(f"m-{counter['i']:07d}", stamp(pad))
                controller.emit([event])
                if counter["i"] % 200 == 0:
                    await asyncio.sleep(0)  # let the publisher task drain (nobody listens)
            await controller.sequencer.durable()
            return {"head": controller.outbox.head()}

        await serve_stdio({"info": info, "emit": emit})


# =========================================================================== orchestration


async def orchestrate(options: argparse.Namespace) -> None:
    raise_nofile()
    run = begin()
    out: Json = {}
    redis = Redis().start()
    edges: list[Edge] = []
    plugin = client = None
    try:
        edges = start_edges(redis.url, 2)
        urls = [e.ws_url for e in edges]
        plugin = await start_role(__file__, "plugin", "--redis", redis.url)
        token = (await plugin.call("info", rpc_timeout=120))["token"]
        client = await start_role(__file__, "client")
        groups = {
            "edges": [e.pid for e in edges],
            "redis": [redis.pid],
            "plugin": [plugin.pid],
            "client": [client.pid],
        }

        # 1. One device, `missed` events, `rounds` times.
        rounds: list[Json] = []
        await client.call("fresh", urls=urls, token=token, n=1, concurrency=1)
        for _ in range(options.rounds):
            head = (await plugin.call("emit", count=options.missed))["head"]
            meter = CpuMeter(groups)
            meter.start()
            got = await client.call(
                "reconnect", rpc_timeout=120, urls=urls, token=token, target=head, concurrency=1
            )
            got["cpu"] = meter.stop()
            rounds.append(got)
            print(
                f"single: {options.missed} missed -> last event after "
                f"{got['hello_to_last_event'].get('p50_ms')} ms (complete {got['complete']}/1)",
                flush=True,
            )
        times = sorted(r["hello_to_last_event"].get("p50_ms", float("inf")) for r in rounds)
        out["single"] = {
            "missed": options.missed,
            "rounds": rounds,
            "hello_to_last_event_ms": {
                "min": times[0],
                "median": times[len(times) // 2],
                "max": times[-1],
            },
            "all_complete": all(r["complete"] == 1 for r in rounds),
        }

        # 2. The storm.
        fresh = await client.call(
            "fresh", rpc_timeout=300, urls=urls, token=token, n=options.storm, concurrency=100
        )
        if fresh["errors"]:
            print(f"storm: fresh connects failed: {fresh['errors']}", flush=True)
        head = (await plugin.call("emit", count=options.storm_missed))["head"]
        meter = CpuMeter(groups)
        meter.start()
        storm = await client.call(
            "reconnect",
            rpc_timeout=300,
            urls=urls,
            token=token,
            target=head,
            concurrency=options.concurrency,
        )
        storm["cpu"] = meter.stop()
        storm["missed"] = options.storm_missed
        storm["concurrency"] = options.concurrency
        out["storm"] = storm
        print(
            f"storm: {storm['complete']}/{storm['devices']} fully replayed in "
            f"{storm['window_s']} s; open→last event p50 "
            f"{storm['open_to_last_event'].get('p50_ms')} ms, p99 "
            f"{storm['open_to_last_event'].get('p99_ms')} ms",
            flush=True,
        )
    finally:
        if client is not None:
            await client.stop()
        if plugin is not None:
            await plugin.stop()
        for edge in edges:
            edge.stop()
        redis.cleanup()
    data = {
        "benchmark": "replay",
        "method": {
            "plugin": "real Controller + gateway_plugin.commands.runs (cmd_hello/_replay) with a "
            "stand-in AgentPort (bench.common.BenchAgent: wait_ready returns at once, no cron "
            "jobs); Hermes itself is not measured here",
            "events": "message.delta of distinct messages, ~200 B frames",
            "edges": 2,
            "placement": f"edges + redis on CPU {CPU_SERVER}; plugin + clients on CPU {CPU_CLIENT}",
        },
        **out,
    }
    write_timed_result(options.out, options.name, data, run, replay_figures(out))


def replay_figures(out: Json) -> list[Json]:
    single = out.get("single", {})
    storm = out.get("storm", {})
    return [
        figure(
            "hello_to_last_replayed_event",
            single.get("hello_to_last_event_ms", {}).get("median"),
            "ms",
            missed=single.get("missed"),
            stat="median of rounds",
        ),
        figure("storm_window", storm.get("window_s"), "s", devices=storm.get("devices")),
        figure(
            "storm_open_to_last_event",
            storm.get("open_to_last_event", {}).get("p99_ms"),
            "ms",
            devices=storm.get("devices"),
            percentile=99,
        ),
    ]


def main() -> None:
    parser = role_parser(__doc__, "client", "plugin")
    parser.add_argument("--missed", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--storm", type=int, default=1000)
    parser.add_argument("--storm-missed", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--name", default=None)
    parser.add_argument("--out", default=None, help="result file (bench/results/<name>.json)")
    parser.add_argument("--redis")
    options = parser.parse_args()
    if options.role == "client":
        run_loop(client_main)
    elif options.role == "plugin":
        run_loop(lambda: plugin_main(options.redis))
    else:
        if options.quick:
            options.rounds = min(options.rounds, 3)
        options.name = result_name(options.name, options.quick, "replay")
        asyncio.run(orchestrate(options))


if __name__ == "__main__":
    main()

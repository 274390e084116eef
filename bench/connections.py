"""Connections benchmark: idle devices per edge process, memory per connection, and the
connection set-up rate including the ``hello`` auth.

    .venv/bin/python bench/connections.py [--levels 1000,5000,10000] [--concurrency 200]
                                          [--no-raw] [--no-floor] [--stock] [--quick]

One ``python -m edge`` (CPU 0) on a private redis-server (CPU 0); the plugin side is a real
``Controller`` with the stand-in AgentPort (CPU 1), so an iris ``hello`` is answered by the
plugin exactly as in production (token → tenant, hello command on the stream, device
record, ``hello.ack`` as a direct reply). Devices are lean raw WebSocket clients in one
process (CPU 1): C (``bench/lean_client.c``) unless ``--client python``. Levels are reached cumulatively (1,000, then 4,000 more, ...): the set-up
rate of each batch is devices / (first connect → last ``hello.ack``); memory per connection
is the edge's RSS delta / devices. A pheby hello (answered by the edge alone), the raw
``websockets`` server and the uvicorn floor (the edge's own uvicorn options serving a bare
ASGI app that answers any first frame: what the required server stack costs before any
code of ours) are measured the same way, so what our code adds per set-up and per idle
connection is the difference. ``--stock``: the iris set-ups again with the edge and the
plugin on the stock path (``ANDROID_FASTPATH=off``), as ``iris-stock``. ``--quick``: 1,000
and 5,000 devices unless ``--levels``, and 0.5 s settles instead of 2 s (RSS) and 3 s (idle).

Writes ``--out`` (else bench/results/local/connections[-quick].json), a result file of
``bench.results``: set-ups/s and idle KiB per connection, per server and level.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import redis as redis_sync

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.host import (
    CPU_CLIENT,
    CPU_SERVER,
    LOOPBACK,
    REPO,
    STOCK_ENV,
    CpuMeter,
    Json,
    process_tree,
    raise_nofile,
    rss_bytes,
    stock_switch_present,
    uses_uvloop,
)
from bench.lean_native import native_client
from bench.lean_ws import bounded_gather, iris_hello, lean_connect
from bench.plugin_side import running_controllers, tenant_token
from bench.procs import (
    Child,
    Edge,
    Redis,
    role_parser,
    run_loop,
    serve_stdio,
    start_peer,
    start_py_spy,
    start_role,
)
from bench.results import begin, figure
from bench.stats import result_name, summary_ms, write_timed_result

PROFILE = False
# The devices: "c" (bench/lean_client.c, the default: they leave the cores they share to
# the servers being measured) or "python" (bench/lean_ws.py, about three times the CPU per
# set-up on the same cores, so its rates are lower).
CLIENT = "c"
NATIVE: Path | None = None
SETTLE_S = 2.0  # before each RSS reading
IDLE_S = 3.0  # the idle CPU measured after each level

# =========================================================================== client role


class Fleet:
    def __init__(self) -> None:
        self.protos: list[Any] = []
        self.acked: dict[int, asyncio.Future[None]] = {}

    def on_text(self, proto: Any, payload: bytes, now: int) -> None:
        fut = self.acked.get(proto.tag)
        if fut is None or fut.done():
            return
        if b"hello.ack" in payload or b'"ready"' in payload:
            fut.set_result(None)
        elif b"error" in payload:
            fut.set_exception(ConnectionError(payload[:200].decode(errors="replace")))

    async def connect(
        self, url: str, n: int, dialect: str, token: str, concurrency: int, timeout: float
    ) -> Json:
        loop = asyncio.get_running_loop()
        base = len(self.protos)
        setup_us: list[float] = []

        async def one(d: int) -> None:
            self.acked[d] = loop.create_future()
            t0 = time.monotonic_ns()
            proto = await lean_connect(url, self.on_text, tag=d)
            self.protos.append(proto)
            if dialect == "iris":
                hello = iris_hello(token, f"idle{d:05d}")
            elif dialect == "pheby":
                hello = {"type": "hello", "secret": token, "protocol_version": 1}
            else:
                hello = {"room": "t0"}
            proto.send_text(json.dumps(hello))
            async with asyncio.timeout(30):  # not wait_for: no task per device
                await self.acked[d]
            setup_us.append((time.monotonic_ns() - t0) / 1000)
            del self.acked[d]

        t0 = time.monotonic()
        results = await bounded_gather(
            [lambda d=d: one(d) for d in range(base, base + n)], concurrency, t0 + timeout
        )
        elapsed = time.monotonic() - t0
        errors = [repr(r) for r in results if isinstance(r, BaseException)]
        return {
            "connected": n - len(errors),
            "errors": len(errors),
            "first_errors": errors[:3],
            "elapsed_s": round(elapsed, 3),
            "per_s": round((n - len(errors)) / elapsed, 1),
            "setup_latency": summary_ms(setup_us),
            "open": sum(1 for p in self.protos if not p.closed.done()),
        }

    async def count(self) -> Json:
        return {"open": sum(1 for p in self.protos if not p.closed.done())}

    async def close(self) -> Json:
        for proto in self.protos:
            proto.close()
        await asyncio.sleep(1.0)
        self.protos = []
        return {"ok": True}


async def start_client() -> Child:
    if CLIENT == "c":
        assert NATIVE is not None
        return await Child("client", [str(NATIVE)], cpu=CPU_CLIENT).start()
    return await start_role(__file__, "client")


async def client_main() -> None:
    if os.environ.get("BENCH_CPROFILE_DIR"):  # the bench's own devices, for what they cost
        from bench.cprofile_edge import start_dumping

        start_dumping("client")
    raise_nofile()
    fleet = Fleet()
    await serve_stdio({"connect": fleet.connect, "count": fleet.count, "close": fleet.close})


async def plugin_main(redis_url: str) -> None:
    if os.environ.get("BENCH_CPROFILE_DIR"):  # the plugin's side of every iris hello
        from bench.cprofile_edge import start_dumping

        start_dumping("plugin")
    pair = tenant_token(0, "conn")
    async with running_controllers(redis_url, [pair]):

        async def info() -> Json:
            return {"token": pair[1]}

        await serve_stdio({"info": info})


# =========================================================================== orchestration


def command_calls(redis_url: str) -> dict[str, tuple[int, int]]:
    """Redis' per-command counters (INFO commandstats): (calls, µs spent), to count commands
    and Redis' own time per set-up."""
    client = redis_sync.Redis.from_url(redis_url)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return {
        name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
        for name, v in stats.items()
    }


async def settle_rss(pids: list[int]) -> int:
    await asyncio.sleep(SETTLE_S)
    return sum(rss_bytes(pid) for pid in pids)


async def measure_levels(
    label: str,
    server_pids: list[int],
    url: str,
    dialect: str,
    token: str,
    levels: list[int],
    concurrency: int,
    extra_pids: dict[str, list[int]],
    redis_url: str | None = None,
) -> Json:
    client = await start_client()
    out: Json = {"label": label, "dialect": dialect, "client": CLIENT, "levels": []}
    try:
        # Warm up (imports, first allocations), then the baseline.
        await client.call(
            "connect", url=url, n=20, dialect=dialect, token=token, concurrency=20, timeout=30
        )
        await client.call("close")
        base_rss = await settle_rss(server_pids)
        out["baseline_rss_mib"] = round(base_rss / 2**20, 1)
        have = 0
        for level in levels:
            spy = None
            if PROFILE:
                spy = await start_py_spy(  # one worker, when there are several
                    server_pids[-1],
                    4,
                    REPO / f"bench/results/profile-connections-{label}-{level}.txt",
                )
            meter = CpuMeter({"server": server_pids, "client": [client.pid], **extra_pids})
            calls_before = command_calls(redis_url) if redis_url else {}
            meter.start()
            got = await client.call(
                "connect",
                rpc_timeout=400,
                url=url,
                n=level - have,
                dialect=dialect,
                token=token,
                concurrency=concurrency,
                timeout=300,
            )
            cpu = meter.stop()
            calls = command_calls(redis_url) if redis_url else {}
            if spy is not None:
                await asyncio.wait_for(spy.wait(), 60)
            have += got["connected"]
            rss = await settle_rss(server_pids)
            idle = CpuMeter({"server": server_pids, **extra_pids})
            idle.start()
            await asyncio.sleep(IDLE_S)
            idle_cpu = idle.stop()
            still = await client.call("count")
            row = {
                "devices": have,
                "batch": level - (have - got["connected"]),
                "batch_connected": got["connected"],
                "batch_errors": got["errors"],
                "first_errors": got["first_errors"],
                "setup_per_s": got["per_s"],
                "setup_latency": got["setup_latency"],
                "setup_cpu": cpu,
                "server_cpu_us_per_setup": round(
                    cpu["server_cpu_s"] / max(1, got["connected"]) * 1e6, 1
                ),
                "redis_calls_per_setup": {
                    name: round(
                        (n - calls_before.get(name, (0, 0))[0]) / max(1, got["connected"]), 2
                    )
                    for name, (n, _) in sorted(calls.items())
                    if n > calls_before.get(name, (0, 0))[0]
                },
                "redis_command_us_per_setup": {
                    name: round(
                        (us - calls_before.get(name, (0, 0))[1]) / max(1, got["connected"]), 2
                    )
                    for name, (n, us) in sorted(calls.items())
                    if n > calls_before.get(name, (0, 0))[0]
                },
                "rss_mib": round(rss / 2**20, 1),
                "kib_per_connection": round((rss - base_rss) / max(1, have) / 1024, 2),
                "idle_s": IDLE_S,
                "idle_cpu": idle_cpu,
                "open_after_idle": still["open"],
            }
            out["levels"].append(row)
            print(
                f"{label:10} {have:>6} devices: {got['per_s']:>7}/s setup "
                f"(p99 {got['setup_latency'].get('p99_ms')} ms, errors {got['errors']}), "
                f"{row['kib_per_connection']} KiB/conn, rss {row['rss_mib']} MiB, "
                f"open {still['open']}",
                flush=True,
            )
            if got["connected"] < level - (have - got["connected"]) or still["open"] < have:
                break
    finally:
        await client.call("close", rpc_timeout=60)
        await client.stop()
    return out


async def measure_ours(options: argparse.Namespace, levels: list[int], stock: bool) -> list[Json]:
    """Our edge and plugin on a private redis-server: iris (and, on the fast path, pheby)
    set-ups. ``stock``: both with ``STOCK_ENV``, measured as ``iris-stock``."""
    env = STOCK_ENV if stock else None
    runs: list[Json] = []
    redis = Redis(CPU_CLIENT if options.redis_with_clients else CPU_SERVER).start()
    try:
        edge = Edge(redis.url, extra_env=env, workers=options.edge_workers).wait()
        plugin = await start_role(__file__, "plugin", "--redis", redis.url, env=env)
        try:
            token = (await plugin.call("info", rpc_timeout=120))["token"]
            extra = {"redis": [redis.pid], "plugin": [plugin.pid]}
            if options.iris:
                runs.append(
                    await measure_levels(
                        "iris-stock" if stock else "iris",
                        edge.pids,
                        edge.ws_url,
                        "iris",
                        token,
                        levels,
                        options.concurrency,
                        extra,
                        redis.url,
                    )
                )
                runs[-1]["uvloop"] = uses_uvloop(edge.pids[-1])
            if options.pheby and not stock:
                edge.stop()
                edge = Edge(redis.url, workers=options.edge_workers).wait()
                runs.append(
                    await measure_levels(
                        "pheby",
                        edge.pids,
                        edge.ws_url,
                        "pheby",
                        token,
                        levels[:1] + levels[-1:] if len(levels) > 1 else levels,
                        options.concurrency,
                        {"redis": [redis.pid]},
                        redis.url,
                    )
                )
        finally:
            await plugin.stop()
            edge.stop()
    finally:
        redis.cleanup()
    return runs


async def orchestrate(options: argparse.Namespace) -> None:
    raise_nofile()
    levels = [int(x) for x in options.levels.split(",")]
    run = begin()
    runs = await measure_ours(options, levels, stock=False)
    if options.stock and options.iris:
        runs += await measure_ours(options, levels, stock=True)
    peers = [("raw", "raw_ws.py")] if options.raw else []
    if options.floor:
        peers.append(("uvicorn-floor", "uvicorn_floor.py"))
    for label, script in peers:
        workers = options.edge_workers if label == "uvicorn-floor" else 1
        port, proc = start_peer(
            label,
            script,
            *(["--workers", str(workers)] if workers > 1 else []),
            cpu=CPU_SERVER if workers == 1 else None,
            # uvicorn's manager, its workers and multiprocessing's resource tracker
            processes=workers + 2 if workers > 1 else 1,
        )
        try:
            runs.append(
                await measure_levels(
                    label,
                    process_tree(proc.pid),
                    f"ws://{LOOPBACK}:{port}/",
                    "raw",
                    "",
                    levels,
                    options.concurrency,
                    {},
                )
            )
        finally:
            proc.stop()
    data = {
        "benchmark": "connections",
        "method": {
            "levels": levels,
            "edge_workers": options.edge_workers,
            "concurrency": options.concurrency,
            "setup": "TCP connect + WebSocket upgrade + hello → hello.ack (iris: answered by "
            "the plugin's Controller; pheby: 'ready' from the edge; raw, uvicorn-floor: the "
            "peer's ack)",
            "memory": f"(edge RSS after the level, {SETTLE_S:g} s settle) − (RSS after a "
            "20-device warm-up closed) / devices",
            "plugin": "real Controller with a stand-in AgentPort (bench.common.BenchAgent)",
            "stock": f"iris-stock: the edge and the plugin with {STOCK_ENV}",
            # False: the code measured has no such switch, so iris-stock ran the fast path.
            "stock_switch_present": stock_switch_present(),
            "placement": (
                f"edge on CPU {CPU_SERVER}; redis, plugin + clients on CPU {CPU_CLIENT}"
                if options.redis_with_clients
                else f"edge + redis on CPU {CPU_SERVER}; plugin + clients on CPU {CPU_CLIENT}"
            ),
        },
        "runs": runs,
    }
    write_timed_result(
        options.out, options.name, data, run, connection_figures(runs, options.edge_workers)
    )


def connection_figures(runs: list[Json], edge_workers: int) -> list[Json]:
    """Per server and level: set-ups/s of that batch and idle memory per connection."""
    out: list[Json] = []
    for r in runs:
        for row in r["levels"]:
            processes = 1 if r["label"] == "raw" else edge_workers  # raw: one process always
            labels = {"server": r["label"], "devices": row["devices"], "processes": processes}
            out.append(figure("setup_rate", row["setup_per_s"], "set-ups/s", **labels))
            out.append(
                figure("idle_memory_per_connection", row["kib_per_connection"], "KiB", **labels)
            )
    return out


def main() -> None:
    parser = role_parser(__doc__, "client", "plugin")
    parser.add_argument("--levels", default=None)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--no-raw", dest="raw", action="store_false")
    parser.add_argument(
        "--no-floor",
        dest="floor",
        action="store_false",
        help="skip the uvicorn floor (bench/peers/uvicorn_floor.py: the edge's uvicorn "
        "options serving a bare ASGI app)",
    )
    parser.add_argument("--no-pheby", dest="pheby", action="store_false")
    parser.add_argument("--no-iris", dest="iris", action="store_false")
    parser.add_argument(
        "--stock",
        action="store_true",
        help="the iris set-ups again with ANDROID_FASTPATH=off in the edge's and the plugin's "
        "environment (the stock path), as server iris-stock",
    )
    parser.add_argument(
        "--redis-with-clients",
        action="store_true",
        help=f"pin redis-server to CPU {CPU_CLIENT} (clients, plugin) so the edge has CPU "
        f"{CPU_SERVER} to itself, as the raw peer does",
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--name", default=None)
    parser.add_argument("--out", default=None, help="result file (bench/results/<name>.json)")
    parser.add_argument("--redis")
    parser.add_argument("--profile", action="store_true", help="py-spy the edge at each level")
    parser.add_argument(
        "--client",
        choices=["c", "python"],
        default="c",
        help="the devices: bench/lean_client.c (default; built with cc on first use, "
        "the Python devices if there is no compiler) or bench/lean_ws.py",
    )
    parser.add_argument(
        "--edge-workers",
        type=int,
        default=1,
        help="ANDROID_EDGE_WORKERS for the edge, and as many uvicorn-floor processes on one "
        "socket (unpinned: they get every core)",
    )
    options = parser.parse_args()
    global PROFILE, CLIENT, NATIVE, SETTLE_S, IDLE_S
    PROFILE = options.profile
    if options.quick:
        SETTLE_S, IDLE_S = 0.5, 0.5
    CLIENT = options.client
    if CLIENT == "c" and options.role == "orchestrate":
        NATIVE = native_client()
        if NATIVE is None:
            print("bench: no C compiler: the Python devices (bench/lean_ws.py) instead", flush=True)
            CLIENT = "python"
    if options.role == "client":
        run_loop(client_main)
    elif options.role == "plugin":
        run_loop(lambda: plugin_main(options.redis))
    else:
        options.levels = options.levels or ("1000,5000" if options.quick else "1000,5000,10000")
        options.name = result_name(options.name, options.quick, "connections")
        asyncio.run(orchestrate(options))


if __name__ == "__main__":
    main()

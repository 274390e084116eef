"""Fan-out benchmark: the highest delivery rate each system sustains with p99
publish-to-receipt latency <= 50 ms and zero missing frames.

    .venv/bin/python bench/fanout.py [--quick] [--systems ours,raw,sio] [--ns 10,100,1000]
                                     [--sizes 200,2000] [--step-s 2] [--no-tenants]

Systems, same workload, same machine, same client:
- ``ours``: 2 ``python -m edge`` processes on a private redis-server; the producer is a real
  ``gateway_plugin.controller.Controller`` (``emit``: the events of a loop turn appended
  in one outbox transaction, then published by its publisher), with a stand-in AgentPort
  (``common.BenchAgent``) so devices authenticate with a real iris ``hello`` (token →
  tenant via ``bus.register_tenant``) and get their ``hello.ack`` from the plugin.
- ``raw``: one ``websockets`` 15.0.1 server process calling ``websockets.broadcast``
  (``bench/peers/raw_ws.py``); it produces the events itself.
- ``ours-stock``: ``ours`` with ``ANDROID_FASTPATH=off`` in the edges' environment (the
  stock uvicorn/websockets path), so the fast path's gain is measured in the same run.
- ``sio``: 2 python-socketio processes with ``AsyncRedisManager`` on the same redis-server
  kind, one room per user; the producer is an ``AsyncRedisManager(write_only=True)``.

Devices are split across the 2 server processes by index (device i → server i % 2). Every
event is a ``message.update`` of its own message (distinct ids: nothing may coalesce), so
"zero missing" is exact: every device must receive every cursor of its tenant's range.
Latency is CLOCK_MONOTONIC at the producer (before the outbox append, for ``ours``) to
the client's read of the socket.

Writes ``--out`` (else bench/results/local/fanout[-quick].json), a result file of
``bench.results``: the highest sustained rate per system and case, ours against each peer,
and latency percentiles at ``--latency-load`` deliveries/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.fanout_roles import client_main, producer_ours_main, producer_sio_main
from bench.fanout_system import (
    P99_LIMIT_MS,
    SCRIPT,
    System,
    connect_devices,
    run_step,
    run_system,
    us_per_delivery,
)
from bench.fanout_table import compact, fanout_figures, ratios, top_frames
from bench.host import (
    CPU_CLIENT,
    CPU_SERVER,
    REPO,
    STOCK_ENV,
    Json,
    raise_nofile,
    stock_switch_present,
)
from bench.procs import role_parser, run_loop, start_py_spy, start_role
from bench.results import begin
from bench.stats import result_name, write_timed_result

LADDER = [
    5_000,
    10_000,
    20_000,
    30_000,
    40_000,
    50_000,
    60_000,
    70_000,
    80_000,
    100_000,
    120_000,
    140_000,
    170_000,
    200_000,
    250_000,
]  # deliveries/s


async def profile(options: argparse.Namespace) -> None:
    """One long step of `ours` with py-spy recording edge 0 and the producer."""
    raise_nofile()
    n = int(options.ns.split(",")[0])
    size = int(options.sizes.split(",")[0])
    tenants = options.tenant_count  # e.g. --tenants 500 --ns 1000: 500 users x 2 devices
    system = await System("ours", tenants).start()
    client = await start_role(SCRIPT, "client")
    out: Json = {}
    try:
        await connect_devices(system, client, n, n // tenants)
        await asyncio.sleep(0.5)
        targets = {"edge": system.server_pids[0], "producer": system.producer.pid}
        files = {k: REPO / "bench/results" / f"profile-{options.name}-{k}.txt" for k in targets}
        spies = [
            await start_py_spy(pid, int(options.step_s), files[k]) for k, pid in targets.items()
        ]
        _, got, cpu = await run_step(
            system, client, options.profile / (n / tenants), options.step_s, size, drain_s=3.0
        )
        for spy_proc in spies:
            await asyncio.wait_for(spy_proc.wait(), 60)
        out = {
            "rate": options.profile,
            "n": n,
            "tenants": tenants,
            "size": size,
            "client": got,
            "cpu": cpu,
            "server_cpu_us_per_delivery": us_per_delivery(cpu["server_cpu_s"], got["delivered"]),
        }
        print(json.dumps(out, indent=1))
        for k, path in files.items():
            if path.exists():
                print(f"--- {k}: self% total%")
                for frame, mine, whole in top_frames(path):
                    print(f"{mine:6.1f} {whole:6.1f}  {frame}")
    finally:
        await client.stop()
        await system.stop()


def paired(systems: list[str]) -> list[list[str]]:
    """The systems in run order; ours and ours-stock together, sharing one producer."""
    groups: list[list[str]] = []
    for name in systems:
        if name == "ours-stock" and "ours" in systems:
            continue
        groups.append(
            ["ours", "ours-stock"] if name == "ours" and "ours-stock" in systems else [name]
        )
    return groups


async def orchestrate(options: argparse.Namespace) -> None:
    raise_nofile()
    systems = options.systems.split(",")
    ns = [int(x) for x in options.ns.split(",")]
    sizes = [int(x) for x in options.sizes.split(",")]
    ladder = [int(x) for x in options.ladder.split(",")] if options.ladder else LADDER
    tenants_ladder = (
        [int(x) for x in options.tenants_ladder.split(",")] if options.tenants_ladder else ladder
    )
    tenant_systems = [s for s in options.tenant_systems.split(",") if s in systems]
    run = begin()
    results: list[Json] = []
    for names in paired(systems) if not options.only_tenants else []:
        results += await run_system(names, ns, sizes, options.step_s, ladder)
    users = options.tenant_users
    if options.tenants:
        for names in paired(tenant_systems):
            print(f"{'+'.join(names)}: {users} tenants x 2 devices", flush=True)
            results += await run_system(
                names,
                [2 * users],
                [200],
                options.step_s,
                tenants_ladder,
                tenants=users,
                devices_per_tenant=2,
            )
    table = ratios(results)
    data = {
        "benchmark": "fanout",
        "method": {
            "systems": systems,
            "ns": ns,
            "sizes": sizes,
            "p99_limit_ms": P99_LIMIT_MS,
            "step_s": options.step_s,
            "ladder_deliveries_per_s": ladder,
            "tenants_ladder_deliveries_per_s": tenants_ladder if options.tenants else [],
            "tenant_systems": tenant_systems if options.tenants else [],
            "tenant_users": users,
            "latency_load_deliveries_per_s": options.latency_load,
            "stock_env": STOCK_ENV,
            # False: the code measured has no such switch, so ours-stock ran the fast path.
            "stock_switch_present": stock_switch_present(),
            "split": "device i -> server process i % 2 (ours: 2 edges; sio: 2 servers; raw: 1)",
            "event": "message.update frames, one message id per event (nothing coalesces)",
            "latency": "producer CLOCK_MONOTONIC (before outbox append) -> client socket read",
            "cpu": "user+sys from /proc/<pid>/stat before/after each step (run + drain)",
            "producer_ours": "real Controller.emit with a stand-in AgentPort (bench.common.BenchAgent)",
            "placement": f"servers + redis on CPU {CPU_SERVER}; clients + producers on CPU {CPU_CLIENT}",
        },
        "results": compact(results),
        "table": table,
    }
    print(json.dumps(table, indent=1))
    figures = fanout_figures(results, table, ladder, tenants_ladder, options.latency_load)
    write_timed_result(options.out, options.name, data, run, figures)


def main() -> None:
    parser = role_parser(__doc__, "client", "producer-ours", "producer-sio")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--systems", default="ours,raw,sio", help="of ours,ours-stock,raw,sio")
    parser.add_argument("--ns", default=None)
    parser.add_argument("--sizes", default=None)
    parser.add_argument("--step-s", type=float, default=None)
    parser.add_argument("--no-tenants", dest="tenants", action="store_false")
    parser.add_argument(
        "--only-tenants", action="store_true", help="just the 500 tenants x 2 devices sweep"
    )
    parser.add_argument("--name", default=None)
    parser.add_argument("--out", default=None, help="result file (bench/results/<name>.json)")
    parser.add_argument("--ladder", default=None, help="deliveries/s steps (comma list)")
    parser.add_argument(
        "--tenants-ladder", default=None, help="deliveries/s steps of the 500 x 2 sweep"
    )
    parser.add_argument(
        "--tenant-users",
        type=int,
        default=500,
        help="the users of the many-users sweep, 2 devices each (its producer starts a "
        "Controller per user: minutes for 500 on a busy machine)",
    )
    parser.add_argument(
        "--tenant-systems",
        default="ours,ours-stock,raw,sio",
        help="the systems of the 500 x 2 sweep (those of --systems)",
    )
    parser.add_argument(
        "--latency-load",
        type=int,
        default=20_000,
        help="deliveries/s (a ladder step) at which latency percentiles are quoted",
    )
    parser.add_argument("--redis")
    parser.add_argument("--tenants", dest="tenant_count", type=int, default=1)
    parser.add_argument("--rooms", type=int, default=1)
    parser.add_argument("--run-id", default="0")
    parser.add_argument(
        "--profile",
        type=float,
        default=None,
        help="deliveries/s: one long step of ours under py-spy instead of a sweep",
    )
    options = parser.parse_args()
    if options.role == "client":
        run_loop(client_main)
    elif options.role == "producer-ours":
        run_loop(lambda: producer_ours_main(options.redis, options.tenant_count, options.run_id))
    elif options.role == "producer-sio":
        run_loop(lambda: producer_sio_main(options.redis, options.rooms))
    else:
        options.ns = options.ns or ("100,1000" if options.quick else "10,100,1000")
        options.sizes = options.sizes or ("200" if options.quick else "200,2000")
        options.step_s = options.step_s or (1.5 if options.quick else 2.0)
        options.name = result_name(options.name, options.quick, "fanout")
        asyncio.run(profile(options) if options.profile else orchestrate(options))


if __name__ == "__main__":
    main()

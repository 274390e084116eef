"""The systems the fan-out benchmark compares, started and driven: servers, producer and
device URLs of ``ours`` / ``raw`` / ``sio`` (``System``), the rate ladder of one case
(``sweep``) and every case of one system (``run_system``). Clients and producers run as
roles of ``bench/fanout.py`` in child processes (``bench.fanout_roles``)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from bench.host import LOOPBACK, STOCK_ENV, CpuMeter, Json, uses_uvloop
from bench.procs import Child, Redis, start_edges, start_peer, start_role

P99_LIMIT_MS = 50.0
# "ours-stock": our gateway again, its edges with STOCK_ENV (the stock path).
OURS = ("ours", "ours-stock")
# The script whose roles (client, producer-ours, producer-sio) the children run.
SCRIPT = str(Path(__file__).resolve().with_name("fanout.py"))


class RawControl:
    def __init__(self, port: int) -> None:
        self.port = port
        self.ws: Any = None

    async def start(self) -> RawControl:
        import websockets

        self.ws = await websockets.connect(f"ws://{LOOPBACK}:{self.port}/control", max_size=None)
        return self

    async def call(self, op: str, rpc_timeout: float = 120.0, **args: Any) -> Json:
        await self.ws.send(json.dumps({"op": op, **args}))
        return dict(json.loads(await asyncio.wait_for(self.ws.recv(), rpc_timeout)))

    async def stop(self) -> None:
        await self.ws.close()


class System:
    """What one system needs started: servers, a producer, device URLs."""

    def __init__(self, name: str, tenants: int) -> None:
        self.name = name
        self.tenants = tenants
        self.redis: Redis | None = None
        self.servers: list[Any] = []
        self.producer: Any = None
        self.urls: list[str] = []
        self.tokens: list[str] = []
        self.server_pids: list[int] = []

    async def start(self) -> System:
        run_id = f"{int(time.time()) % 100000}"
        if self.name in (*OURS, "sio"):
            self.redis = Redis()
            self.redis.start()
        if self.name in OURS:
            assert self.redis is not None
            edges = start_edges(self.redis.url, 2, STOCK_ENV if self.name == "ours-stock" else None)
            self.servers = edges
            self.urls = [e.ws_url for e in edges]
            self.producer = await start_role(
                SCRIPT,
                "producer-ours",
                "--redis",
                self.redis.url,
                "--tenants",
                str(self.tenants),
                "--run-id",
                run_id,
            )
            info = await self.producer.call("info", rpc_timeout=300)
            self.tokens = info["tokens"]
        elif self.name == "sio":
            assert self.redis is not None
            for _ in range(2):
                port, proc = start_peer("sio", "sio_server.py", "--redis", self.redis.url)
                self.servers.append(proc)
                self.urls.append(f"ws://{LOOPBACK}:{port}/socket.io/?EIO=4&transport=websocket")
            self.producer = await start_role(
                SCRIPT, "producer-sio", "--redis", self.redis.url, "--rooms", str(self.tenants)
            )
            self.tokens = [""] * self.tenants
        else:
            port, proc = start_peer("raw", "raw_ws.py")
            self.servers.append(proc)
            self.urls = [f"ws://{LOOPBACK}:{port}/"]
            self.producer = await RawControl(port).start()
            self.tokens = [""] * self.tenants
        self.server_pids = [s.pid for s in self.servers]
        return self

    def switch_to_stock(self) -> None:
        """``ours`` becomes ``ours-stock``: its edges restarted with ``STOCK_ENV``, on the same
        Redis and producer (starting 500 tenants' Controllers again would take minutes)."""
        assert self.name == "ours" and self.redis is not None
        for server in self.servers:
            server.stop()
        self.servers = start_edges(self.redis.url, 2, STOCK_ENV)
        self.urls = [e.ws_url for e in self.servers]
        self.server_pids = [s.pid for s in self.servers]
        self.name = "ours-stock"

    def meter(self, client_pid: int) -> CpuMeter:
        groups: dict[str, list[int]] = {"server": self.server_pids, "client": [client_pid]}
        if self.redis is not None:
            groups["redis"] = [self.redis.pid]
        if isinstance(self.producer, Child):
            groups["producer"] = [self.producer.pid]
        return CpuMeter(groups)

    async def stop(self) -> None:
        if self.producer is not None:
            await self.producer.stop()
        for server in self.servers:
            server.stop()
        if self.redis is not None:
            self.redis.cleanup()


async def run_step(
    system: System, client: Child, rate: float, step_s: float, size: int, drain_s: float
) -> tuple[Json, Json, Json]:
    """One step at ``rate`` events/s: (producer's report, devices' count, CPU)."""
    await client.call("reset")
    meter = system.meter(client.pid)
    meter.start()
    produced = await system.producer.call("run", rate=rate, duration=step_s, size=size)
    got = await client.call("collect", ranges=produced["ranges"], timeout=drain_s)
    return produced, got, meter.stop()


def p99_ms(got: Json) -> Any:
    return got["latency"].get("p99_ms", float("inf"))


def why_not(produced: Json, got: Json, rate: float) -> list[str]:
    """Why a step does not pass (empty: it does)."""
    reasons = []
    if got["missing"]:
        reasons.append(f"missing {got['missing']}")
    if got["out_of_order"]:
        reasons.append(f"out of order {got['out_of_order']}")
    if p99_ms(got) > P99_LIMIT_MS:
        reasons.append(f"p99 {p99_ms(got)} ms")
    if produced["achieved_rate"] < 0.95 * rate:
        reasons.append(f"producer reached {produced['achieved_rate']}/s of {rate:.0f}/s")
    return reasons


def us_per_delivery(cpu_s: float, delivered: int) -> float:
    return round(cpu_s / max(1, delivered) * 1e6, 2)


async def sweep(
    system: System,
    client: Child,
    n: int,
    size: int,
    step_s: float,
    ladder: list[int],
    drain_s: float,
) -> Json:
    steps: list[Json] = []
    best: Json | None = None
    retried = False
    for deliveries in ladder:
        rate = deliveries / (n / system.tenants)  # events/s over all tenants
        produced, got, cpu = await run_step(system, client, rate, step_s, size, drain_s)
        p99 = p99_ms(got)
        reasons = why_not(produced, got, rate)
        step = {
            "target_deliveries_per_s": deliveries,
            "events_per_s": round(rate, 1),
            "achieved_deliveries_per_s": round(got["delivered"] / max(produced["elapsed_s"], 1e-9)),
            "producer": produced | {"ranges": None},
            "client": got,
            "cpu": cpu,
            "server_cpu_us_per_delivery": us_per_delivery(cpu["server_cpu_s"], got["delivered"]),
            "server_side_cpu_us_per_delivery": us_per_delivery(
                cpu["server_cpu_s"] + cpu.get("redis_cpu_s", 0) + cpu.get("producer_cpu_s", 0),
                got["delivered"],
            ),
            "client_cpu_us_per_delivery": us_per_delivery(cpu["client_cpu_s"], got["delivered"]),
            "pass": not reasons,
            "why_not": reasons,
        }
        steps.append(step)
        print(
            f"  {system.name:4} N={n:<5} {size:>4}B {deliveries:>7}/s -> "
            f"{step['achieved_deliveries_per_s']:>7}/s p99={p99}ms miss={got['missing']} "
            f"srv={step['server_cpu_us_per_delivery']}us {'ok' if not reasons else reasons}",
            flush=True,
        )
        if not reasons:
            best = step
            retried = False
            continue
        if got["closed"]:
            break  # devices were dropped (slow consumer): no point going higher
        if not retried:
            retried = True
            ladder_retry = step  # one retry of a failing step: this VM is noisy
            produced, got, cpu = await run_step(system, client, rate, step_s, size, drain_s)
            p99 = p99_ms(got)
            ok = not why_not(produced, got, rate)
            ladder_retry["retry"] = {
                "p99_ms": p99,
                "missing": got["missing"],
                "achieved_rate": produced["achieved_rate"],
                "pass": ok,
                "server_cpu_us_per_delivery": us_per_delivery(
                    cpu["server_cpu_s"], got["delivered"]
                ),
            }
            print(
                f"       retry: p99={p99}ms miss={got['missing']} {'ok' if ok else 'fail'}",
                flush=True,
            )
            if ok:
                ladder_retry["pass"] = True
                ladder_retry["why_not"] = []
                best = ladder_retry
                continue
        break
    return {
        "n": n,
        "size": size,
        "max_sustained_deliveries_per_s": best["target_deliveries_per_s"] if best else 0,
        "at_max": best,
        "steps": steps,
    }


async def connect_devices(system: System, client: Child, n: int, devices_per_tenant: int) -> Json:
    """The client's ``n`` devices on the system's servers (device i -> server i % count)."""
    return await client.call(
        "connect",
        rpc_timeout=180,
        system=system.name,
        urls=system.urls,
        n=n,
        devices_per_tenant=devices_per_tenant,
        tokens=system.tokens,
    )


async def run_system(
    names: list[str],
    ns: list[int],
    sizes: list[int],
    step_s: float,
    ladder: list[int],
    tenants: int = 1,
    devices_per_tenant: int | None = None,
) -> list[Json]:
    """Every case of one system; ``["ours", "ours-stock"]``: both, one after the other on
    one Redis and producer (``System.switch_to_stock``)."""
    system = await System(names[0], tenants).start()
    out: list[Json] = []
    try:
        for name in names:
            if name != system.name:
                system.switch_to_stock()
            out += await _cases(system, ns, sizes, step_s, ladder, devices_per_tenant)
    finally:
        await system.stop()
    return out


async def _cases(
    system: System,
    ns: list[int],
    sizes: list[int],
    step_s: float,
    ladder: list[int],
    devices_per_tenant: int | None,
) -> list[Json]:
    name = system.name
    out: list[Json] = []
    for n in ns:
        client = await start_role(SCRIPT, "client")
        try:
            conn = await connect_devices(system, client, n, devices_per_tenant or n)
            print(
                f"{name}: {conn['connected']}/{n} devices connected in "
                f"{conn['elapsed_s']} s {conn['errors'][:1]}",
                flush=True,
            )
            if conn["connected"] < n:
                raise RuntimeError(f"{name}: only {conn['connected']} of {n} connected")
            await asyncio.sleep(0.5)
            for size in sizes:
                result = await sweep(system, client, n, size, step_s, ladder, drain_s=3.0)
                result["system"] = name
                result["tenants"] = system.tenants
                out.append(result)
        finally:
            await client.stop()
    if name in OURS:
        out.append(
            {"system": name, "uvloop_in_edges": all(uses_uvloop(p) for p in system.server_pids)}
        )
    return out

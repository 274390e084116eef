"""The roles of the fan-out benchmark that run in child processes (``bench/fanout.py
client`` / ``producer-ours`` / ``producer-sio``): N lean devices counting frames per cursor,
and the event producers of ``ours`` (real Controllers) and ``sio`` (a write-only
``AsyncRedisManager``). Each is driven by JSON lines (``bench.procs.serve_stdio``)."""

from __future__ import annotations

import asyncio
import json
import time
from array import array
from typing import Any

from bench.host import Json, raise_nofile
from bench.lean_ws import bounded_gather, iris_hello, lean_connect
from bench.peers.workload import frame, paced, pad_for, stamp
from bench.plugin_side import delta_event, running_controllers, tenant_token
from bench.procs import serve_stdio
from bench.stats import summary_ms

# =========================================================================== client role


class Devices:
    """N lean WebSocket devices in one process; counts frames per device by cursor."""

    def __init__(self) -> None:
        self.protos: list[Any] = []
        self.tenant_of: list[int] = []
        self.got = array("q")
        self.last = array("q")
        self.gaps = 0
        self.lat = array("q")
        self.ready: list[asyncio.Future[None]] = []
        self.system = ""

    def on_text(self, proto: Any, payload: bytes, now: int) -> None:
        d = proto.tag
        p = payload.find(b'"cursor":')
        if p < 0:
            self._control(proto, d, payload)
            return
        c0 = p + 9
        c1 = payload.find(b",", c0)
        cursor = int(payload[c0:c1])
        q = payload.find(b'"text":"~', c1)
        if q >= 0:
            self.lat.append((now - int(payload[q + 9 : q + 28])) // 1000)
        last = self.last[d]
        if last and cursor != last + 1:
            self.gaps += 1
        self.last[d] = cursor
        self.got[d] += 1

    def _control(self, proto: Any, d: int, payload: bytes) -> None:
        fut = self.ready[d]
        if self.system == "sio":
            if payload == b"2":
                proto.send_text(b"3")
            elif payload.startswith(b"0{"):
                room = f"t{self.tenant_of[d]}"
                proto.send_text(b"40" + json.dumps({"room": room}).encode())
            elif payload.startswith(b"40") and not fut.done():
                fut.set_result(None)
            return
        if not fut.done():
            if b"hello.ack" in payload:
                fut.set_result(None)
            elif b'"error"' in payload:
                fut.set_exception(ConnectionError(payload[:200].decode(errors="replace")))

    async def connect(
        self,
        system: str,
        urls: list[str],
        n: int,
        devices_per_tenant: int,
        tokens: list[str],
        concurrency: int = 100,
        timeout: float = 90.0,
    ) -> Json:
        self.system = system
        loop = asyncio.get_running_loop()
        base = len(self.protos)
        t0 = time.monotonic()
        deadline = t0 + timeout

        async def one(d: int) -> None:
            tenant = d // devices_per_tenant
            url = urls[d % len(urls)]
            proto = await lean_connect(url, self.on_text, tag=d)
            self.protos[d] = proto
            if system.startswith("ours"):
                proto.send_text(json.dumps(iris_hello(tokens[tenant], f"dev{d:05d}")))
            elif system == "raw":
                proto.send_text(json.dumps({"room": f"t{tenant}"}))
            await asyncio.wait_for(self.ready[d], max(1.0, deadline - time.monotonic()))

        for _ in range(base, base + n):
            self.protos.append(None)
            self.ready.append(loop.create_future())
            self.got.append(0)
            self.last.append(0)
        self.tenant_of = [d // devices_per_tenant for d in range(base + n)]
        results = await bounded_gather(
            [lambda d=d: one(d) for d in range(base, base + n)], concurrency, deadline
        )
        errors = [repr(r) for r in results if isinstance(r, BaseException)]
        return {
            "connected": n - len(errors),
            "errors": errors[:5],
            "elapsed_s": round(time.monotonic() - t0, 3),
        }

    async def reset(self) -> Json:
        for d in range(len(self.got)):
            self.got[d] = 0
        self.gaps = 0
        self.lat = array("q")
        return {"ok": True}

    async def collect(self, ranges: dict[str, list[int]], timeout: float) -> Json:
        """Wait (bounded) until every device has its tenant's whole range, then count."""
        expect = [0] * len(self.protos)
        for d in range(len(self.protos)):
            first, last = ranges.get(f"t{self.tenant_of[d]}", [1, 0])
            expect[d] = last - first + 1
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self.got[d] >= expect[d] for d in range(len(expect))):
                break
            await asyncio.sleep(0.01)
        missing = sum(max(0, expect[d] - self.got[d]) for d in range(len(expect)))
        short = sum(1 for d in range(len(expect)) if self.got[d] < expect[d])
        closed = sum(1 for p in self.protos if p is not None and p.closed.done())
        return {
            "expected": sum(expect),
            "delivered": sum(self.got),
            "missing": missing,
            "devices_short": short,
            "out_of_order": self.gaps,
            "closed": closed,
            "latency": summary_ms(self.lat),
        }

    async def close(self) -> Json:
        for proto in self.protos:
            if proto is not None:
                proto.close()
        await asyncio.sleep(0.5)
        self.protos = []
        self.ready = []
        self.got = array("q")
        self.last = array("q")
        return {"ok": True}


async def client_main() -> None:
    raise_nofile()
    devices = Devices()
    await serve_stdio(
        {
            "connect": devices.connect,
            "reset": devices.reset,
            "collect": devices.collect,
            "close": devices.close,
        }
    )


# =========================================================================== producers


async def producer_ours_main(redis_url: str, tenants: int, run_id: str) -> None:
    """Real Controllers; events go through Controller.emit (group commit + publisher)."""
    pairs = [tenant_token(i, run_id) for i in range(tenants)]
    counter = {"i": 0}
    async with running_controllers(redis_url, pairs) as controllers:

        async def run(rate: float, duration: float, size: int) -> Json:
            pad = pad_for(size)
            n = len(controllers)
            # Distinct messages: nothing coalesces, so each tenant's cursors are contiguous
            # from the head it had (read once what an earlier step queued has committed).
            for c in controllers:
                await c.sequencer.durable()
            base = [c.outbox.head() for c in controllers]
            emitted = [0] * n
            # CPU inside Controller.emit on the loop: queuing the event (its outbox append
            # runs on the outbox's storage thread, its publish after the commit).
            spent = [0.0]

            def emit(k: int) -> None:
                began = time.thread_time()
                for _ in range(k):
                    i = counter["i"]
                    counter["i"] += 1
                    t = i % n
                    event = delta_event(f"m-{t:03d}-{i:07d}", stamp(pad))
                    controllers[t].emit([event])
                    emitted[t] += 1
                spent[0] += time.thread_time() - began

            result = await paced(rate, duration, emit)
            result["emit_cpu_s"] = round(spent[0], 3)
            for c in controllers:
                await c.sequencer.durable()
            # The doorbell queue drains asynchronously: wait (bounded) for it.
            for _ in range(500):
                if all(c.publisher.idle() for c in controllers):
                    break
                await asyncio.sleep(0.01)
            result["ranges"] = {
                f"t{t}": [base[t] + 1, base[t] + emitted[t]] for t in range(n) if emitted[t]
            }
            return result

        async def info() -> Json:
            return {"tenants": [p[0] for p in pairs], "tokens": [p[1] for p in pairs]}

        await serve_stdio({"run": run, "info": info})


async def producer_sio_main(redis_url: str, rooms: int) -> None:
    import socketio

    manager = socketio.AsyncRedisManager(redis_url, write_only=True)
    seq: dict[int, int] = {}
    counter = {"i": 0}

    async def run(rate: float, duration: float, size: int) -> Json:
        pad = pad_for(size)
        first: dict[int, int] = {}

        async def emit(k: int) -> None:
            for _ in range(k):
                i = counter["i"]
                counter["i"] += 1
                t = i % rooms
                s = seq[t] = seq.get(t, 0) + 1
                first.setdefault(t, s)
                await manager.emit(
                    "m", frame(s, f"m-{t:03d}-{i:07d}", pad), room=f"t{t}", namespace="/"
                )

        result = await paced(rate, duration, emit)
        result["ranges"] = {f"t{t}": [first[t], seq[t]] for t in first}
        return result

    await serve_stdio({"run": run})

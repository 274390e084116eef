"""Latency of the foundation paths against a real `hermes gateway run` (loopback only).

Prints, and writes ``--out`` (else bench/results/local/latency.json, a result file of
``bench.results``):
- start-up: `hermes gateway run` → first accepted device connection (ready);
- warm turn: chat.send → run.accepted and → first message.delta (median of N), embedded
  and Redis (one edge process) modes;
- approval.respond / picker.select → the approved tool's completion event;
- auto_thread send → channel.created and → channel.renamed (the model's title).

Usage: .venv/bin/python bench/latency.py [--turns 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

from canonical.model import Json

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import results
from bench.hermes_stack import edge_healthy, embedded_gateway, gateway_on_bus
from canonical.client import DeviceClient
from tests.harness.hermes_home import HermesHome
from tests.harness.processes import EdgeProcess, RedisServer, ScriptedModel, stop_all


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def summary(values: list[float]) -> Json:
    ordered = sorted(values)
    return {
        "n": len(values),
        "median_ms": ms(statistics.median(ordered)),
        "p95_ms": ms(ordered[int(0.95 * (len(ordered) - 1))]),
        "min_ms": ms(ordered[0]),
    }


async def warm_turns(url: str, token: str, turns: int) -> Json:
    client = await DeviceClient(url).connect()
    await client.hello_pheby(token)
    snapshot = await client.request({"type": "conversation.list"})
    conversation_id = snapshot["conversations"][0]["conversation_id"]
    accepted: list[float] = []
    first_delta: list[float] = []
    for index in range(turns + 1):  # the first turn is the cold one
        start = len(client.frames)
        sent = time.monotonic()
        await client.send(
            {
                "type": "chat.send",
                "conversation_id": conversation_id,
                "text": f"hello number {index}",
                "request_id": f"w{index}",
            }
        )
        acc = await client.wait_type(
            "run.accepted", timeout=60, start=start, request_id=f"w{index}"
        )
        acc_at = client.received_at[client.frames.index(acc)]
        delta = await client.wait_type("message.delta", timeout=60, start=start)
        delta_at = client.received_at[client.frames.index(delta)]
        await client.wait_type("run.finished", timeout=60, start=start)
        if index > 0:
            accepted.append(acc_at - sent)
            first_delta.append(delta_at - sent)
    await client.close()
    return {
        "chat_send_to_run_accepted": summary(accepted),
        "chat_send_to_first_delta": summary(first_delta),
    }


async def decisions(url: str, token: str, rounds: int) -> Json:
    client = await DeviceClient(url).connect()
    await client.hello_iris(token, "bench-phone")
    approve: list[float] = []
    for index in range(rounds):
        start = len(client.frames)
        await client.send(
            {
                "type": "message.send",
                "chat_id": "android:default",
                "text": f"[danger] round {index}",
                "client_id": f"d{index}-{secrets.token_hex(4)}",
            }
        )
        picker = await client.wait_type("picker.approval", timeout=60, start=start)
        at = time.monotonic()
        await client.send(
            {"type": "picker.select", "picker_id": picker["picker_id"], "value": "once"}
        )
        done = await client.wait_for(lambda f: f.get("type") == "tool.end", 60, start)
        approve.append(client.received_at[client.frames.index(done)] - at)
        await client.wait_type("run.finished", timeout=60, start=start)
    # Auto-threading happens only with the default channel's threads toggle on (off by default).
    toggled = await client.request(
        {"type": "channel.set_threads", "chat_id": "android:default", "on": True}
    )
    if not toggled.get("entry", {}).get("threads_enabled"):
        raise RuntimeError(f"channel.set_threads did not turn threads on: {toggled}")
    created: list[float] = []
    renamed: list[float] = []
    for index in range(rounds):
        start = len(client.frames)
        at = time.monotonic()
        await client.send(
            {
                "type": "message.send",
                "chat_id": "android:default",
                "text": f"Plan number {index} for the weekend",
                "client_id": f"t{index}-{secrets.token_hex(4)}",
                "auto_thread": True,
            }
        )
        made = await client.wait_type("channel.created", timeout=60, start=start)
        created.append(client.received_at[client.frames.index(made)] - at)
        thread_id = made["entry"]["thread_id"]
        named = await client.wait_for(
            lambda f, wanted=thread_id: (
                f.get("type") == "channel.renamed" and f["entry"].get("thread_id") == wanted
            ),
            60,
            start,
        )
        renamed.append(client.received_at[client.frames.index(named)] - at)
    await client.close()
    return {
        "picker_select_to_tool_end": summary(approve),
        "auto_thread_to_channel_created": summary(created),
        "auto_thread_to_channel_renamed": summary(renamed),
    }


async def main(turns: int) -> Json:
    work = Path(tempfile.mkdtemp(prefix="hdg-latency-"))
    model = ScriptedModel(workdir=work / "model", chunk_delay=0.02).start()
    results: Json = {}
    try:
        token = secrets.token_urlsafe(24)
        home = HermesHome(model.base_url, path=work / "embedded-home")
        gateway, port = embedded_gateway(home, token)
        launched = time.monotonic()
        gateway.start()
        url = f"ws://127.0.0.1:{port}/ws"
        while True:
            if edge_healthy(port, timeout=0.2):
                try:
                    client = await DeviceClient(url).connect()
                    ready = await client.hello_pheby(token)
                    await client.close()
                    if ready.get("type") == "ready":
                        break
                except OSError:
                    pass
            if time.monotonic() - launched > 90:
                raise TimeoutError("gateway did not accept a device within 90 s")
            await asyncio.sleep(0.02)
        results["startup_to_first_accepted_connection_ms"] = ms(time.monotonic() - launched)
        results["embedded"] = await warm_turns(url, token, turns)
        results["decisions"] = await decisions(url, token, max(3, turns // 4))
        gateway.stop()

        redis = RedisServer(workdir=work / "redis").start()
        token = secrets.token_urlsafe(24)
        home = HermesHome(model.base_url, path=work / "redis-home")
        gateway_on_bus(home, token, redis.url, 90)
        edge = EdgeProcess(
            env={"ANDROID_BUS_URL": redis.url}, port_env="ANDROID_WS_PORT", workdir=work / "edge"
        ).start()
        results["redis"] = await warm_turns(edge.ws_url + "/ws", token, turns)
    finally:
        stop_all()
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--out", default=None, help="result file (bench/results/<name>.json)")
    args = parser.parse_args()
    run = results.begin()
    figures = asyncio.run(main(args.turns))
    print(json.dumps(figures, indent=2))
    results.write(
        results.out_path(args.out, "latency"),
        run,
        bench="latency",
        parameters={"turns": args.turns},
        figures=[
            results.figure(
                "startup_to_first_accepted_connection",
                figures["startup_to_first_accepted_connection_ms"],
                "ms",
            )
        ]
        + [
            results.figure(leg, figures[mode][leg]["median_ms"], "ms", mode=mode, stat="median")
            for mode in ("embedded", "redis")
            for leg in ("chat_send_to_run_accepted", "chat_send_to_first_delta")
        ]
        + [
            results.figure(leg, value["median_ms"], "ms", mode="embedded", stat="median")
            for leg, value in figures["decisions"].items()
        ],
        detail=figures,
    )

"""Turn overhead: what the gateway adds to a turn, on both legs, against a real
`hermes gateway run` with the plugin and the scripted model (fixed first-token delay).

    .venv/bin/python bench/turn_overhead.py [--turns 10] [--mode embedded|scaled|both]
                                            [--first-token-delay 0.2] [--quick]

Every timestamp is CLOCK_REALTIME on this host (one clock for every process):

- ``t_send``: the device writes ``message.send`` (iris);
- ``accepted``: the outbox row of the run's ``run.accepted`` (``created``, written by
  the plugin just before it hands the message to Hermes' ``handle_message``);
- ``model_request``: the scripted model's request log (``ScriptedModel.log()`` ``ts``:
  the streamed chat request arriving);
- ``first_token``: ``model_request`` + first-token delay + one chunk delay (the scripted
  model sleeps the first delay, sends the role chunk, sleeps a chunk delay, then sends the
  first content token) — approximate to the asyncio timer (~1 ms);
- ``first_send``: the outbox row (``created``) of the first ``message.delta`` the device
  got, read as soon as it arrives (the next delta of the message replaces the row);
- ``t_first_delta``: the device reads the first ``message.update``.

Leg 1 (device → model): ours = ``accepted − t_send`` (edge, bus, plugin command);
Hermes = ``model_request − accepted`` (its session and prompt build; our ``submit`` call
is the first few µs of it). Leg 2 (model → device): Hermes = ``first_send − first_token``
(its stream consumer's buffering: ``streaming.edit_interval``/``buffer_threshold``);
ours = ``t_first_delta − first_send`` (outbox append, publish, edge, socket). The first turn
of the chat is a cold start and is reported apart.

Writes ``--out`` (else bench/results/local/turn_overhead[-quick].json), a result file
of ``bench.results``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sqlite3
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.hermes_stack import edge_healthy, embedded_gateway, gateway_on_bus
from bench.host import Json
from bench.results import begin, figure
from bench.stats import result_name, write_timed_result
from canonical.client import DeviceClient
from tests.harness.hermes_home import HermesHome
from tests.harness.processes import EdgeProcess, RedisServer, ScriptedModel


def created_at(db: Path, cursor: int) -> float | None:
    """created (unix time) of one outbox row, while it still exists (deltas coalesce)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        row = con.execute("SELECT created FROM events WHERE cursor = ?", (cursor,)).fetchone()
    finally:
        con.close()
    return float(row[0]) if row else None


def outbox_rows(db: Path, run_id: str) -> dict[str, float]:
    """created (unix time) of the run's run.accepted and message.start rows."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        rows = con.execute(
            "SELECT type, created, body FROM events WHERE type IN ('run.accepted', "
            "'message.start') ORDER BY cursor DESC LIMIT 50"
        ).fetchall()
    finally:
        con.close()
    out: dict[str, float] = {}
    for kind, created, body in rows:
        if json.loads(body).get("run_id") == run_id:
            out.setdefault(kind, float(created))
    return out


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def stats(values: list[float]) -> Json:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "median_ms": ms(statistics.median(ordered)),
        "min_ms": ms(ordered[0]),
        "max_ms": ms(ordered[-1]),
    }


async def run_turns(
    client: DeviceClient,
    model: ScriptedModel,
    outbox: Path,
    chat_id: str,
    turns: int,
    first_token_delay: float,
    chunk_delay: float,
) -> list[Json]:
    offset = time.time() - time.monotonic()  # client receipt times are monotonic
    out: list[Json] = []
    for i in range(turns + 1):
        model.clear_log()
        start = len(client.frames)
        client_id = f"turn-{i}-{secrets.token_hex(4)}"
        t_send = time.time()
        await client.send(
            {
                "type": "message.send",
                "chat_id": chat_id,
                "text": f"turn {i}: hi",
                "client_id": client_id,
            }
        )
        started = await client.wait_type(
            "run.started", timeout=60, start=start, client_id=client_id
        )
        run_id = started["run_id"]
        first = await client.wait_for(
            lambda f, r=run_id: (
                f.get("type") == "message.update"
                and f.get("message_id") is not None
                and (f.get("run_id") in (None, r))
            ),
            timeout=60,
            start=start,
        )
        t_first_delta = client.received_at[client.frames.index(first, start)] + offset
        # The first delta's row is read at once: the next delta of the message replaces it.
        first_send = created_at(outbox, int(first["cursor"]))
        await client.wait_type("run.finished", timeout=60, start=start, run_id=run_id)
        chats = [e for e in model.chat_log() if e.get("stream")]
        rows = outbox_rows(outbox, run_id)
        if not chats or "run.accepted" not in rows or first_send is None:
            out.append({"turn": i, "error": "missing timestamps", "rows": rows})
            continue
        model_request = float(chats[0]["ts"])
        first_token = model_request + first_token_delay + chunk_delay
        out.append(
            {
                "turn": i,
                "cold": i == 0,
                "leg1_ours_ms": ms(rows["run.accepted"] - t_send),
                "leg1_hermes_ms": ms(model_request - rows["run.accepted"]),
                "leg1_total_ms": ms(model_request - t_send),
                "leg2_hermes_ms": ms(first_send - first_token),
                "leg2_ours_ms": ms(t_first_delta - first_send),
                "message_start_after_accept_ms": ms(
                    rows.get("message.start", rows["run.accepted"]) - rows["run.accepted"]
                ),
                "leg2_total_ms": ms(t_first_delta - first_token),
            }
        )
        await asyncio.sleep(0.3)
    return out


async def measure(mode: str, turns: int, first_token_delay: float, chunk_delay: float) -> Json:
    model = ScriptedModel(first_token_delay=first_token_delay, chunk_delay=chunk_delay).start()
    home = HermesHome(model.base_url)
    token = secrets.token_urlsafe(24)
    redis = edge = gateway = None
    client: DeviceClient | None = None
    try:
        if mode == "embedded":
            gateway, port = embedded_gateway(home, token)
            gateway.start().wait_ready(lambda: edge_healthy(port), 60)
            url = f"ws://127.0.0.1:{port}/ws"
        else:
            redis = RedisServer().start()
            edge = EdgeProcess(
                env={"ANDROID_BUS_URL": redis.url, "ANDROID_WS_HOST": "127.0.0.1"},
                port_env="ANDROID_WS_PORT",
            ).start()
            gateway = gateway_on_bus(home, token, redis.url, 60)
            url = edge.ws_url + "/ws"
        client = await DeviceClient(url).connect()
        ack = await client.hello_iris(token, "bench-phone")
        assert ack["type"] == "hello.ack", ack
        chat_id = str(ack["channels"][0]["chat_id"])
        outbox = Path(home.path) / "android" / "outbox.db"
        rows = await run_turns(
            client, model, outbox, chat_id, turns, first_token_delay, chunk_delay
        )
    finally:
        if client is not None:
            await client.close()
        if gateway is not None:
            gateway.stop()
        if edge is not None:
            edge.cleanup()
        if redis is not None:
            redis.cleanup()
        model.cleanup()
        home.cleanup()
    warm = [r for r in rows if not r.get("cold") and "error" not in r]
    summary = {
        key: stats([r[key] / 1000 for r in warm])
        for key in (
            "leg1_ours_ms",
            "leg1_hermes_ms",
            "leg1_total_ms",
            "leg2_hermes_ms",
            "leg2_ours_ms",
            "leg2_total_ms",
        )
    }
    return {"mode": mode, "warm": summary, "turns": rows}


async def main_async(options: argparse.Namespace) -> None:
    run = begin()
    modes = ["embedded", "scaled"] if options.mode == "both" else [options.mode]
    results = []
    for mode in modes:
        result = await measure(mode, options.turns, options.first_token_delay, options.chunk_delay)
        results.append(result)
        w = result["warm"]
        print(
            f"{mode}: leg 1 ours {w['leg1_ours_ms'].get('median_ms')} ms "
            f"(Hermes {w['leg1_hermes_ms'].get('median_ms')} ms); leg 2 ours "
            f"{w['leg2_ours_ms'].get('median_ms')} ms (Hermes {w['leg2_hermes_ms'].get('median_ms')} ms)",
            flush=True,
        )
    data = {
        "benchmark": "turn_overhead",
        "method": {
            "first_token_delay_s": options.first_token_delay,
            "chunk_delay_s": options.chunk_delay,
            "turns": options.turns,
            "clock": "CLOCK_REALTIME on one host for device, outbox rows and model log",
            "legs": __doc__.split("Leg 1", 1)[1].split("Writes", 1)[0].strip() if __doc__ else "",
            "placement": "unpinned (one device; latency, not throughput)",
        },
        "results": results,
    }
    figures = [
        figure(leg, r["warm"][leg].get("median_ms"), "ms", mode=r["mode"], stat="median")
        for r in results
        for leg in ("leg1_ours_ms", "leg1_hermes_ms", "leg2_ours_ms", "leg2_hermes_ms")
    ]
    write_timed_result(options.out, options.name, data, run, figures)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--mode", choices=["embedded", "scaled", "both"], default="both")
    parser.add_argument("--first-token-delay", type=float, default=0.2)
    parser.add_argument("--chunk-delay", type=float, default=0.02)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--name", default=None)
    parser.add_argument("--out", default=None, help="result file (bench/results/<name>.json)")
    options = parser.parse_args()
    if options.quick:
        options.turns = min(options.turns, 4)
    options.name = result_name(options.name, options.quick, "turn_overhead")
    asyncio.run(main_async(options))


if __name__ == "__main__":
    main()

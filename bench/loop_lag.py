"""Hermes' event loop under device load: how late it runs what is due (its lag).

    .venv/bin/python bench/loop_lag.py [--seconds 30] [--devices 4] [--messages 100000]
                                       [--locks] [--before ae80140] [--out FILE]

A real embedded `hermes gateway run` (the plugin and its edge, the scripted model) whose
state.db holds --messages indexed messages (built with Hermes' own SessionDB, as in
search_bench.py). Devices keep searching (words, substrings, CJK), reading history pages,
uploading files over HTTP, renaming a channel, sending a turn now and then, and a second
device says hello once a second. With --locks another process takes the write lock of
channels.db and outbox.db for 2 s out of every 5 (as a `hermes cron run` may).

The lag is measured inside the gateway by `gateway_plugin.loop_probe.LoopProbe` (sleep
1 ms, record the overshoot), injected by bench/loop_lag_site/sitecustomize.py so that
--before COMMIT (a temporary git worktree of that commit, whose plugin is loaded in
place of this one via PYTHONPATH) is measured by the same code, in the same run.
Prints p50/p99/max and the slowest callbacks; writes --out (else
bench/results/local/loop-lag.json), a result file of ``bench.results``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import results as result_files
from bench.hermes_stack import edge_healthy, embedded_gateway
from bench.search_bench import build
from canonical.client import DeviceClient
from tests.harness.hermes_home import HermesHome
from tests.harness.processes import ScriptedModel

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "bench" / "loop_lag_site"
QUERIES = ["deploy", "server error", "config", "ploy", "rve", "今天", "zzqx", "build test"]
LOCKER = """
import sqlite3, sys, time
paths = sys.argv[1:]
while True:
    conns = [sqlite3.connect(p, timeout=30, isolation_level=None) for p in paths]
    for c in conns:
        c.execute("BEGIN IMMEDIATE")
    time.sleep(2.0)
    for c in conns:
        c.execute("COMMIT"); c.close()
    time.sleep(3.0)
"""

Json = dict[str, Any]


async def _loop(name: str, counts: dict[str, int], body: Any, pause: float, until: float) -> None:
    while time.monotonic() < until:
        try:
            await body()
            counts[name] = counts.get(name, 0) + 1
        except Exception as exc:
            counts[f"{name}_failed"] = counts.get(f"{name}_failed", 0) + 1
            counts.setdefault(f"{name}_error: {type(exc).__name__} {str(exc)[:80]}", 0)
        await asyncio.sleep(pause)


async def load(url: str, base: str, token: str, devices: int, until: float) -> dict[str, int]:
    counts: dict[str, int] = {}
    clients = [await DeviceClient(url).connect() for _ in range(devices)]
    acks = [await c.hello_iris(token, f"lag-{n}") for n, c in enumerate(clients)]
    home = acks[0]["channels"][0]
    created = await clients[0].request(
        {"type": "channel.create", "name": f"Lag {secrets.token_hex(2)}", "kind": "channel"}
    )
    chat = created["entry"]["chat_id"]
    blob = os.urandom(256 * 1024)
    tasks = []
    async with httpx.AsyncClient(timeout=60) as http:
        for n, client in enumerate(clients):

            async def search(client: DeviceClient = client, n: int = n) -> None:
                query = QUERIES[(counts.get("search", 0) + n) % len(QUERIES)]
                await client.request({"type": "search", "query": query, "scope": "all"}, 30)

            async def history(client: DeviceClient = client) -> None:
                await client.request(
                    {"type": "history", "chat_id": home["chat_id"], "limit": 64}, 30
                )

            tasks.append(_loop("search", counts, search, 0.05, until))
            tasks.append(_loop("history", counts, history, 0.1, until))

        async def upload() -> None:
            response = await http.post(
                base + "/attachments",
                params={"conversation_id": home["conversation_id"], "filename": "lag.bin"},
                content=blob,
                headers={"Authorization": f"Bearer {token}"},
            )
            response.raise_for_status()

        async def rename() -> None:
            name = f"Lag {counts.get('rename', 0)}"
            await clients[0].request({"type": "channel.rename", "chat_id": chat, "name": name}, 30)

        async def send() -> None:
            await clients[1 % devices].request(
                {
                    "type": "message.send",
                    "chat_id": chat,
                    "text": "hi",
                    "client_id": secrets.token_hex(6),
                },
                30,
            )

        async def hello() -> None:
            second = await DeviceClient(url).connect()
            try:
                await second.hello_iris(token, f"lag-second-{counts.get('hello', 0) % 3}")
            finally:
                await second.close()

        tasks += [
            _loop("upload", counts, upload, 0.2, until),
            _loop("rename", counts, rename, 0.2, until),
            _loop("send", counts, send, 2.0, until),
            _loop("hello", counts, hello, 1.0, until),
        ]
        await asyncio.gather(*tasks)
    for client in clients:
        await client.close()
    return counts


async def warm_up(url: str, token: str) -> None:
    """One turn before the load: Hermes builds its agent on the first message (seconds of
    imports and set-up on its loop, once per process), which is no steady-state lag."""
    client = await DeviceClient(url).connect()
    try:
        await client.hello_iris(token, "lag-warm-up")
        start = len(client.frames)
        await client.send(
            {
                "type": "message.send",
                "chat_id": "android:default",
                "text": "warm up",
                "client_id": "w",
            }
        )
        await client.wait_type("run.finished", timeout=120, start=start)
    finally:
        await client.close()


def _start_locker(*paths: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", LOCKER, *map(str, paths)])


async def measure(label: str, tree: Path, state_db: Path, options: argparse.Namespace) -> Json:
    model = ScriptedModel().start()
    home = HermesHome(model.base_url)
    token = secrets.token_urlsafe(24)
    lag_file = Path(home.path) / "loop-lag.json"
    locker: subprocess.Popen[bytes] | None = None
    gateway = None
    try:
        shutil.copy(state_db, Path(home.path) / "state.db")
        python_path = os.pathsep.join([str(SITE), str(tree)])
        gateway, port = embedded_gateway(
            home, token, PYTHONPATH=python_path, HDG_BENCH_LAG_FILE=str(lag_file)
        )
        gateway.start().wait_ready(lambda: edge_healthy(port), 90)
        data = Path(home.path) / "android"
        if options.locks:
            locker = _start_locker(data / "channels.db", data / "outbox.db")
        url, base = f"ws://127.0.0.1:{port}/ws", f"http://127.0.0.1:{port}"
        await warm_up(url, token)
        until = time.monotonic() + options.seconds
        loading = asyncio.ensure_future(load(url, base, token, options.devices, until))
        await asyncio.sleep(3.0)  # connected and under way: measure from here
        lag_file.with_name(lag_file.name + ".reset").touch()
        counts = await loading
        await asyncio.sleep(0.6)
        probe = json.loads(lag_file.read_text())
    finally:
        if locker is not None:
            locker.terminate()
            locker.wait(10)
        if gateway is not None:
            gateway.stop()
        model.cleanup()
        home.cleanup()
    lag = probe["lag"]
    print(
        f"{label}: p50 {lag['p50_ms']} ms  p99 {lag['p99_ms']} ms  max {lag['max_ms']} ms  "
        f"({lag['samples']} samples) load {counts}",
        flush=True,
    )
    for ms, what in probe["slowest"][:5]:
        print(f"    {ms} ms  {what}", flush=True)
    return {
        "label": label,
        "tree": str(tree),
        "lag": lag,
        "slowest": probe["slowest"],
        "places": probe.get("places", []),
        "load": counts,
    }


def measure_all(options: argparse.Namespace) -> list[Json]:
    runs: list[Json] = []
    with tempfile.TemporaryDirectory(prefix="loop-lag-") as tmp:
        state_db = Path(options.state_db or Path(tmp) / "state.db")
        if not state_db.exists():
            built = build(state_db, options.messages, 50)
            print(f"state.db: {options.messages} messages in {built['build_seconds']} s")
        before_tree = Path(tmp) / "before"
        git = ["git", "worktree"]
        if options.before:
            add = [*git, "add", "--detach", str(before_tree), options.before]
            subprocess.run(add, cwd=ROOT, check=True, capture_output=True)
        try:
            if options.before:
                label = f"before ({options.before})"
                runs.append(asyncio.run(measure(label, before_tree, state_db, options)))
            runs.append(asyncio.run(measure("after", ROOT, state_db, options)))
        finally:
            if options.before:
                remove = [*git, "remove", "--force", str(before_tree)]
                subprocess.run(remove, cwd=ROOT, check=False, capture_output=True)
    return runs


def report(options: argparse.Namespace, run: result_files.Run, runs: list[Json]) -> None:
    figures = [
        result_files.figure(
            "loop_lag", r["lag"][key], "ms", tree=r["label"], stat=key[:-3], locks=options.locks
        )
        for r in runs
        for key in ("p50_ms", "p99_ms", "max_ms")
    ]
    out = result_files.out_path(options.out, "loop-lag")
    result_files.write(
        out,
        run,
        bench="loop_lag",
        parameters={
            "seconds": options.seconds,
            "devices": options.devices,
            "messages": options.messages,
            "locks": options.locks,
            "before": options.before,
        },
        figures=figures,
        detail={"runs": runs},
    )
    print(f"-> {out}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--locks", action="store_true")
    parser.add_argument("--before", default=None, help="also measure this commit (git worktree)")
    parser.add_argument(
        "--state-db", default=None, help="keep the built state.db here (reused when it exists)"
    )
    parser.add_argument("--out", default=None, help="result file (bench/results/<name>.json)")
    options = parser.parse_args()
    run = result_files.begin()
    report(options, run, measure_all(options))


if __name__ == "__main__":
    main()

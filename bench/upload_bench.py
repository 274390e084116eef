"""Benchmark attachment uploads into a real embedded gateway (`hermes gateway run` with the
plugin and its in-process edge, the scripted model as the LLM).

    .venv/bin/python bench/upload_bench.py [--mib 64] [--runs 3]

For each run it streams a file of --mib MiB from disk with `POST /attachments` (chunked,
the client never holds it whole), downloads it back with `GET /attachments/{id}`, and
uploads it once more over the iris WebSocket (`media.upload.*`, 512 KiB chunks). A sampler
thread reads the gateway process's RSS every 5 ms: the figures are its RSS before, the
peak during each phase, and after. Prints them and writes ``--out``
(else bench/results/local/upload.json), a result file of ``bench.results``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import os
import platform
import secrets
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil

from canonical.attachments import CHUNK_MAX_BYTES
from canonical.client import DeviceClient

# The test harness (real gateway, scripted model) lives in the repository, not the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import results as result_files
from bench.hermes_stack import edge_healthy, embedded_gateway
from tests.harness.hermes_home import HermesHome
from tests.harness.proc import stop_all
from tests.harness.services import ScriptedModel

MIB = 1024 * 1024


class RssSampler:
    """Peak resident set size of one process (and its children) while a phase runs."""

    def __init__(self, pid: int, interval: float = 0.005) -> None:
        self.process = psutil.Process(pid)
        self.interval = interval
        self.peak = 0
        self.start = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def rss(self) -> int:
        total = self.process.memory_info().rss
        for child in self.process.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            self._stop.wait(self.interval)

    @property
    def growth(self) -> int:
        return self.peak - self.start

    @contextmanager
    def phase(self) -> Iterator[RssSampler]:
        self.start = self.peak = self.rss()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()


async def file_chunks(path: Path, size: int = 256 * 1024) -> AsyncIterator[bytes]:
    with path.open("rb") as fh:
        while block := await asyncio.to_thread(fh.read, size):
            yield block


def _mib_s(nbytes: int, seconds: float) -> float:
    return round(nbytes / MIB / seconds, 1)


async def http_round(
    http: httpx.AsyncClient, base: str, token: str, conversation_id: str, path: Path, size: int
) -> tuple[dict[str, Any], str]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/octet-stream"}
    started = time.perf_counter()
    response = await http.post(
        base + "/attachments",
        params={"conversation_id": conversation_id, "filename": path.name},
        content=file_chunks(path),
        headers=headers,
    )
    upload_s = time.perf_counter() - started
    if response.status_code != 201:
        raise RuntimeError(f"upload failed: {response.status_code} {response.text}")
    attachment = response.json()["attachment"]
    return {"upload_s": round(upload_s, 3), "upload_mib_s": _mib_s(size, upload_s)}, attachment[
        "download_path"
    ]


async def http_download(http: httpx.AsyncClient, url: str, token: str, size: int) -> dict[str, Any]:
    started = time.perf_counter()
    received = 0
    async with http.stream("GET", url, headers={"Authorization": f"Bearer {token}"}) as response:
        async for block in response.aiter_bytes():
            received += len(block)
    seconds = time.perf_counter() - started
    if received != size:
        raise RuntimeError(f"download returned {received} bytes, expected {size}")
    return {"download_s": round(seconds, 3), "download_mib_s": _mib_s(size, seconds)}


async def iris_upload(
    ws_url: str, token: str, path: Path, size: int, digest: str
) -> dict[str, Any]:
    client = await DeviceClient(ws_url + "/ws").connect()
    try:
        ack = await client.hello_iris(token, f"bench-{secrets.token_hex(3)}")
        assert ack["type"] == "hello.ack", ack
        started = time.perf_counter()
        ready = await client.request(
            {
                "type": "media.upload.start",
                "chat_id": "android:default",
                "filename": path.name,
                "size": size,
                "sha256": digest,
            }
        )
        upload_id = ready["upload_id"]
        offset = 0
        reply: dict[str, Any] = {}
        with path.open("rb") as fh:
            while block := await asyncio.to_thread(fh.read, CHUNK_MAX_BYTES):
                reply = await client.request(
                    {
                        "type": "media.upload.chunk",
                        "upload_id": upload_id,
                        "offset": offset,
                        "data": base64.b64encode(block).decode(),
                    },
                    timeout=60,
                )
                offset += len(block)
        seconds = time.perf_counter() - started
        if reply.get("type") != "media.uploaded":
            raise RuntimeError(f"iris upload did not finish: {reply}")
        return {"iris_upload_s": round(seconds, 3), "iris_upload_mib_s": _mib_s(size, seconds)}
    finally:
        await client.close()


async def bench(mib: int, runs: int, workdir: Path) -> dict[str, Any]:
    size = mib * MIB
    source = workdir / f"bench-{mib}MiB.bin"
    with source.open("wb") as fh:
        for _ in range(mib):
            fh.write(os.urandom(MIB))
    digest = hashlib.sha256(source.read_bytes()).hexdigest()

    model = ScriptedModel(workdir=workdir / "model").start()
    home = HermesHome(model.base_url, path=workdir / "home")
    token = secrets.token_urlsafe(24)
    gateway, port = embedded_gateway(home, token, ANDROID_MAX_UPLOAD_BYTES=str(size))
    gateway.start()
    base = f"http://127.0.0.1:{port}"
    try:
        gateway.wait_ready(lambda: edge_healthy(port), 90)
        sampler = RssSampler(gateway.pid)
        client = await DeviceClient(f"ws://127.0.0.1:{port}/ws").connect()
        ready = await client.hello_pheby(token)
        assert ready["type"] == "ready", ready
        snapshot = await client.request({"type": "conversation.list"})
        conversation_id = snapshot["conversations"][0]["conversation_id"]
        await client.close()
        await asyncio.sleep(1.0)
        rss_before = sampler.rss()
        rows: list[dict[str, Any]] = []
        async with httpx.AsyncClient(timeout=300) as http:
            for _ in range(runs):
                row: dict[str, Any] = {}
                with sampler.phase() as phase:
                    timing, download_path = await http_round(
                        http, base, token, conversation_id, source, size
                    )
                row.update(timing, upload_peak_rss=phase.peak, upload_growth_rss=phase.growth)
                with sampler.phase() as phase:
                    row.update(await http_download(http, base + download_path, token, size))
                row["download_peak_rss"] = phase.peak
                row["download_growth_rss"] = phase.growth
                with sampler.phase() as phase:
                    row.update(
                        await iris_upload(f"ws://127.0.0.1:{port}", token, source, size, digest)
                    )
                row["iris_upload_peak_rss"] = phase.peak
                row["iris_upload_growth_rss"] = phase.growth
                rows.append(row)
        await asyncio.sleep(0.5)
        rss_after = sampler.rss()
    finally:
        gateway.stop()
        model.stop()

    def median(key: str) -> float:
        return round(statistics.median(r[key] for r in rows), 3)

    peak = max(max(r["upload_peak_rss"], r["iris_upload_peak_rss"]) for r in rows)
    return {
        "file_mib": mib,
        "runs": runs,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "http_upload_mib_s_median": median("upload_mib_s"),
        "http_download_mib_s_median": median("download_mib_s"),
        "iris_upload_mib_s_median": median("iris_upload_mib_s"),
        "gateway_rss_before_mib": round(rss_before / MIB, 1),
        "gateway_rss_peak_during_uploads_mib": round(peak / MIB, 1),
        "gateway_rss_peak_growth_mib": round((peak - rss_before) / MIB, 1),
        "gateway_rss_after_mib": round(rss_after / MIB, 1),
        "http_upload_rss_growth_mib_max": round(max(r["upload_growth_rss"] for r in rows) / MIB, 1),
        "iris_upload_rss_growth_mib_max": round(
            max(r["iris_upload_growth_rss"] for r in rows) / MIB, 1
        ),
        "per_run": [
            {k: (round(v / MIB, 1) if k.endswith("_rss") else v) for k, v in r.items()}
            for r in rows
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=None, help="result file (bench/results/<name>.json)")
    args = parser.parse_args()
    begun = result_files.begin()
    with tempfile.TemporaryDirectory(prefix="hdg-upload-bench-") as tmp:
        try:
            results = asyncio.run(bench(args.mib, args.runs, Path(tmp)))
        finally:
            stop_all()
    result_files.write(
        result_files.out_path(args.out, "upload"),
        begun,
        bench="upload",
        parameters={"file_mib": args.mib, "runs": args.runs},
        figures=[
            result_files.figure(key.removesuffix("_median"), results[key], "MiB/s", stat="median")
            for key in (
                "http_upload_mib_s_median",
                "http_download_mib_s_median",
                "iris_upload_mib_s_median",
            )
        ]
        + [
            result_files.figure(
                "gateway_rss_peak_growth", results["gateway_rss_peak_growth_mib"], "MiB"
            )
        ],
        detail=results,
    )
    for key, value in results.items():
        if key != "per_run":
            print(f"{key:40} {value}")
    for n, row in enumerate(results["per_run"], 1):
        print(f"run {n}: {row}")


if __name__ == "__main__":
    main()

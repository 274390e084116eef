"""Every worker's metrics on any worker's `/metrics` (``ANDROID_EDGE_WORKERS`` > 1).

The workers share one listening socket, so a scrape reaches whichever accepts it first: on
its own, `/metrics` would show that worker alone, and "how many devices does this edge
hold" would read a fraction. The supervisor gives its workers a private directory; each
writes its exposition there every ``SNAPSHOT_S`` (atomically), and the worker answering a
scrape returns its own live metrics and the other workers' snapshots, every series
labelled ``worker="<index>"`` (sum them in PromQL: ``sum without(worker) (...)``). A
snapshot older than ``STALE_S`` (a worker dead and not yet restarted) is left out.

``merge`` is the pure part; ``WorkerSnapshots`` reads and writes the files.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from .supervisor import METRICS_DIR_ENV, WORKER_INDEX_ENV

log = logging.getLogger("hdg.edge")

SNAPSHOT_S = 2.0
STALE_S = 30.0
_PREFIX = "worker-"
_SUFFIX = ".prom"


def _labelled(sample: str, worker: str) -> str:
    """A sample line (``name{labels} value`` or ``name value``) with the worker label."""
    brace, space = sample.find("{"), sample.find(" ")
    label = f'worker="{worker}"'
    if brace >= 0 and (space < 0 or brace < space):  # a name has no spaces: labels follow
        return f"{sample[: brace + 1]}{label},{sample[brace + 1 :]}"
    if space < 0:
        return sample  # not a sample line: left as it is
    return f"{sample[:space]}{{{label}}}{sample[space:]}"


def merge(parts: list[tuple[str, str]]) -> str:
    """One exposition from several workers' ``(index, text)``: each metric family once, its
    ``# HELP``/``# TYPE`` lines first, then every worker's samples of it, labelled."""
    headers: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    for worker, text in parts:
        family = ""
        for line in text.splitlines():
            if not line:
                continue
            if line.startswith("# HELP ") or line.startswith("# TYPE "):
                family = line.split(" ", 3)[2]
                header = headers.setdefault(family, [])
                samples.setdefault(family, [])
                kind = line[:7]
                if not any(h.startswith(kind) for h in header):
                    header.append(line)
            elif line.startswith("#"):
                continue
            else:
                samples.setdefault(family, []).append(_labelled(line, worker))
    out: list[str] = []
    for family, lines in samples.items():
        out += headers.get(family, [])
        out += lines
    return "\n".join(out) + "\n" if out else ""


class WorkerSnapshots:
    """This worker's snapshot file, and the scrape answer made of every worker's."""

    def __init__(
        self,
        directory: Path,
        index: str,
        render: Callable[[], bytes],
        snapshot_s: float = SNAPSHOT_S,
    ) -> None:
        self.directory = directory
        self.index = index
        self.render = render
        self.snapshot_s = snapshot_s
        self._task: asyncio.Task[None] | None = None

    def _path(self, index: str) -> Path:
        return self.directory / f"{_PREFIX}{index}{_SUFFIX}"

    def write(self) -> None:
        path = self._path(self.index)
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_bytes(self.render())
        os.replace(temporary, path)  # a reader sees the old snapshot or the new one

    def exposition(self, now: float | None = None) -> bytes:
        at = time.time() if now is None else now
        parts = [(self.index, self.render().decode())]
        for path in sorted(self.directory.glob(f"{_PREFIX}*{_SUFFIX}")):
            index = path.name[len(_PREFIX) : -len(_SUFFIX)]
            if index == self.index:
                continue
            try:
                if at - path.stat().st_mtime > STALE_S:
                    continue
                parts.append((index, path.read_text(encoding="utf-8")))
            except OSError:  # removed meanwhile (the supervisor stopping)
                continue
        return merge(parts).encode()

    async def run(self) -> None:
        while True:
            try:
                self.write()
            except OSError as exc:  # a full disk must not stop the edge; say so, once a cycle
                log.warning("could not write this worker's metrics snapshot: %s", exc)
            await asyncio.sleep(self.snapshot_s)

    def start(self) -> None:
        """Write a snapshot now and every ``snapshot_s`` until ``stop``."""
        self._task = asyncio.create_task(self.run(), name="hdg-worker-metrics")

    async def stop(self) -> None:
        """Stop writing, and take this worker's snapshot away (its series end with it)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.remove()

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self._path(self.index).unlink()


def from_environment(render: Callable[[], bytes]) -> WorkerSnapshots | None:
    """In a supervised worker (the supervisor set the directory): its snapshots; else None."""
    directory, index = os.environ.get(METRICS_DIR_ENV), os.environ.get(WORKER_INDEX_ENV)
    if not directory or index is None:
        return None
    return WorkerSnapshots(Path(directory), index, render)


__all__ = ["STALE_S", "WorkerSnapshots", "from_environment", "merge"]

"""How late Hermes' event loop runs what is due (``ANDROID_LOOP_PROBE``).

The plugin shares the gateway's one asyncio loop with every other platform: anything
synchronous it does there delays them all. The probe sleeps 1 ms over and over and
records how much later than asked it woke up (the loop's lag); a wake-up later than
`SLOW_S` logs the callbacks that ran in between, slowest first, with their duration.
Those are timed by wrapping `asyncio.Handle._run` while the probe runs (a plain Python
call around each callback, about a microsecond); garbage collections that long are logged
too (`gc.callbacks`), whichever thread they ran on.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("hdg.plugin.loop")

INTERVAL_S = 0.001
WINDOW = 60_000  # lag samples kept (about a minute at 1 kHz)
SLOW_S = 0.020  # a callback running this long is logged
SLOW_KEPT = 20


@dataclass(frozen=True)
class LagFigures:
    samples: int
    p50_ms: float
    p99_ms: float
    max_ms: float

    def as_json(self) -> dict[str, float]:
        return {
            "samples": self.samples,
            "p50_ms": round(self.p50_ms, 3),
            "p99_ms": round(self.p99_ms, 3),
            "max_ms": round(self.max_ms, 3),
        }


def _quantile(ordered: list[float], q: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class LoopProbe:
    def __init__(self, interval_s: float = INTERVAL_S, slow_s: float = SLOW_S) -> None:
        self.interval_s = interval_s
        self.slow_s = slow_s
        self.lags: deque[float] = deque(maxlen=WINDOW)
        self.max_lag = 0.0
        # The slowest callbacks seen: (seconds, description), longest first.
        self.slowest: list[tuple[float, str]] = []
        self._task: asyncio.Task[None] | None = None
        self._original_run: Callable[[asyncio.Handle], None] | None = None
        self._gc_began = 0.0

    def start(self) -> None:
        if self._task is None:
            self._time_callbacks()
            gc.callbacks.append(self._on_gc)
            self._task = asyncio.get_running_loop().create_task(self._run(), name="hdg-loop-probe")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        if self._original_run is not None:
            asyncio.Handle._run = self._original_run  # type: ignore[method-assign,assignment]
            self._original_run = None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    def reset(self) -> None:
        self.lags.clear()
        self.max_lag = 0.0
        self.slowest = []

    def figures(self) -> LagFigures:
        """The figures so far; safe from another thread (a metrics scrape)."""
        ordered: list[float] = []
        for _ in range(5):
            try:
                ordered = sorted(self.lags)
                break
            except RuntimeError:  # the loop appended meanwhile
                continue
        return LagFigures(
            len(ordered),
            _quantile(ordered, 0.5) * 1000,
            _quantile(ordered, 0.99) * 1000,
            self.max_lag * 1000,
        )

    def record(self, lag: float) -> None:
        self.lags.append(lag)
        if lag > self.max_lag:
            self.max_lag = lag

    def note_callback(self, seconds: float, what: str) -> None:
        if seconds < self.slow_s:
            return
        log.warning("event loop blocked %.1f ms by %s", seconds * 1000, what)
        self.slowest.append((seconds, what))
        self.slowest.sort(reverse=True)
        del self.slowest[SLOW_KEPT:]

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_began = time.perf_counter()
        elif self._gc_began:
            spent, self._gc_began = time.perf_counter() - self._gc_began, 0.0
            self.note_callback(spent, f"garbage collection of generation {info['generation']}")

    async def _run(self) -> None:
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(self.interval_s)
            self.record(max(0.0, time.perf_counter() - asked - self.interval_s))

    def _time_callbacks(self) -> None:
        original: Callable[[asyncio.Handle], None] = asyncio.Handle._run
        self._original_run = original
        probe = self

        def timed_run(handle: asyncio.Handle) -> None:
            began = time.perf_counter()
            try:
                original(handle)
            finally:
                spent = time.perf_counter() - began
                if spent >= probe.slow_s:
                    probe.note_callback(spent, _describe(handle))

        asyncio.Handle._run = timed_run  # type: ignore[method-assign,assignment]


def _describe(handle: Any) -> str:
    callback = getattr(handle, "_callback", None)
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro = owner.get_coro()
        frame = getattr(coro, "cr_frame", None)
        where = f" at {frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else ""
        return f"task {owner.get_name()} ({getattr(coro, '__qualname__', coro)}){where}"
    return repr(callback)


__all__ = ["LagFigures", "LoopProbe"]

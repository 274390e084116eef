"""The one workload every system in the fan-out benchmark sends: an iris-shaped
``message.update`` frame carrying a cursor (checked per device for loss) and the producer's
CLOCK_MONOTONIC timestamp in its text (for publish-to-receipt latency), padded to a size."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

TS_DIGITS = 19
# Iris frame keys in the order the edge's codec writes them: cursor precedes text.
_SKELETON = {
    "type": "message.update",
    "chat_id": "bench",
    "thread_id": None,
    "cursor": 1_000_000,
    "message_id": "m-t000-0000000",
    "text": "",
}
_OVERHEAD = len(json.dumps(_SKELETON, separators=(",", ":")))


def pad_for(size: int) -> str:
    """Padding so the frame is ``size`` bytes (± a few: cursor and id digits vary)."""
    return "x" * max(0, size - _OVERHEAD - 1 - TS_DIGITS)


def stamp(pad: str) -> str:
    return f"~{time.monotonic_ns():0{TS_DIGITS}d}{pad}"


def frame(cursor: int, message_id: str, pad: str) -> dict[str, Any]:
    return {
        "type": "message.update",
        "chat_id": "bench",
        "thread_id": None,
        "cursor": cursor,
        "message_id": message_id,
        "text": stamp(pad),
    }


async def paced(
    rate: float,
    duration: float,
    emit: Callable[[int], Awaitable[None] | None],
    tick: float = 0.002,
) -> dict[str, Any]:
    """Call ``emit(k)`` so that ``rate`` events/s go out for ``duration`` s. A producer that
    cannot keep up never bursts more than 20 ms worth at once; ``achieved`` tells."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    deadline = t0 + duration
    total = max(1, int(rate * duration))
    burst = max(1, int(rate * 0.02))
    sent = 0
    late_ticks = 0
    for _ in range(int(duration / tick * 4) + 1000):  # bounded: ticks, not events
        now = loop.time()
        if sent >= total or now >= deadline + 1.0:
            break
        due = min(total, int((now - t0) * rate) + 1)
        k = due - sent
        if k > burst:
            k = burst
            late_ticks += 1
        if k > 0:
            result = emit(k)
            if result is not None:
                await result
            sent += k
        await asyncio.sleep(tick)
    elapsed = loop.time() - t0
    return {
        "sent": sent,
        "elapsed_s": round(elapsed, 3),
        "achieved_rate": round(sent / max(elapsed, 1e-9), 1),
        "late_ticks": late_ticks,
    }

"""The loop probe measures how late the loop runs and names what blocked it."""

from __future__ import annotations

import asyncio
import gc
import time

from gateway_plugin.loop_probe import LoopProbe


def _block_for(seconds: float) -> None:
    time.sleep(seconds)


async def test_a_blocking_callback_shows_as_lag_and_is_named() -> None:
    probe = LoopProbe(slow_s=0.02)
    original = asyncio.Handle._run
    probe.start()
    try:
        await asyncio.sleep(0.05)
        asyncio.get_running_loop().call_soon(_block_for, 0.08)
        await asyncio.sleep(0.05)
        figures = probe.figures()
    finally:
        await probe.stop()
    assert asyncio.Handle._run is original
    assert figures.samples > 5
    assert figures.max_ms >= 60
    assert figures.p50_ms < figures.max_ms
    assert probe.slowest and probe.slowest[0][0] >= 0.08
    assert "_block_for" in probe.slowest[0][1]


async def test_reset_forgets_what_was_measured() -> None:
    probe = LoopProbe()
    probe.record(0.5)
    probe.note_callback(0.5, "something slow")
    probe.reset()
    assert probe.figures().samples == 0 and probe.figures().max_ms == 0
    assert probe.slowest == []


async def test_a_long_garbage_collection_is_named() -> None:
    probe = LoopProbe(slow_s=0.0)
    probe.start()
    try:
        gc.collect()
    finally:
        await probe.stop()
    assert any(what == "garbage collection of generation 2" for _, what in probe.slowest)
    assert probe._on_gc not in gc.callbacks

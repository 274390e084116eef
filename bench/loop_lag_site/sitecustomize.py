"""Loaded by `bench/loop_lag.py` into the `hermes gateway run` it measures (on PYTHONPATH):
the gateway's main-thread event loop gets `gateway_plugin.loop_probe.LoopProbe` (this
tree's file, so a gateway running an older tree is measured the same way), and a daemon
thread writes the probe's figures to ``HDG_BENCH_LAG_FILE`` every 0.5 s. Creating
``<file>.reset`` clears them (the bench does so once its load has started)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

_OUT = os.environ.get("HDG_BENCH_LAG_FILE")


def _load_probe() -> Any:
    source = Path(__file__).resolve().parents[2] / "gateway_plugin" / "loop_probe.py"
    spec = importlib.util.spec_from_file_location("hdg_bench_loop_probe", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _sampler(counts: dict[str, int]) -> None:
    """Where every other thread is, every 10 ms: the busiest places name what competes
    with the loop for the GIL."""
    me = threading.get_ident()
    names = {t.ident: t.name for t in threading.enumerate()}
    while True:
        time.sleep(0.01)
        for ident, frame in sys._current_frames().items():
            if ident == me:
                continue
            if ident not in names:
                names = {t.ident: t.name for t in threading.enumerate()}
            code = frame.f_code
            where = f"{names.get(ident, ident)} {Path(code.co_filename).name}:{code.co_name}:{frame.f_lineno}"
            counts[where] = counts.get(where, 0) + 1


def _writer(probe: Any, loop: asyncio.AbstractEventLoop, out: Path) -> None:
    reset = out.with_name(out.name + ".reset")
    places: dict[str, int] = {}
    threading.Thread(target=_sampler, args=(places,), daemon=True, name="lag-sampler").start()
    while True:
        time.sleep(0.5)
        if reset.exists():
            reset.unlink()
            places.clear()
            loop.call_soon_threadsafe(probe.reset)
            continue
        try:
            figures = probe.figures().as_json()
            slowest = [[round(s * 1000, 1), what] for s, what in list(probe.slowest)]
        except RuntimeError:  # the deque moved under us: next round
            continue
        tmp = out.with_name(out.name + ".tmp")
        busiest = sorted(dict(places).items(), key=lambda kv: -kv[1])[:25]
        tmp.write_text(json.dumps({"lag": figures, "slowest": slowest, "places": busiest}))
        tmp.replace(out)


def _install(out: Path) -> None:
    original = asyncio.BaseEventLoop.run_forever
    started: list[bool] = []

    def run_forever(self: asyncio.BaseEventLoop) -> None:
        if not started and threading.current_thread() is threading.main_thread():
            started.append(True)
            probe = _load_probe().LoopProbe()
            self.call_soon(probe.start)
            threading.Thread(
                target=_writer, args=(probe, self, out), daemon=True, name="lag-writer"
            ).start()
        original(self)

    asyncio.BaseEventLoop.run_forever = run_forever  # type: ignore[method-assign]


if _OUT:
    _install(Path(_OUT))

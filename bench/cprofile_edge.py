"""`python bench/cprofile_edge.py`: `python -m edge` under cProfile, for exact call counts.

py-spy samples (cheap, but a few hundred samples say little about a 2 % piece); cProfile
counts every call and its own time, at the price of slowing Python code (per-call
overhead: compare shares, not absolute figures). The profile is dumped every 2 s to
``$BENCH_CPROFILE_DIR/edge-<pid>-<n>.prof`` (cumulative), so the dump right after a
connection storm shows the storm alone; nothing waits for the edge to exit. Used by
`bench/procs.py` when ``BENCH_CPROFILE_DIR`` is set, and by the plugin role of
`bench/connections.py` (``plugin-<pid>-<n>.prof``).
"""

from __future__ import annotations

import cProfile
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

DUMP_EVERY_S = 2.0


def start_dumping(prefix: str) -> cProfile.Profile:
    """Profile this process from now on, dumping to $BENCH_CPROFILE_DIR every 2 s."""
    out = Path(os.environ["BENCH_CPROFILE_DIR"])
    out.mkdir(parents=True, exist_ok=True)
    # BENCH_CPROFILE_TIMER=cpu: the thread's CPU time, not the wall clock, so a process
    # preempted by another on its core (Redis, the plugin) is not billed for their time.
    cpu = os.environ.get("BENCH_CPROFILE_TIMER") == "cpu"
    profile = cProfile.Profile(time.thread_time_ns, 1e-9) if cpu else cProfile.Profile()
    dumps = 0

    def dump(signum: int, frame: FrameType | None) -> None:
        # Runs on the main thread (the event loop's) between bytecodes: safe to pause.
        nonlocal dumps
        profile.disable()
        dumps += 1
        profile.dump_stats(out / f"{prefix}-{os.getpid()}-{dumps:03d}.prof")
        profile.enable()

    signal.signal(signal.SIGUSR2, dump)

    def ticker() -> None:
        while True:
            time.sleep(DUMP_EVERY_S)
            os.kill(os.getpid(), signal.SIGUSR2)

    threading.Thread(target=ticker, name="cprofile-dump", daemon=True).start()
    profile.enable()
    return profile


def main() -> int:
    sys.argv = ["edge"]
    sys.path.insert(0, os.getcwd())  # the code under test (BENCH_CODE_ROOT), as -m would
    from edge.__main__ import main as edge_main

    start_dumping("edge")
    return edge_main()


if __name__ == "__main__":
    sys.exit(main())

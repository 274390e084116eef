"""The transcoder's own process: ``python -m workers.media.child``.

Reads one request (JSON) on stdin, caps its own memory (``RLIMIT_DATA``), runs the
transcoder and writes one outcome (JSON) on stdout. Decoders allocate a frame before
anything can check its size, and a thread cannot be stopped: in a process of its own a
hostile or huge file fails on its cap (``too_large``) instead of growing the worker (or,
embedded, the Hermes gateway itself), and a job timeout kills it outright.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import sys
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int) -> None:
    """Be killed when the worker that started us dies, even by SIGKILL: an orphaned
    transcode would run on with nobody to take its outcome (Linux; elsewhere a no-op)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(1)


def cap_memory(megabytes: int) -> None:
    """Cap this process's data segment and anonymous mappings (0: no cap)."""
    if megabytes > 0:
        limit = megabytes * MIB
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def run(request: dict[str, Any]) -> dict[str, Any]:
    # Imported after the cap: what they map counts against it too.
    from ..errors import MediaError
    from .limits import MediaLimits
    from .transcoders import TRANSCODERS

    limits = MediaLimits(**request["limits"])
    try:
        produced = TRANSCODERS[request["kind"]](Path(request["src"]), Path(request["out"]), limits)
    except MediaError as exc:
        return {"error": {"code": exc.code, "reason": exc.message}}
    except MemoryError:
        reason = f"decoding it needs more than HDG_MEDIA_MAX_MEMORY_MB ({request['memory_mb']} MB)"
        return {"error": {"code": "too_large", "reason": reason}}
    paths = {k: str(v) for k, v in produced.items() if isinstance(v, Path)}
    details = {k: v for k, v in produced.items() if not isinstance(v, Path)}
    return {"paths": paths, "details": details}


def main() -> int:
    request = json.loads(sys.stdin.readline())
    die_with_parent(int(request["parent"]))
    cap_memory(int(request["memory_mb"]))
    try:
        outcome = run(request)
    except MemoryError:  # where nothing could even be reported above: say so plainly
        outcome = {"error": {"code": "too_large", "reason": "out of memory while transcoding"}}
    except Exception as exc:  # a transcoder bug or an unforeseen decoder failure
        outcome = {
            "error": {"code": "corrupt", "reason": f"the transcoder failed ({type(exc).__name__})"}
        }
    sys.stdout.write(json.dumps(outcome) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

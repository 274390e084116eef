"""Running a transcoder in its own process (``workers.media.child``) from a job.

The job awaits the child; if the job is cancelled (its timeout, a worker stopping), the
child is killed, and if the worker dies (even by SIGKILL) the kernel kills the child, so
a transcode never outlives its job. A child that dies without an
outcome (killed by the kernel, a decoder crash) fails the file as ``corrupt``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, get_args

from ..errors import MediaError, MediaErrorCode
from .limits import MediaLimits

__all__ = ["transcode_in_child"]

CODES: tuple[MediaErrorCode, ...] = get_args(MediaErrorCode)
# The outcome is one short JSON line; anything much longer is not one.
MAX_OUTCOME_BYTES = 1024 * 1024


async def transcode_in_child(
    kind: str, src: Path, out: Path, limits: MediaLimits, memory_mb: int
) -> dict[str, Any]:
    """What ``TRANSCODERS[kind](src, out, limits)`` returns, computed in a child process
    capped at `memory_mb` (0: no cap); raises MediaError as the transcoder would."""
    request = {
        "kind": kind,
        "src": str(src),
        "out": str(out),
        "limits": dataclasses.asdict(limits),
        "memory_mb": memory_mb,
        "parent": os.getpid(),  # the child dies with this process (child.die_with_parent)
    }
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "workers.media.child",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,  # decoder chatter; outcomes come on stdout
    )
    try:
        stdout, _ = await child.communicate(json.dumps(request).encode() + b"\n")
    finally:
        if child.returncode is None:  # cancelled: the transcode must not run on
            child.kill()
            await child.wait()
    return outcome(stdout, child.returncode)


def outcome(stdout: bytes, returncode: int | None) -> dict[str, Any]:
    """The child's report as the transcoder's result (paths as Paths), or MediaError."""
    try:
        report = json.loads(stdout[:MAX_OUTCOME_BYTES]) if stdout else None
    except ValueError:
        report = None
    if not isinstance(report, dict):
        raise MediaError(
            "corrupt", f"the transcoder stopped without an outcome ({_how(returncode)})"
        )
    error = report.get("error")
    if isinstance(error, dict):
        code = error.get("code")
        raise MediaError(code if code in CODES else "corrupt", str(error.get("reason", "")))
    paths = {str(k): Path(v) for k, v in (report.get("paths") or {}).items()}
    return {**(report.get("details") or {}), **paths}


def _how(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"

"""The C devices of the connections bench (``bench/lean_client.c``), built on demand.

The binary goes to ``bench/results/.build/`` (ignored by git), named after the source's
hash, so an edited source is rebuilt and a stale binary is never run. Without a C
compiler there is no binary: the bench then says so and uses the Python devices.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("lean_client.c")
BUILD = Path(__file__).with_name("results") / ".build"


def native_client() -> Path | None:
    """The built client, or None if no C compiler is available (or it fails)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    binary = BUILD / f"lean_client-{digest}"
    if binary.exists():
        return binary
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    BUILD.mkdir(parents=True, exist_ok=True)
    partial = binary.with_suffix(".tmp")
    done = subprocess.run(
        [compiler, "-O2", "-Wall", "-o", str(partial), str(SOURCE), "-lm"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        print(f"bench: could not build {SOURCE.name}:\n{done.stderr}", flush=True)
        return None
    partial.rename(binary)
    return binary

"""Atomic file output: write a temporary sibling, fsync, then ``os.replace``.

A job killed half-way leaves at most a hidden ``.*.part`` file (swept by retention),
never a truncated output under the final name. A re-run replaces the output whole.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_output", "atomic_write_bytes", "temp_sibling"]


def temp_sibling(final: Path) -> Path:
    """A unique hidden temporary path in ``final``'s directory (same filesystem)."""
    return final.with_name(f".{final.name}.{secrets.token_hex(6)}.part")


@contextlib.contextmanager
def atomic_output(final: Path) -> Iterator[Path]:
    """Yield a temporary path; on clean exit move it over ``final`` atomically.

    The caller writes the temporary path completely (any library, any format). On an
    exception the temporary file is removed and ``final`` is left untouched.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(final)
    try:
        yield tmp
        _fsync_file(tmp)
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    _fsync_dir(final.parent)


def atomic_write_bytes(final: Path, data: bytes) -> None:
    """Write ``data`` to ``final`` atomically."""
    with atomic_output(final) as tmp:
        tmp.write_bytes(data)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

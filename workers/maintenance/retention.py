"""Retention: delete media files older than ``HDG_MEDIA_RETENTION_DAYS`` (default 7).

The media root is the gateway's attachment storage (``<tenant>/<attachment_id>``, with
the previews of each in ``<tenant>/derived/<attachment_id>/``). A registered attachment
is never swept here: the plugin's registry expires it (``ANDROID_ATTACHMENT_RETENTION_DAYS``,
which may be longer, or forever), and its previews stay while it does. What is swept is
everything else: previews of attachments that are gone, and what jobs left behind
(also the temporary files a killed job left among a live attachment's previews).

Safe next to live traffic: only entries whose own mtime is older than the cutoff are
touched, symlinks are never followed (a link is removed as a link), files that vanish
mid-sweep are ignored, and a directory is removed only when empty *and* old, so a
directory a job has just created (fresh mtime) survives (an old one is removed only
if ``rmdir`` finds it empty).

``extra_retention_tasks`` is the hook for other stores (the outbox trim is added by
the gateway): every coroutine function appended there is awaited with the job's
``ctx`` after the file sweep; one failing task is logged and does not stop the others.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import stat
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..context import resources
from ..metrics import JOB_DURATION

__all__ = [
    "RetentionTask",
    "SweepReport",
    "extra_retention_tasks",
    "retention_sweep",
    "sweep_files",
]

log = logging.getLogger(__name__)

RetentionTask = Callable[[dict[str, Any]], Awaitable[object]]

#: Extra retention coroutines, awaited in order by :func:`retention_sweep`.
extra_retention_tasks: list[RetentionTask] = []


@dataclass
class SweepReport:
    files_deleted: int = 0
    bytes_deleted: int = 0
    dirs_deleted: int = 0
    errors: list[str] = field(default_factory=list)


def sweep_files(root: Path, cutoff: float) -> SweepReport:
    """Delete entries under ``root`` (not ``root`` itself) last modified before ``cutoff``."""
    report = SweepReport()
    if root.is_dir():
        _sweep_dir(str(root), cutoff, report)
    return report


_ATTACHMENT_ID = re.compile(r"[0-9a-f]{32}")
# What ``workers.atomic.temp_sibling`` names a file being written: a job killed mid-write
# leaves it behind, and a re-run writes under a new name.
_TEMPORARY = re.compile(r"\..+\.[0-9a-f]{12}\.part", re.DOTALL)


def _registered(path: str, name: str, depth: int) -> bool:
    """Whether the entry ``name`` of the directory ``path`` (whose entries are ``depth``
    levels below the root) is a registered attachment or the previews of one that exists."""
    if not _ATTACHMENT_ID.fullmatch(name):
        return False
    if depth == 2:  # <root>/<tenant>/<attachment_id>
        return True
    return (  # <root>/<tenant>/derived/<attachment_id>/ while the attachment exists
        depth == 3
        and os.path.basename(path) == "derived"
        and os.path.lexists(os.path.join(os.path.dirname(path), name))
    )


def _sweep_dir(path: str, cutoff: float, report: SweepReport, depth: int = 1) -> None:
    try:
        entries = list(os.scandir(path))
    except FileNotFoundError:
        return
    except OSError as exc:
        report.errors.append(f"{path}: {exc.strerror}")
        return
    for entry in entries:
        if _registered(path, entry.name, depth):
            if depth == 3:  # a live attachment's previews: only what a killed job left
                _sweep_temporaries(entry.path, cutoff, report)
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(info.st_mode):
            _sweep_dir(entry.path, cutoff, report, depth + 1)
            if info.st_mtime < cutoff:
                _remove_empty_dir(entry.path, report)
        elif info.st_mtime < cutoff:
            _delete_file(entry.path, info.st_size, report)


def _sweep_temporaries(path: str, cutoff: float, report: SweepReport) -> None:
    """Delete the old temporary files (``workers.atomic``) in the directory ``path``."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        return  # not a directory, vanished or unreadable: nothing of ours to clear
    for entry in entries:
        if not _TEMPORARY.fullmatch(entry.name):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError as exc:
            report.errors.append(f"{entry.path}: {exc.strerror}")
            continue
        if stat.S_ISREG(info.st_mode) and info.st_mtime < cutoff:
            _delete_file(entry.path, info.st_size, report)


def _delete_file(path: str, size: int, report: SweepReport) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return  # gone meanwhile: nothing to count
    except OSError as exc:
        report.errors.append(f"{path}: {exc.strerror}")
        return
    report.files_deleted += 1
    report.bytes_deleted += size


def _remove_empty_dir(path: str, report: SweepReport) -> None:
    try:
        os.rmdir(path)  # fails unless empty: a job writing into it keeps it alive
    except OSError:
        return  # not empty, vanished or busy: leave it
    report.dirs_deleted += 1


async def retention_sweep(ctx: dict[str, Any]) -> dict[str, Any]:
    """Cron job: sweep the media root, then run ``extra_retention_tasks``."""
    with JOB_DURATION.labels(job="retention_sweep").time():
        config = resources(ctx).config
        result: dict[str, Any] = {
            "media_root": str(config.media_root) if config.media_root else None
        }
        if config.media_root is not None:
            cutoff = time.time() - config.media_retention_days * 86_400
            report = await asyncio.to_thread(sweep_files, config.media_root, cutoff)
            result.update(
                files_deleted=report.files_deleted,
                bytes_deleted=report.bytes_deleted,
                dirs_deleted=report.dirs_deleted,
                errors=report.errors[:20],
            )
        extra: dict[str, str] = {}
        for task in list(extra_retention_tasks):
            name = getattr(task, "__qualname__", repr(task))
            try:
                await task(ctx)
            except Exception as exc:  # one hook's failure must not stop the others
                log.exception("retention task %s failed", name)
                extra[name] = f"failed: {exc!r}"
            else:
                extra[name] = "ok"
        result["extra_tasks"] = extra
        return result

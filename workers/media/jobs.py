"""The ``media_transcode`` job: one uploaded file -> its derived files, idempotently.

Job payload: ``{idempotency_key, kind: image|audio|video, src_path, out_dir}``. Both
paths are server-generated; the job still confines them to the media root
(``HDG_MEDIA_ROOT``) and refuses anything else. The transcoder runs in a process of its
own (``workers.media.isolated``), capped at ``HDG_MEDIA_MAX_MEMORY_MB``, so the event loop
keeps serving other jobs and a file that would need more fails as ``too_large`` instead
of growing this process; it writes every output atomically, so a re-run after a crash
replaces outputs whole.

A transcode that outlives ``HDG_MEDIA_JOB_TIMEOUT`` fails the job and its process is
killed.

Returns ``{"outcome": "done", "kind": ..., "outputs": {name: path relative to the
media root}, ...}`` or ``{"outcome": "failed", "code": corrupt|too_large|unsupported|
unsafe_path|bad_payload|not_configured, "reason": ...}``; never raises for bad input.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..config import WorkerConfig
from ..context import resources
from ..errors import JobPayloadError, MediaError, UnsafePathError
from ..metrics import JOB_DURATION
from ..paths import confine
from .isolated import transcode_in_child
from .limits import MediaLimits
from .transcoders import TRANSCODERS

__all__ = ["TRANSCODERS", "media_transcode"]

log = logging.getLogger(__name__)


def limits_from(config: WorkerConfig) -> MediaLimits:
    return MediaLimits(max_pixels=config.media_max_pixels, max_seconds=config.media_max_seconds)


async def media_transcode(ctx: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    """Transcode one uploaded file; returns an outcome dict (see module docstring)."""
    with JOB_DURATION.labels(job="media_transcode").time():
        res = resources(ctx)
        try:
            key, kind, src_path, out_dir = _parse(job)
        except JobPayloadError as exc:
            return _failed("bad_payload", str(exc))

        recorded = await res.idempotency.get(key)
        if recorded is not None:
            return {**recorded, "duplicate": True}

        root = res.config.media_root
        if root is None:
            return _failed("not_configured", "HDG_MEDIA_ROOT: is not set, so media jobs cannot run")
        try:
            src = confine(root, src_path, must_be_file=True)
            out = confine(root, out_dir)
        except UnsafePathError as exc:
            log.warning("media job %s refused: %s", key, exc)
            return _failed("unsafe_path", str(exc))

        try:
            produced = await transcode_in_child(
                kind, src, out, limits_from(res.config), res.config.media_max_memory_mb
            )
        except MediaError as exc:
            log.info("media job %s failed: %s", key, exc)
            return {**_failed(exc.code, exc.message), "kind": kind}

        real_root = root.resolve()
        outputs = {
            k: str(v.relative_to(real_root)) for k, v in produced.items() if isinstance(v, Path)
        }
        details = {k: v for k, v in produced.items() if not isinstance(v, Path)}
        result = {
            "outcome": "done",
            "kind": kind,
            "idempotency_key": key,
            "outputs": outputs,
            **details,
        }
        await res.idempotency.mark_done(key, result, res.config.idempotency_ttl_seconds)
        return result


def _parse(job: Any) -> tuple[str, str, str, str]:
    if not isinstance(job, dict):
        raise JobPayloadError("job", "must be a dict")
    values: list[str] = []
    for name in ("idempotency_key", "kind", "src_path", "out_dir"):
        value = job.get(name)
        if not isinstance(value, str) or not value:
            raise JobPayloadError(name, "is required (a non-empty string)")
        values.append(value)
    if values[1] not in TRANSCODERS:
        raise JobPayloadError("kind", f"must be image, audio or video (got {values[1]!r})")
    return values[0], values[1], values[2], values[3]


def _failed(code: str, reason: str) -> dict[str, Any]:
    return {"outcome": "failed", "code": code, "reason": reason}

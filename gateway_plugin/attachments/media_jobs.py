"""Uploaded media gets its derived files: a WebP thumbnail for images (EXIF stripped,
orientation applied), Opus/Ogg for voice and audio (what Hermes' speech-to-text takes), a
poster and a small preview for video. The worker job does the work; this module starts it
when an upload is registered and tells every device the outcome (`media.ready` or
`media.failed` with the job's clear error), so a hostile file fails visibly and harmlessly.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from canonical.model import Json
from canonical.protocol import now_iso

if TYPE_CHECKING:
    from gateway_plugin.attachments.record import Attachment
    from gateway_plugin.controller import Controller

log = logging.getLogger("hdg.plugin.media")

KINDS = {"image": "image", "voice": "audio", "audio": "audio", "video": "video"}


# Failure codes that describe the file, whose reason a device may read.
_ABOUT_THE_FILE = frozenset({"corrupt", "too_large", "unsupported"})


def derived_dir(tenant_dir: Path, attachment_id: str) -> Path:
    """Where the worker writes an attachment's previews."""
    return tenant_dir / "derived" / attachment_id


def drop_outputs(tenant_dir: Path, attachment_ids: set[str]) -> int:
    """Delete the previews of attachments that are gone; how many directories went.

    Embedded, nothing else ever removes them (the workers' retention sweep runs in scaled
    mode only). A link in their place is left alone, never followed."""
    dropped = 0
    for attachment_id in attachment_ids:
        path = derived_dir(tenant_dir, attachment_id)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            dropped += not path.exists()
    return dropped


def job_for(record: Attachment, storage_root: Any, tenant_dir: Path) -> Json | None:
    kind = KINDS.get(record.kind)
    if kind is None:
        return None
    return {
        "idempotency_key": f"media:{record.attachment_id}",
        "kind": kind,
        "src_path": str(tenant_dir / record.attachment_id),
        "out_dir": str(derived_dir(tenant_dir, record.attachment_id)),
    }


def outcome_event(record: Attachment, result: Json | None) -> Json:
    base: Json = {
        "lane": [record.chat_id, record.thread_id],
        "conversation_id": record.conversation_id,
        "media_id": record.attachment_id,
        "ts": now_iso(),
    }
    if result is None:
        return {
            **base,
            "type": "media.failed",
            "code": "unavailable",
            "message": "the media worker is not reachable",
        }
    if result.get("outcome") == "done":
        variants = sorted(str(name) for name in (result.get("outputs") or {}))
        return {**base, "type": "media.ready", "kind": result.get("kind"), "variants": variants}
    code = str(result.get("code") or "failed")
    if code in _ABOUT_THE_FILE:
        message = str(result.get("reason") or "the file could not be processed")
    else:  # the worker's own set-up (paths, payload): its words name server paths
        message = "the media worker could not process this file; see the worker's log"
    return {**base, "type": "media.failed", "code": code, "message": message}


def start_transcode(controller: Controller, record: Attachment) -> None:
    """Fire and forget: the device hears the outcome as an event."""
    queue = controller.jobs
    if not queue.ready:
        return
    job = job_for(record, controller.attachments.storage_root, controller.attachments.directory)
    if job is None:
        return

    async def run() -> None:
        try:
            result = await queue.media(job)
        except Exception as exc:
            log.warning(
                "media job for %s did not finish: %s", record.attachment_id, type(exc).__name__
            )
            result = None
        if controller.running:
            controller.emit([outcome_event(record, result)])

    task = asyncio.get_running_loop().create_task(run())
    controller.background(task)

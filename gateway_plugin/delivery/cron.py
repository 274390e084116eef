"""Output nobody asked for right now: cron deliveries, in the gateway or from a CLI process.

Inside a running gateway Hermes delivers through the live adapter. A `hermes cron run`
in another process calls the platform's `standalone_sender_fn` instead: it resolves the
target through the channel directory and appends the delivery straight to the outbox
(SQLite, safe across processes); a running controller notices the new cursor and
publishes it, and devices otherwise get it by replay. Nothing goes through the memory bus,
which only exists inside the gateway. Files the run delivers (Hermes' ``MEDIA:`` tags) are
stored in the attachment registry and announced with ``attachment.added``, as the
gateway's media send methods (``adapter_media``) do.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from canonical.model import Json, Lane
from canonical.protocol import new_id
from canonical.settings import GatewaySettings
from gateway_plugin.attachments.flow import added_event
from gateway_plugin.attachments.record import AttachmentError
from gateway_plugin.attachments.registry import AttachmentRegistry
from gateway_plugin.channels.store import ChannelDirectory, ChannelEntry, ChannelError
from gateway_plugin.delivery.outbox import Outbox
from gateway_plugin.delivery.turns import TurnTracker

log = logging.getLogger("hdg.plugin.delivery")

Deliverable = tuple[Path, str | None]  # a file to deliver and its attachment kind

# The attachment kind each of Hermes' media send methods stores (None: classified from
# the file). Hermes routes a MEDIA: file to one of them by its extension.
MEDIA_KINDS: dict[str, str | None] = {
    "send_image_file": None,
    "send_voice": "voice",
    "send_video": "video",
    "send_document": "document",
}

# Hermes' cron wrapper (``cron.wrap_response``, on by default): "Cronjob Response: <name>",
# "(job_id: <id>)", a rule, a blank line, then the output.
_CRON_HEADER = re.compile(
    r"^Cronjob Response: (?P<name>.*)\n\(job_id: (?P<id>[^)\n]+)\)\n(?:-+\n)?\n?"
)


def cron_message(text: str, job_id: str | None) -> tuple[str, Json | None]:
    """A cron delivery as devices get it: the text under the seed's `[Cron delivery:
    <name>]` header in place of Hermes' wrapper header, and the job's {id, name} (name
    None when Hermes did not wrap the output; the text is then left as it is)."""
    match = _CRON_HEADER.match(text)
    if match is None:
        return text, ({"id": job_id, "name": None} if job_id else None)
    name = match.group("name").strip()
    job = {"id": match.group("id").strip(), "name": name}
    return f"[Cron delivery: {name}]\n\n{text[match.end() :]}", job


def unsolicited_run(
    turns: TurnTracker,
    lane: Lane,
    entry: ChannelEntry | None,
    content: str,
    metadata: dict[str, Any] | None,
) -> tuple[str, list[Json]]:
    """Output nobody asked for right now (cron, background), in the gateway: a complete
    run of its own; its segment id and events. ChannelError for a lane that is unknown or
    archived (`entry`): never delivered into one."""
    is_cron = bool((metadata or {}).get("job_id"))
    if entry is None or entry.archived:
        where = lane[0] if lane[1] is None else f"{lane[0]}:{lane[1]}"
        raise ChannelError(f"{where} is {'archived' if entry else 'unknown'}")
    cron_job = None
    if is_cron:
        content, cron_job = cron_message(content, str((metadata or {}).get("job_id")))
    segment_id, events = turns.complete_run(
        lane, entry.conversation_id, content, kind="cron" if is_cron else "reply"
    )
    if cron_job is not None:
        events[-2]["cron_job"] = cron_job  # its message.complete
    return segment_id, events


def cron_delivery_events(entry: ChannelEntry, text: str, job_id: str | None) -> list[Json]:
    """A complete run of kind `cron` carrying the delivered text."""
    text, cron = cron_message(text, job_id)
    tracker = TurnTracker()
    lane = (entry.chat_id, entry.thread_id)
    run, events = tracker.accept(lane, entry.conversation_id, implicit=True, kind="cron")
    _, deltas = tracker.on_send(run, text)
    finished = tracker.finish(lane, "completed")
    if cron is not None:
        finished[0]["cron_job"] = cron
    return events + deltas + finished


def resolve_target(channels: ChannelDirectory, chat_id: str, thread_id: str | None) -> ChannelEntry:
    """The lane a delivery names; unknown or archived targets raise ChannelError (never
    fall back to another channel)."""
    if thread_id:
        entry = channels.get(chat_id, thread_id)
        if entry is None:
            entry = channels.resolve_target(f"{chat_id}:{thread_id}")
    else:
        entry = channels.get(chat_id, None) or channels.resolve_target(chat_id)
    if entry.archived:
        raise ChannelError(f"{chat_id} is archived")
    return entry


def append_delivery(
    settings: GatewaySettings,
    data_dir: Path,
    tenant: str,
    chat_id: str,
    thread_id: str | None,
    text: str,
    job_id: str | None = None,
    media: Sequence[Deliverable] = (),
) -> Json:
    """A delivery from a process without the gateway: the cron run's events, then one
    ``attachment.added`` per stored file, appended to the outbox in one transaction."""
    channels = ChannelDirectory(data_dir / "channels.db", settings.home_channel)
    outbox = Outbox(data_dir / "outbox.db")
    try:
        channels.ensure_default()
        entry = resolve_target(channels, chat_id, thread_id)
        run = cron_delivery_events(entry, text, job_id)
        added = _store_media(settings, data_dir, tenant, entry, media) if media else []
        cursor = outbox.append(run + added)[len(run) - 1]["cursor"]
        return {"success": True, "message_id": f"cron-{cursor}-{new_id(4)}"}
    except ChannelError as exc:
        log.error(
            "android: cron delivery target %r thread %r not found (%s); not delivered",
            chat_id,
            thread_id,
            exc,
        )
        return {
            "error": f"android: no channel {chat_id!r}{f' thread {thread_id!r}' if thread_id else ''}: {exc}"
        }
    finally:
        outbox.close()
        channels.close()


def _store_media(
    settings: GatewaySettings,
    data_dir: Path,
    tenant: str,
    entry: ChannelEntry,
    media: Sequence[Deliverable],
) -> list[Json]:
    """Copy each file into the attachment registry the controller serves (its storage
    root and tenant); the ``attachment.added`` events. A file that cannot be stored is
    logged and skipped, the others are delivered."""
    registry = AttachmentRegistry(
        data_dir / "attachments.db",
        settings.attachments_dir or data_dir / "attachments",
        tenant,
        retention_days=settings.attachment_retention_days,
        max_bytes=settings.max_upload_bytes,
    )
    events: list[Json] = []
    try:
        for path, kind in media:
            try:
                record = registry.add_outbound(path, entry, kind=kind)
            except (AttachmentError, OSError) as exc:
                log.warning("android: cron deliverable not stored: %s", exc)
                continue
            events.append(added_event(record))
    finally:
        registry.close()
    return events


def cron_targets(
    jobs: list[Json], channels: ChannelDirectory, home_channel: str
) -> dict[Lane, list[Json]]:
    """Which cron jobs deliver into which lane (for the channel list's badge)."""
    out: dict[Lane, list[Json]] = {}
    for job in jobs:
        for target in _deliver_targets(job.get("deliver")):
            if target == "android":
                lane: Lane = (home_channel, None)
            elif target.startswith("android:"):
                try:
                    entry = channels.resolve_target(target[len("android:") :])
                except ChannelError:
                    continue
                lane = (entry.chat_id, entry.thread_id)
            else:
                continue
            out.setdefault(lane, []).append(
                {"id": job.get("id"), "name": job.get("name"), "schedule": _schedule(job)}
            )
    return out


def _deliver_targets(deliver: Any) -> list[str]:
    if isinstance(deliver, str):
        return [part.strip() for part in deliver.split(",") if part.strip()]
    if isinstance(deliver, list):
        return [str(part).strip() for part in deliver if str(part).strip()]
    return []


def _schedule(job: Json) -> str | None:
    schedule = job.get("schedule_display") or job.get("schedule")
    if isinstance(schedule, dict):
        return (
            str(schedule.get("display") or schedule.get("expr") or schedule.get("kind") or "")
            or None
        )
    return str(schedule) if schedule else None

"""What the plugin relies on inside Hermes beyond its public plugin API, in one list.

Hermes' platform-plugin API (``BasePlatformAdapter``, ``register_platform``, hooks) does
not cover everything a device gateway needs: session keys, the model and reasoning
commands, the start-up restore, the state.db transcript. For those the seam uses Hermes
internals, each listed here with where and why, and each checked before it is relied on:

- the attributes, when the adapter connects (:func:`check` with the live runner and
  session store Hermes wired in; importing and ``getattr`` only, no I/O);
- the state.db tables and columns, when the file is first opened (:func:`check_schema`,
  on whichever thread reads it: never the event loop).

A mismatch is one error line naming the symbol, the installed Hermes and the supported
one. ``feature=None`` symbols are load-bearing: the platform refuses to start. The others
switch one feature off (:func:`enabled` is False) and the rest keeps working.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from gateway_plugin.errors import CommandError

log = logging.getLogger("hdg.plugin")

SUPPORTED_HERMES: Final = "0.19.0"

# Features a mismatch switches off (None: the platform refuses to start instead).
PREFERENCES: Final = "model and reasoning selection"
HARD_STOP: Final = "hard stop of a turn that ignores its interrupt"
RESUME_NARROWING: Final = "start-up resume limited to unfinished runs"
STARTUP_WAIT: Final = "waiting for Hermes' start-up restore before reading history"
CRON_MEDIA_KINDS: Final = "cron files routed as image/video (else sent as documents)"
HISTORY: Final = "history, search and turn outcomes read from state.db"
HISTORY_DELETE: Final = "deleting a channel's Hermes sessions"


@dataclass(frozen=True)
class Private:
    """One Hermes internal. ``owner``: ``module:Qualified.Name`` resolved by import, or
    ``adapter`` / ``runner`` / ``session_store``: the live objects Hermes wires together."""

    owner: str
    name: str
    used_in: str  # module.function of this package, space-separated
    why: str
    feature: str | None = None

    @property
    def symbol(self) -> str:
        return f"{self.owner.replace(':', '.')}.{self.name}"


PRIVATE: Final[tuple[Private, ...]] = (
    Private(
        "gateway.run:GatewayRunner",
        "_session_key_for_source",
        "runner.session_key_for",
        "the session key every decision, interrupt, YOLO switch and preference names",
    ),
    Private(
        "gateway.platforms.base:BasePlatformAdapter",
        "_set_fatal_error",
        "adapter.connect",
        "how a platform that cannot start tells Hermes why",
    ),
    Private(
        "gateway.platforms.base:BasePlatformAdapter",
        "_mark_connected",
        "adapter.connect",
        "marks the platform running in Hermes' runtime status",
    ),
    Private(
        "gateway.platforms.base:BasePlatformAdapter",
        "_mark_disconnected",
        "adapter.disconnect",
        "marks the platform stopped in Hermes' runtime status",
    ),
    Private(
        "gateway.run:GatewayRunner",
        "_handle_model_command",
        "runner.run_model_command",
        "models.list and model.set run Hermes' own /model (credential-aware picker, switch)",
        PREFERENCES,
    ),
    Private(
        "gateway.run:GatewayRunner",
        "_handle_reasoning_command",
        "runner.run_reasoning_command",
        "reasoning.set runs Hermes' own /reasoning",
        PREFERENCES,
    ),
    Private(
        "gateway.run:GatewayRunner",
        "_resolve_session_reasoning_config",
        "runner.reasoning_state",
        "the reasoning effort in effect for a session (override or config)",
        PREFERENCES,
    ),
    Private(
        "runner",
        "_session_model_overrides",
        "runner.model_state runner.reasoning_state",
        "a conversation's /model override, which the device shows as its scope",
        PREFERENCES,
    ),
    Private(
        "runner",
        "_session_reasoning_overrides",
        "runner.reasoning_state",
        "a conversation's /reasoning override, which the device shows as its scope",
        PREFERENCES,
    ),
    Private(
        "runner",
        "_running_agents",
        "runner.agent_running",
        "whether a turn has its agent yet: /stop reaches only a turn that has one",
        HARD_STOP,
    ),
    Private(
        "gateway.run",
        "_AGENT_PENDING_SENTINEL",
        "runner.agent_running",
        "the placeholder _running_agents holds before the agent exists",
        HARD_STOP,
    ),
    Private(
        "runner",
        "_startup_restore_in_progress",
        "agent_port.wait_ready",
        "history is read only once Hermes' start-up restore has written it",
        STARTUP_WAIT,
    ),
    Private(
        "adapter",
        "_session_store",
        "adapter.connect",
        "the session store Hermes wires in (set_session_store) before connect",
        RESUME_NARROWING,
    ),
    *(
        Private(
            "session_store",
            name,
            "runner.keep_resumes_of",
            "clears the crash-resume mark of finished android sessions under Hermes' lock",
            RESUME_NARROWING,
        )
        for name in ("_lock", "_entries", "_ensure_loaded_locked", "_save")
    ),
    *(
        Private(
            "gateway.session:SessionEntry",
            name,
            "runner.keep_resumes_of",
            "the crash-resume mark and the lane it belongs to",
            RESUME_NARROWING,
        )
        for name in ("origin", "resume_pending", "resume_reason", "last_resume_marked_at")
    ),
    *(
        Private(
            "cron.scheduler",
            name,
            "cron_send.deliverables",
            "routes a cron MEDIA: file to a kind exactly as Hermes' own cron delivery does",
            CRON_MEDIA_KINDS,
        )
        for name in ("_IMAGE_EXTS", "_VIDEO_EXTS")
    ),
    Private(
        "hermes_state:SessionDB",
        "delete_session",
        "state_db.delete_sessions",
        "channel.delete removes the lane's sessions and messages the way Hermes does",
        HISTORY_DELETE,
    ),
)

# The state.db schema the SQL of `state_db` reads (tables → columns). The trigram index
# is optional: search falls back to LIKE without it.
STATE_DB_SCHEMA: Final[dict[str, tuple[str, ...]]] = {
    "sessions": ("id", "source", "chat_id", "thread_id", "started_at", "ended_at"),
    "messages": (
        "id",
        "session_id",
        "role",
        "content",
        "timestamp",
        "reasoning",
        "reasoning_content",
        "tool_calls",
        "active",
    ),
    "messages_fts": ("content",),
}


@dataclass(frozen=True)
class Mismatch:
    item: str  # the symbol, or state.db table.column
    feature: str | None

    def line(self) -> str:
        outcome = (
            "the android platform does not start"
            if self.feature is None
            else f"disabled: {self.feature}"
        )
        return (
            f"Hermes {installed_hermes()} lacks {self.item} (supported: Hermes "
            f"{SUPPORTED_HERMES}); {outcome}"
        )


def installed_hermes() -> str:
    try:
        return importlib.metadata.version("hermes-agent")
    except importlib.metadata.PackageNotFoundError:
        return "(unknown version)"


_MISSING = object()


def _resolve(owner: str, live: dict[str, Any]) -> Any:
    if owner in live:
        return live[owner]
    module_name, _, qualname = owner.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in filter(None, qualname.split(".")):
            target = getattr(target, part)
    except (ImportError, AttributeError):
        return _MISSING
    return target


def _present(target: Any, name: str) -> bool:
    if target is _MISSING:
        return False
    if hasattr(target, name):
        return True
    # A dataclass field without a default, or an attribute a class declares for its
    # instances without a class-level value.
    for klass in getattr(target, "__mro__", ()):
        if name in getattr(klass, "__annotations__", {}):
            return True
    return False


LIVE_OWNERS: Final = ("adapter", "runner", "session_store")


def check(adapter: Any = None, runner: Any = None, session_store: Any = None) -> list[Mismatch]:
    """Every listed internal that is missing. Live-object entries are checked only for
    the objects given (a `hermes cron` process has no runner)."""
    given = {"adapter": adapter, "runner": runner, "session_store": session_store}
    live = {name: obj for name, obj in given.items() if obj is not None}
    missing: list[Mismatch] = []
    for private in PRIVATE:
        if private.owner in LIVE_OWNERS and private.owner not in live:
            continue
        if not _present(_resolve(private.owner, live), private.name):
            missing.append(Mismatch(private.symbol, private.feature))
    return missing


def check_schema(conn: sqlite3.Connection) -> list[Mismatch]:
    """Every table or column of `STATE_DB_SCHEMA` that this state.db lacks."""
    missing: list[Mismatch] = []
    for table, columns in STATE_DB_SCHEMA.items():
        present = {str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")}
        if not present:
            missing.append(Mismatch(f"state.db table {table}", HISTORY))
            continue
        missing.extend(
            Mismatch(f"state.db column {table}.{column}", HISTORY)
            for column in columns
            if column not in present
        )
    return missing


class HermesUnsupported(Exception):
    """A load-bearing internal is missing: the platform must not start."""


_lock = threading.Lock()
_disabled: dict[str, Mismatch] = {}
_static_checked = False


def apply(mismatches: Iterable[Mismatch]) -> None:
    """Log each mismatch once (ERROR), switch its feature off; raise `HermesUnsupported`
    with the first line if any is load-bearing."""
    fatal: list[Mismatch] = []
    for mismatch in mismatches:
        if mismatch.feature is None:
            fatal.append(mismatch)
            log.error("%s", mismatch.line())
            continue
        with _lock:
            known = mismatch.feature in _disabled
            _disabled.setdefault(mismatch.feature, mismatch)
        if not known:
            log.error("%s", mismatch.line())
    if fatal:
        raise HermesUnsupported(fatal[0].line())


def enabled(feature: str) -> bool:
    """False once a mismatch switched `feature` off. The import-time symbols are checked
    here on first use too, for processes that never connect (`hermes cron run`)."""
    global _static_checked
    if not _static_checked:
        _static_checked = True
        apply(m for m in check() if m.feature is not None)
    return feature not in _disabled


def require(feature: str) -> None:
    """Raise the device-facing error of a switched-off feature."""
    if not enabled(feature):
        raise CommandError("unavailable", _disabled[feature].line())


def reset() -> None:
    """Forget every switched-off feature (a new connect checks again)."""
    global _static_checked
    with _lock:
        _disabled.clear()
        _static_checked = False


__all__ = [
    "CRON_MEDIA_KINDS",
    "HARD_STOP",
    "HISTORY",
    "HISTORY_DELETE",
    "PREFERENCES",
    "PRIVATE",
    "RESUME_NARROWING",
    "STARTUP_WAIT",
    "STATE_DB_SCHEMA",
    "SUPPORTED_HERMES",
    "HermesUnsupported",
    "Mismatch",
    "apply",
    "check",
    "check_schema",
    "enabled",
    "installed_hermes",
    "require",
    "reset",
]

"""Typed shapes both dialects share (`pheby_frames`, `pheby_server_frames`, `iris_frames`,
`iris_server_frames`, `iris_replies`).

Only types: the codecs keep building plain dicts (nothing here runs on the fan-out path);
mypy checks code annotated with these, and `edge.dialects.schema` turns them into the
published JSON Schemas. Every frame type is closed (`extra="forbid"`): the schemas say
exactly which fields this server sends and accepts.
"""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict

from canonical.protocol import MAX_CURSOR, MAX_TEXT_CHARS

# Each TypedDict a frame (or part of one) whose fields are exactly those declared.
closed = with_config(ConfigDict(extra="forbid"))

# "2026-12-01T02:36:05.564+00:00": ISO-8601 UTC, as both dialects print it.
Timestamp = Annotated[
    str, Field(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?\+00:00$")
]
# Any client-chosen string of at most 256 characters, or an integer; echoed in replies.
RequestId = Annotated[
    Annotated[str, Field(max_length=256)] | Annotated[int, Field(ge=-MAX_CURSOR, le=MAX_CURSOR)],
    Field(description="Client-chosen; the direct answer echoes it."),
]
Cursor = Annotated[int, Field(ge=0, le=MAX_CURSOR)]
Id = Annotated[str, Field(min_length=1, max_length=64)]
Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
NonBlank = Annotated[Text, Field(pattern=r"\S")]  # not empty, not only whitespace
RunStatus = Literal["completed", "cancelled", "failed"]
ToolStatus = Literal["running", "completed", "failed", "cancelled"]
DecisionStatus = Literal["resolved", "expired"]
Scope = Literal["conversation", "global"]
ApprovalChoice = Literal["once", "session", "always", "deny"]
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra"]
AttachmentKind = Literal["image", "voice", "video", "audio", "document"]


@closed
class Ping(TypedDict):
    """Heartbeat; answered with `pong`."""

    type: Literal["ping"]
    request_id: NotRequired[RequestId]


@closed
class Pong(TypedDict):
    """The answer to `ping`."""

    type: Literal["pong"]
    ts: Timestamp
    request_id: NotRequired[RequestId]


@closed
class AttachmentDescriptor(TypedDict):
    """A file either side sent (docs/protocol/media.md, The descriptor)."""

    attachment_id: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
    filename: str
    mime_type: str
    size: Annotated[int, Field(ge=0)]
    kind: AttachmentKind
    inline_image: bool
    direction: Literal["inbound", "outbound"]
    conversation_id: str
    message_id: str | None
    created_at: Timestamp
    expires_at: Timestamp | None
    download_path: str


@closed
class ProviderModels(TypedDict):
    """One provider of Hermes' model picker."""

    slug: str
    name: str
    is_current: bool
    models: list[str]
    total_models: int

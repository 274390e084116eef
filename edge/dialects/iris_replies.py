"""The iris server's direct answers to requests, as TypedDicts (docs/protocol/iris.md,
media.md, operations.md); events are in `iris_server_frames`, which also holds the
`ServerFrame` union of both.
"""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

from .frames import AttachmentDescriptor, Cursor, RequestId, Timestamp, closed
from .iris_frames import IrisErrorCode


@closed
class CronTarget(TypedDict):
    id: str
    name: str | None
    schedule: str | None


@closed
class ChannelEntry(TypedDict):
    """A channel or thread; `cron_jobs` in `hello.ack` and `channel.list`."""

    chat_id: str
    thread_id: str | None
    name: str
    kind: Literal["default", "channel", "thread"]
    parent_chat_id: str | None
    is_default: bool
    automation: bool
    archived: bool
    threads_enabled: bool
    name_source: Literal["derived", "llm", "user"]
    auto: bool
    conversation_id: str
    created: float
    updated: float
    cron_jobs: NotRequired[list[CronTarget]]


@closed
class HelloAck(TypedDict):
    type: Literal["hello.ack"]
    version: Literal[1]
    server_caps: list[str]
    device_id: str
    sync_cursor: Cursor
    gap: bool
    ts: Timestamp
    request_id: NotRequired[RequestId]
    channels: list[ChannelEntry]


@closed
class ErrorBody(TypedDict):
    code: IrisErrorCode
    message: str


@closed
class Error(TypedDict):
    """`request_id` / `client_id` when the failed request had them."""

    type: Literal["error"]
    request_id: NotRequired[RequestId]
    client_id: NotRequired[str]
    error: ErrorBody
    ts: Timestamp


# `from` is a Python keyword: the functional form.
SyncAck = TypedDict(
    "SyncAck",
    {
        "type": Literal["sync.ack"],
        "from": Cursor,
        "head": Cursor,
        "count": Annotated[int, Field(ge=0)],
        "gap": bool,
        "request_id": NotRequired[RequestId],
    },
)
closed(SyncAck)


@closed
class MessageAck(TypedDict):
    """The answer to `message.send` (`thread_id`: the new thread of an auto-thread send)."""

    type: Literal["message.ack"]
    client_id: str
    chat_id: str
    thread_id: str | None
    conversation_id: str
    run_id: str
    request_id: NotRequired[RequestId]


@closed
class HistoryMessage(TypedDict):
    message_id: str
    role: Literal["user", "assistant"]
    text: str
    ts: Timestamp | None


@closed
class History(TypedDict):
    """The answer to `history`: the newest page before `before_message_id`, chronological."""

    type: Literal["history"]
    request_id: NotRequired[RequestId]
    chat_id: str
    thread_id: str | None
    messages: list[HistoryMessage]
    has_more: bool


@closed
class ChannelList(TypedDict):
    type: Literal["channel.list"]
    request_id: NotRequired[RequestId]
    channels: list[ChannelEntry]


@closed
class Result(TypedDict):
    """The answer to a `channel.*` request (its entry) or to `fcm.register`."""

    type: Literal["result"]
    op: Literal[
        "channel.create",
        "channel.rename",
        "channel.set_default",
        "channel.delete",
        "channel.set_automation",
        "channel.set_threads",
        "fcm.register",
    ]
    request_id: NotRequired[RequestId]
    entry: NotRequired[ChannelEntry]


@closed
class SearchHit(TypedDict):
    message_id: str
    chat_id: str
    thread_id: str | None
    role: Literal["user", "assistant"]
    snippet: str
    ts: str
    session_id: str
    rank: float


@closed
class SearchResults(TypedDict):
    type: Literal["search.results"]
    request_id: NotRequired[RequestId]
    query: str
    hits: list[SearchHit]


@closed
class MediaUploadReady(TypedDict):
    """Continue at `offset`, chunks of at most `chunk_max` bytes."""

    type: Literal["media.upload.ready"]
    upload_id: str
    offset: Cursor
    chunk_max: int
    request_id: NotRequired[RequestId]


@closed
class MediaUploadAck(TypedDict):
    type: Literal["media.upload.ack"]
    upload_id: str
    offset: Cursor
    request_id: NotRequired[RequestId]


@closed
class MediaUploaded(TypedDict):
    """The upload is registered: send it with `message.send.media_refs`."""

    type: Literal["media.uploaded"]
    upload_id: str
    media_ref: str
    attachment: AttachmentDescriptor
    ts: Timestamp
    request_id: NotRequired[RequestId]


@closed
class MediaPulled(TypedDict):
    """The binary frames of a pull were sent; verify them against `sha256`."""

    type: Literal["media.pulled"]
    media_id: str
    offset: Cursor
    size: int
    sha256: str
    ts: Timestamp
    request_id: NotRequired[RequestId]


@closed
class Device(TypedDict):
    """A device as an operator sees it; `online` and `edge` only in `admin.devices`."""

    device_id: str
    name: str
    caps: list[str]
    push: Literal["fcm", "ntfy"] | None
    last_seen: float
    created: float
    revoked: bool
    revoked_at: float | None
    online: NotRequired[bool]
    edge: NotRequired[str | None]


@closed
class AdminDevices(TypedDict):
    type: Literal["admin.devices"]
    request_id: NotRequired[RequestId]
    devices: list[Device]


@closed
class AdminResult(TypedDict):
    type: Literal["admin.result"]
    op: Literal["admin.devices.revoke", "admin.token.rotate"]
    request_id: NotRequired[RequestId]
    device: NotRequired[Device]

"""Every iris frame a client sends, as a TypedDict (docs/protocol/iris.md, media.md,
operations.md for admin frames); what the server sends is in `iris_server_frames`.

`ClientFrame` is a union discriminated by `type`; the published JSON Schema is generated
from it (`python -m edge.dialects.schema`). Fields are exactly those the codec
(`edge/dialects/iris.py`) decodes.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict

from canonical.attachments import CHUNK_MAX_BYTES, MAX_PER_MESSAGE

from .frames import Cursor, NonBlank, Ping, RequestId, Text, closed

# The error codes of docs/protocol/iris.md, and media.md's checksum_mismatch.
IrisErrorCode = Literal[
    "unauthorized",
    "auth_timeout",
    "version_mismatch",
    "bad_request",
    "invalid_json",
    "unknown_type",
    "too_large",
    "rate_limited",
    "not_found",
    "archived",
    "unsupported",
    "run_active",
    "unavailable",
    "internal_error",
    "not_implemented",
    "checksum_mismatch",
]
ChatId = Annotated[str, Field(min_length=1, max_length=128)]
ThreadId = Annotated[str, Field(max_length=64)]
MessageId = Annotated[str, Field(min_length=1, max_length=160)]
HexId = Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
ChannelName = Annotated[str, Field(min_length=1, max_length=100, pattern=r"\S")]
AdminToken = Annotated[str, Field(max_length=512)]


@closed
class Hello(TypedDict):
    """The first frame, within 10 s; answered with `hello.ack` (and the replay after
    `cursor`) or an error and a close. No `cursor`: a fresh device, starting at the head."""

    type: Literal["hello"]
    token: Annotated[str, Field(min_length=1, max_length=512)]
    device_id: Annotated[str, Field(min_length=1, max_length=128)]
    version: NotRequired[Literal[1]]
    device_name: NotRequired[str | None]
    caps: NotRequired[Annotated[list[str], Field(max_length=64)] | None]
    cursor: NotRequired[Cursor | None]
    fcm_token: NotRequired[Annotated[str, Field(max_length=4096)] | None]
    request_id: NotRequired[RequestId]


# `text` is required and not blank, except in a send of files alone (`media_refs`).
_TEXT_OR_FILES: dict[str, Any] = {
    "anyOf": [
        {"required": ["text"], "properties": {"text": {"type": "string", "pattern": r"\S"}}},
        {"required": ["media_refs"], "properties": {"media_refs": {"minItems": 1}}},
    ]
}


@with_config(ConfigDict(extra="forbid", json_schema_extra=_TEXT_OR_FILES))
class MessageSend(TypedDict):
    """`text` is required and not blank, except in a send of files alone (`media_refs`)."""

    type: Literal["message.send"]
    chat_id: ChatId
    thread_id: NotRequired[ThreadId | None]
    text: NotRequired[Text | None]
    client_id: Annotated[str, Field(min_length=1, max_length=128, pattern=r"\S")]
    auto_thread: NotRequired[bool]
    reply_to: NotRequired[MessageId | None]
    media_refs: NotRequired[
        Annotated[
            list[Annotated[str, Field(min_length=1, max_length=64)]],
            Field(max_length=MAX_PER_MESSAGE),
        ]
        | None
    ]
    request_id: NotRequired[RequestId]


@closed
class Sync(TypedDict):
    """Replay everything after `cursor` (default 0)."""

    type: Literal["sync"]
    cursor: NotRequired[Cursor]
    request_id: NotRequired[RequestId]


@closed
class Ack(TypedDict):
    type: Literal["ack"]
    cursor: NotRequired[Cursor]
    request_id: NotRequired[RequestId]


@closed
class ReadReceipt(TypedDict):
    type: Literal["read.receipt"]
    message_id: MessageId
    cursor: NotRequired[Cursor]
    request_id: NotRequired[RequestId]


@closed
class RunCancel(TypedDict):
    type: Literal["run.cancel"]
    chat_id: ChatId
    thread_id: NotRequired[ThreadId | None]
    run_id: NotRequired[Annotated[str, Field(max_length=64)] | None]
    request_id: NotRequired[RequestId]


@closed
class HistoryRequest(TypedDict):
    type: Literal["history"]
    chat_id: ChatId
    thread_id: NotRequired[ThreadId | None]
    limit: NotRequired[int | None]
    before_message_id: NotRequired[MessageId | None]
    request_id: NotRequired[RequestId]


@closed
class ChannelListRequest(TypedDict):
    type: Literal["channel.list"]
    request_id: NotRequired[RequestId]


@closed
class ChannelCreate(TypedDict):
    """A channel, or (`kind: thread`) a thread of the default channel."""

    type: Literal["channel.create"]
    kind: NotRequired[Literal["channel", "thread"]]
    name: NotRequired[ChannelName | None]
    parent_chat_id: NotRequired[ChatId | None]
    request_id: NotRequired[RequestId]


@closed
class ChannelRename(TypedDict):
    type: Literal["channel.rename"]
    chat_id: ChatId
    thread_id: NotRequired[ThreadId | None]
    name: ChannelName
    request_id: NotRequired[RequestId]


@closed
class ChannelSetDefault(TypedDict):
    type: Literal["channel.set_default"]
    chat_id: ChatId
    request_id: NotRequired[RequestId]


@closed
class ChannelDelete(TypedDict):
    type: Literal["channel.delete"]
    chat_id: ChatId
    thread_id: NotRequired[ThreadId | None]
    request_id: NotRequired[RequestId]


@closed
class ChannelSetAutomation(TypedDict):
    type: Literal["channel.set_automation"]
    chat_id: ChatId
    on: bool
    request_id: NotRequired[RequestId]


@closed
class ChannelSetThreads(TypedDict):
    type: Literal["channel.set_threads"]
    chat_id: ChatId
    on: bool
    request_id: NotRequired[RequestId]


@closed
class Search(TypedDict):
    """`scope: chat` needs `chat_id`."""

    type: Literal["search"]
    query: NotRequired[Text | None]
    scope: NotRequired[Literal["all", "chat"]]
    chat_id: NotRequired[ChatId | None]
    thread_id: NotRequired[ThreadId | None]
    limit: NotRequired[int | None]
    request_id: NotRequired[RequestId]


@closed
class PickerSelect(TypedDict):
    type: Literal["picker.select"]
    picker_id: Annotated[str, Field(min_length=1, max_length=64)]
    value: Annotated[NonBlank, Field(max_length=2000)]
    request_id: NotRequired[RequestId]


@closed
class FcmRegister(TypedDict):
    type: Literal["fcm.register"]
    token: Annotated[str, Field(min_length=1, max_length=4096, pattern=r"\S")]
    request_id: NotRequired[RequestId]


@closed
class MediaUploadStart(TypedDict):
    """Start an upload, or (with `upload_id`) resume one."""

    type: Literal["media.upload.start"]
    chat_id: ChatId
    thread_id: NotRequired[ThreadId | None]
    upload_id: NotRequired[HexId | None]
    filename: NotRequired[Annotated[str, Field(max_length=1024)] | None]
    mime: NotRequired[Annotated[str, Field(max_length=255)] | None]
    size: Annotated[int, Field(ge=1)]
    sha256: Annotated[str, Field(pattern=r"^[0-9a-fA-F]{64}$")]
    request_id: NotRequired[RequestId]


@closed
class MediaUploadChunk(TypedDict):
    """`data`: base64 of at most 512 KiB, written at `offset`."""

    type: Literal["media.upload.chunk"]
    upload_id: HexId
    offset: NotRequired[Cursor]
    data: Annotated[str, Field(max_length=(CHUNK_MAX_BYTES + 2) // 3 * 4)]
    request_id: NotRequired[RequestId]


@closed
class MediaPull(TypedDict):
    type: Literal["media.pull"]
    media_id: HexId
    offset: NotRequired[Cursor]
    request_id: NotRequired[RequestId]


@closed
class AdminDevicesList(TypedDict):
    type: Literal["admin.devices.list"]
    admin_token: NotRequired[AdminToken | None]
    request_id: NotRequired[RequestId]


@closed
class AdminDevicesRevoke(TypedDict):
    type: Literal["admin.devices.revoke"]
    admin_token: NotRequired[AdminToken | None]
    device_id: Annotated[str, Field(min_length=1, max_length=128)]
    request_id: NotRequired[RequestId]


@closed
class AdminTokenRotate(TypedDict):
    type: Literal["admin.token.rotate"]
    admin_token: NotRequired[AdminToken | None]
    token: Annotated[str, Field(pattern=r"^[A-Za-z0-9._~-]{32,512}$")]
    request_id: NotRequired[RequestId]


ClientFrame = Annotated[
    Hello
    | Ping
    | MessageSend
    | Sync
    | Ack
    | ReadReceipt
    | RunCancel
    | HistoryRequest
    | ChannelListRequest
    | ChannelCreate
    | ChannelRename
    | ChannelSetDefault
    | ChannelDelete
    | ChannelSetAutomation
    | ChannelSetThreads
    | Search
    | PickerSelect
    | FcmRegister
    | MediaUploadStart
    | MediaUploadChunk
    | MediaPull
    | AdminDevicesList
    | AdminDevicesRevoke
    | AdminTokenRotate,
    Field(discriminator="type"),
]

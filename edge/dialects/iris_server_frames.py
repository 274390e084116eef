"""Every iris frame the server sends, as a TypedDict (docs/protocol/iris.md, media.md,
operations.md); what a client sends is in `iris_frames`.

`ServerFrame` is a union discriminated by `type`. Sequenced events (those with `cursor`)
come from the codec (`edge/dialects/iris.py`, `encode_event`); answers from the plugin's
command handlers and the edge's media frames.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict

from .frames import (
    ApprovalChoice,
    AttachmentDescriptor,
    AttachmentKind,
    Cursor,
    DecisionStatus,
    Pong,
    ReasoningEffort,
    RequestId,
    RunStatus,
    Scope,
    Timestamp,
    closed,
)
from .iris_frames import IrisErrorCode


class Lane(TypedDict):
    """Where an event belongs: a channel's flat lane (`thread_id` null) or a thread."""

    chat_id: str
    thread_id: str | None


class Sequenced(Lane):
    """An event the gateway sequenced: `cursor` is the device's resume point."""

    cursor: Cursor


@closed
class CronJob(TypedDict):
    id: str
    name: str | None


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
class Message(Sequenced):
    """A whole message: the user's echo, or a run's final reply that supersedes its draft."""

    type: Literal["message"]
    message_id: str
    role: Literal["user", "assistant", "cron"]
    kind: Literal["user", "reply", "notice", "cron"]
    text: str
    ts: Timestamp
    run_id: NotRequired[str]
    reasoning: NotRequired[str]
    client_id: NotRequired[str]
    device_id: NotRequired[str]
    cron_job: NotRequired[CronJob]


@closed
class RunStarted(Sequenced):
    type: Literal["run.started"]
    run_id: str
    client_id: NotRequired[str]


@closed
class MessageStart(Sequenced):
    type: Literal["message.start"]
    run_id: str
    message_id: str
    role: Literal["assistant", "cron"]


@closed
class MessageUpdate(Sequenced):
    """The reply so far (cumulative: replace the bubble's text)."""

    type: Literal["message.update"]
    message_id: str
    text: str


@closed
class Commentary(Sequenced):
    """The agent's interim message before a tool call; not part of the reply."""

    type: Literal["commentary"]
    run_id: str | None
    message_id: str
    text: str
    ts: Timestamp


@closed
class ToolStart(Sequenced):
    type: Literal["tool.start"]
    run_id: str | None
    tool_call_id: str
    tool_name: str
    status: Literal["running"]
    args_redacted: dict[str, Any]
    ts: Timestamp


@closed
class ToolEnd(Sequenced):
    type: Literal["tool.end"]
    run_id: str | None
    tool_call_id: str
    tool_name: str
    status: Literal["completed", "failed", "cancelled"]
    duration_ms: int | None
    error: NotRequired[str]
    ts: Timestamp


@closed
class RunFinished(Sequenced):
    type: Literal["run.finished"]
    run_id: str
    status: RunStatus
    error: NotRequired[str]


@closed
class Typing(Lane):
    """Not sequenced: whether the agent is working in a lane."""

    type: Literal["typing"]
    on: bool


@closed
class PickerApproval(Sequenced):
    type: Literal["picker.approval"]
    run_id: str | None
    picker_id: str
    command: str
    description: str
    choices: list[ApprovalChoice]
    ts: Timestamp


@closed
class PickerClarify(Sequenced):
    type: Literal["picker.clarify"]
    run_id: str | None
    picker_id: str
    question: str
    choices: list[str] | None
    allow_free_text: bool
    ts: Timestamp


@with_config(ConfigDict(extra="allow"))
class PickerProvider(TypedDict):
    """A row of Hermes' model picker as Hermes built it: these fields, and metadata
    whose set varies with Hermes' version and the provider (`source`, `is_user_defined`,
    `api_url`, `authenticated`, `auth_type`, `warning`, ...)."""

    slug: str
    name: str
    is_current: bool
    models: list[str]
    total_models: int


@closed
class PickerModel(Sequenced):
    """Answer with `"<provider slug>:<model id>"` of a pair offered."""

    type: Literal["picker.model"]
    run_id: str | None
    picker_id: str
    providers: list[PickerProvider]
    current_model: str
    current_provider: str
    ts: Timestamp


@closed
class ChoiceOption(TypedDict):
    value: str
    label: str
    is_current: bool


@closed
class PickerChoice(Sequenced):
    type: Literal["picker.choice"]
    run_id: str | None
    picker_id: str
    title: str
    choices: list[ChoiceOption]
    ts: Timestamp


@closed
class PickerConfirm(Sequenced):
    type: Literal["picker.confirm"]
    run_id: str | None
    picker_id: str
    title: str
    message: str
    choices: list[Literal["once", "always", "cancel"]]
    ts: Timestamp


@closed
class PickerResolved(Sequenced):
    """Closes a picker on every device; `expired` (with `accepted: false`) is no denial.
    An approval names its `choice`, a model, choice or confirm picker its `value`."""

    type: Literal["picker.resolved"]
    run_id: str | None
    picker_id: str
    picker_kind: Literal["approval", "clarify", "model", "choice", "confirm"]
    accepted: bool
    status: DecisionStatus
    choice: NotRequired[ApprovalChoice | None]
    value: NotRequired[str | None]
    request_id: NotRequired[RequestId]
    ts: Timestamp


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
class ChannelCreated(Sequenced):
    """`auto`: minted by an auto-thread send."""

    type: Literal["channel.created"]
    entry: ChannelEntry
    auto: NotRequired[bool]


@closed
class ChannelRenamed(Sequenced):
    type: Literal["channel.renamed"]
    entry: ChannelEntry


@closed
class ChannelDeleted(Sequenced):
    type: Literal["channel.deleted"]
    entry: ChannelEntry


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
class YoloChanged(Sequenced):
    type: Literal["yolo.changed"]
    enabled: bool
    scope: Literal["conversation"]
    conversation_id: str


@closed
class ModelChanged(TypedDict):
    """A conversation's change names its lane and `conversation_id`; a global one none."""

    type: Literal["model.changed"]
    model: str
    provider: str | None
    scope: Scope
    conversation_id: NotRequired[str]
    chat_id: NotRequired[str]
    thread_id: NotRequired[str | None]
    cursor: Cursor


@closed
class ReasoningChanged(TypedDict):
    type: Literal["reasoning.changed"]
    effort: ReasoningEffort
    scope: Scope
    conversation_id: NotRequired[str]
    chat_id: NotRequired[str]
    thread_id: NotRequired[str | None]
    cursor: Cursor


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
class MediaOffer(Sequenced):
    """A file joined the lane (`attachment.added` in pheby)."""

    type: Literal["media.offer"]
    media_id: str
    mime: str
    size: int
    filename: str
    kind: AttachmentKind
    inline_image: bool
    direction: Literal["inbound", "outbound"]
    message_id: str | None
    expires_at: Timestamp | None
    ts: Timestamp


@closed
class MediaReady(Sequenced):
    type: Literal["media.ready"]
    media_id: str
    kind: Literal["image", "audio", "video"]
    variants: list[str]
    ts: Timestamp


@closed
class MediaFailed(Sequenced):
    type: Literal["media.failed"]
    media_id: str
    code: Literal["corrupt", "too_large", "unsupported", "unavailable"]
    message: str
    ts: Timestamp


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


ServerFrame = Annotated[
    HelloAck
    | Pong
    | Error
    | SyncAck
    | MessageAck
    | Message
    | RunStarted
    | MessageStart
    | MessageUpdate
    | Commentary
    | ToolStart
    | ToolEnd
    | RunFinished
    | Typing
    | PickerApproval
    | PickerClarify
    | PickerModel
    | PickerChoice
    | PickerConfirm
    | PickerResolved
    | History
    | ChannelList
    | Result
    | ChannelCreated
    | ChannelRenamed
    | ChannelDeleted
    | SearchResults
    | YoloChanged
    | ModelChanged
    | ReasoningChanged
    | MediaUploadReady
    | MediaUploadAck
    | MediaUploaded
    | MediaPulled
    | MediaOffer
    | MediaReady
    | MediaFailed
    | AdminDevices
    | AdminResult,
    Field(discriminator="type"),
]

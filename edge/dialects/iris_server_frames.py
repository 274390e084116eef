"""Every iris frame the server sends: its events as TypedDicts (docs/protocol/iris.md,
media.md), and `ServerFrame`, the union of these and of the direct answers
(`iris_replies`), discriminated by `type`; what a client sends is in `iris_frames`.

Sequenced events (those with `cursor`) come from the codec (`edge/dialects/iris.py`,
`encode_event`); answers from the plugin's command handlers and the edge's media frames.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict

from .frames import (
    ApprovalChoice,
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
from .iris_replies import (
    AdminDevices,
    AdminResult,
    ChannelEntry,
    ChannelList,
    Error,
    HelloAck,
    History,
    MediaPulled,
    MediaUploadAck,
    MediaUploaded,
    MediaUploadReady,
    MessageAck,
    Result,
    SearchResults,
    SyncAck,
)


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

"""Every pheby frame the server sends, as a TypedDict (spec/pheby-protocol-v1.md,
docs/protocol/pheby.md); what a client sends is in `pheby_frames`.

`ServerFrame` is a union discriminated by `type`. Fields are exactly those of the codec
(`edge/dialects/pheby.py`: `encode_event` and its `_FIELDS` sets) and of the plugin's
replies.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

from .frames import (
    ApprovalChoice,
    AttachmentDescriptor,
    DecisionStatus,
    Pong,
    ProviderModels,
    ReasoningEffort,
    RequestId,
    RunStatus,
    Scope,
    Timestamp,
    ToolStatus,
    closed,
)
from .pheby_frames import PhebyErrorCode


@closed
class Ready(TypedDict):
    """The hello was accepted."""

    type: Literal["ready"]
    protocol_version: Literal[1]
    server: Literal["pheby"]
    ts: Timestamp
    request_id: NotRequired[RequestId]


@closed
class ErrorBody(TypedDict):
    code: PhebyErrorCode
    message: str


@closed
class Error(TypedDict):
    """Every error, direct answer or not."""

    type: Literal["error"]
    request_id: NotRequired[RequestId]
    error: ErrorBody
    ts: Timestamp


@closed
class ConversationSummary(TypedDict):
    conversation_id: str
    name: str
    session_id: str | None
    last_active: Timestamp | None
    source: Literal["hermes"]


@closed
class ConversationSnapshot(TypedDict):
    """The answer to `conversation.list`."""

    type: Literal["conversation.snapshot"]
    request_id: NotRequired[RequestId]
    conversations: list[ConversationSummary]


@closed
class ConversationCreated(TypedDict):
    """The answer to `conversation.create`."""

    type: Literal["conversation.created"]
    conversation_id: str
    name: str
    request_id: NotRequired[RequestId]


@closed
class ConversationUpdated(TypedDict):
    """Broadcast: a conversation was created."""

    type: Literal["conversation.updated"]
    conversation_id: str
    name: str


@closed
class ConversationRenamed(TypedDict):
    """The answer to `conversation.rename` (with `request_id`) and its broadcast."""

    type: Literal["conversation.renamed"]
    conversation_id: str
    name: str
    request_id: NotRequired[RequestId]


@closed
class ConversationDeleted(TypedDict):
    """The answer to `conversation.delete` (with `request_id`) and its broadcast."""

    type: Literal["conversation.deleted"]
    conversation_id: str
    request_id: NotRequired[RequestId]


@closed
class HistoryMessage(TypedDict):
    message_id: str
    role: Literal["user", "assistant"]
    text: str
    ts: Timestamp | None


@closed
class ActiveRun(TypedDict):
    run_id: str
    status: Literal["running"]
    message_id: str
    text: str


@closed
class ToolEvent(TypedDict):
    """A tool call's progress: `args_redacted` only while running; `duration_ms` once it
    ended; `error` only when it failed."""

    type: Literal["tool.event"]
    conversation_id: str
    run_id: str | None
    tool_call_id: str
    tool_name: str
    status: ToolStatus
    args_redacted: NotRequired[dict[str, Any]]
    duration_ms: NotRequired[int | None]
    error: NotRequired[str]
    ts: Timestamp


@closed
class ApprovalRequest(TypedDict):
    """Hermes waits for a decision on a dangerous command."""

    type: Literal["approval.request"]
    approval_id: str
    session_key: str
    conversation_id: str
    run_id: str | None
    command: str
    description: str
    choices: list[ApprovalChoice]
    ts: Timestamp


@closed
class ClarifyRequest(TypedDict):
    """The agent asks a question; `choices` null means free text only."""

    type: Literal["clarify.request"]
    clarify_id: str
    session_key: str
    conversation_id: str
    run_id: str | None
    question: str
    choices: list[str] | None
    allow_free_text: bool
    ts: Timestamp


@closed
class ConversationHistory(TypedDict):
    """The answer to `conversation.open`: a page of history and the live state to
    replace local state with."""

    type: Literal["conversation.history"]
    conversation_id: str
    request_id: NotRequired[RequestId]
    messages: list[HistoryMessage]
    has_more: bool
    attachments: list[AttachmentDescriptor]
    run: ActiveRun | None
    tools: list[ToolEvent]
    approvals: list[ApprovalRequest]
    clarifications: list[ClarifyRequest]


@closed
class RunAccepted(TypedDict):
    """A run began; `request_id` is the sending client's."""

    type: Literal["run.accepted"]
    conversation_id: str
    run_id: str
    request_id: NotRequired[RequestId]


@closed
class MessageStart(TypedDict):
    type: Literal["message.start"]
    conversation_id: str
    run_id: str
    message_id: str


@closed
class MessageDelta(TypedDict):
    """The reply so far (cumulative: replace the bubble's text)."""

    type: Literal["message.delta"]
    conversation_id: str
    message_id: str
    text: str
    ts: Timestamp


@closed
class MessageComplete(TypedDict):
    """The final text; `kind: notice` is gateway/status text, not conversation content."""

    type: Literal["message.complete"]
    conversation_id: str
    message_id: str
    text: str
    ts: Timestamp
    kind: NotRequired[Literal["notice"]]


@closed
class RunFinished(TypedDict):
    type: Literal["run.finished"]
    conversation_id: str
    run_id: str
    status: RunStatus
    error: NotRequired[str]


@closed
class ApprovalResolved(TypedDict):
    """Broadcast once; `expired` (with `accepted: false`, `choice: null`) is no denial."""

    type: Literal["approval.resolved"]
    approval_id: str
    choice: ApprovalChoice | None
    accepted: bool
    status: DecisionStatus
    request_id: NotRequired[RequestId]


@closed
class ClarifyResolved(TypedDict):
    type: Literal["clarify.resolved"]
    clarify_id: str
    accepted: bool
    status: DecisionStatus
    request_id: NotRequired[RequestId]


@closed
class YoloSnapshot(TypedDict):
    type: Literal["yolo.snapshot"]
    enabled: bool
    scope: Literal["conversation"]
    conversation_id: str
    request_id: NotRequired[RequestId]


@closed
class YoloChanged(TypedDict):
    type: Literal["yolo.changed"]
    enabled: bool
    scope: Literal["conversation"]
    conversation_id: str
    request_id: NotRequired[RequestId]


@closed
class ModelsSnapshot(TypedDict):
    type: Literal["models.snapshot"]
    request_id: NotRequired[RequestId]
    providers: list[ProviderModels]
    current_model: str | None
    current_provider: str | None
    scope: Scope
    supported_reasoning_efforts: list[ReasoningEffort]
    ts: Timestamp


@closed
class ModelCurrent(TypedDict):
    """`conversation_id` when the request named one."""

    type: Literal["model.current"]
    request_id: NotRequired[RequestId]
    model: str
    provider: str
    scope: Scope
    conversation_id: NotRequired[str]
    ts: Timestamp


@closed
class ModelChanged(TypedDict):
    """`conversation_id` exactly when `scope` is conversation."""

    type: Literal["model.changed"]
    model: str
    provider: str | None
    scope: Scope
    conversation_id: NotRequired[str]
    request_id: NotRequired[RequestId]


@closed
class ReasoningSnapshot(TypedDict):
    """`effort` null: the provider's default."""

    type: Literal["reasoning.snapshot"]
    request_id: NotRequired[RequestId]
    effort: ReasoningEffort | None
    enabled: bool
    scope: Scope
    conversation_id: NotRequired[str]
    supported_efforts: list[ReasoningEffort]
    ts: Timestamp


@closed
class ReasoningChanged(TypedDict):
    type: Literal["reasoning.changed"]
    effort: ReasoningEffort
    scope: Scope
    conversation_id: NotRequired[str]
    request_id: NotRequired[RequestId]


@closed
class AttachmentAdded(TypedDict):
    """A file joined the conversation (an upload a send claimed, or a deliverable)."""

    type: Literal["attachment.added"]
    conversation_id: str
    attachment: AttachmentDescriptor
    ts: Timestamp


ServerFrame = Annotated[
    Ready
    | Pong
    | Error
    | ConversationSnapshot
    | ConversationCreated
    | ConversationUpdated
    | ConversationRenamed
    | ConversationDeleted
    | ConversationHistory
    | RunAccepted
    | MessageStart
    | MessageDelta
    | MessageComplete
    | RunFinished
    | ToolEvent
    | ApprovalRequest
    | ApprovalResolved
    | ClarifyRequest
    | ClarifyResolved
    | YoloSnapshot
    | YoloChanged
    | ModelsSnapshot
    | ModelCurrent
    | ModelChanged
    | ReasoningSnapshot
    | ReasoningChanged
    | AttachmentAdded,
    Field(discriminator="type"),
]

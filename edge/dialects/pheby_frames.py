"""Every pheby frame as a TypedDict (spec/pheby-protocol-v1.md, docs/protocol/pheby.md).

`ClientFrame` is what a client sends, `ServerFrame` what this server sends; each a union
discriminated by `type`. The published JSON Schemas are generated from them
(`python -m edge.dialects.schema`). Fields are exactly those of the codec
(`edge/dialects/pheby.py`: its decoders and its `_FIELDS` sets) and of the plugin's replies.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

from .frames import (
    ApprovalChoice,
    AttachmentDescriptor,
    DecisionStatus,
    Id,
    NonBlank,
    Ping,
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

# The spec's codes, and `unavailable` (the bus cannot be reached: retry the same frame).
PhebyErrorCode = Literal[
    "unauthorized",
    "auth_timeout",
    "version_mismatch",
    "bad_request",
    "invalid_json",
    "unknown_type",
    "not_found",
    "conversation_not_found",
    "approval_not_found",
    "clarify_not_found",
    "too_large",
    "rate_limited",
    "run_active",
    "internal_error",
    "not_implemented",
    "unavailable",
]
ConversationId = Annotated[str, Field(min_length=1, max_length=64)]
Name = Annotated[str, Field(min_length=1, max_length=100)]


# -- client → server


@closed
class Hello(TypedDict):
    """The first frame, within 10 s; answered with `ready` or an error and a close."""

    type: Literal["hello"]
    secret: Annotated[str, Field(min_length=1, max_length=512)]
    protocol_version: Literal[1]
    request_id: NotRequired[RequestId]


@closed
class ConversationList(TypedDict):
    type: Literal["conversation.list"]
    request_id: NotRequired[RequestId]


@closed
class ConversationCreate(TypedDict):
    type: Literal["conversation.create"]
    name: NotRequired[Annotated[str, Field(max_length=100)] | None]
    request_id: NotRequired[RequestId]


@closed
class ConversationOpen(TypedDict):
    """History (newest page, chronological) and the recoverable snapshot."""

    type: Literal["conversation.open"]
    conversation_id: ConversationId
    limit: NotRequired[int | None]
    before_message_id: NotRequired[Annotated[str, Field(max_length=64)] | None]
    request_id: NotRequired[RequestId]


@closed
class ConversationRename(TypedDict):
    type: Literal["conversation.rename"]
    conversation_id: ConversationId
    name: Name
    request_id: NotRequired[RequestId]


@closed
class ConversationDelete(TypedDict):
    type: Literal["conversation.delete"]
    conversation_id: ConversationId
    request_id: NotRequired[RequestId]


@closed
class ChatSend(TypedDict):
    type: Literal["chat.send"]
    conversation_id: ConversationId
    text: NonBlank
    attachment_ids: NotRequired[
        Annotated[list[Annotated[str, Field(min_length=1, max_length=64)]], Field(max_length=10)]
        | None
    ]
    request_id: NotRequired[RequestId]


@closed
class RunCancel(TypedDict):
    type: Literal["run.cancel"]
    conversation_id: ConversationId
    run_id: NotRequired[Annotated[str, Field(max_length=64)] | None]
    request_id: NotRequired[RequestId]


@closed
class ApprovalRespond(TypedDict):
    type: Literal["approval.respond"]
    approval_id: Id
    choice: ApprovalChoice
    reason: NotRequired[Annotated[str, Field(max_length=2000)] | None]
    request_id: NotRequired[RequestId]


@closed
class ClarifyRespond(TypedDict):
    type: Literal["clarify.respond"]
    clarify_id: Id
    response: NonBlank
    request_id: NotRequired[RequestId]


@closed
class YoloCurrent(TypedDict):
    type: Literal["yolo.current"]
    conversation_id: ConversationId
    request_id: NotRequired[RequestId]


@closed
class YoloSet(TypedDict):
    type: Literal["yolo.set"]
    conversation_id: ConversationId
    enabled: bool
    request_id: NotRequired[RequestId]


@closed
class ModelsList(TypedDict):
    type: Literal["models.list"]
    conversation_id: NotRequired[ConversationId | None]
    request_id: NotRequired[RequestId]


@closed
class ModelsCurrent(TypedDict):
    type: Literal["models.current"]
    conversation_id: NotRequired[ConversationId | None]
    request_id: NotRequired[RequestId]


# One word: no space, no leading "-" (Hermes parses `/model <name> --flags`).
ModelName = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\s-]\S*$")]
ProviderName = Annotated[str, Field(max_length=100, pattern=r"^([^\s-]\S*)?$")]


@closed
class ModelSet(TypedDict):
    """With `conversation_id`: that conversation's override; without (or null): global."""

    type: Literal["model.set"]
    model: ModelName
    provider: NotRequired[ProviderName | None]
    conversation_id: NotRequired[ConversationId | None]
    request_id: NotRequired[RequestId]


@closed
class ReasoningCurrent(TypedDict):
    type: Literal["reasoning.current"]
    conversation_id: NotRequired[ConversationId | None]
    request_id: NotRequired[RequestId]


@closed
class ReasoningSet(TypedDict):
    type: Literal["reasoning.set"]
    effort: ReasoningEffort
    conversation_id: NotRequired[ConversationId | None]
    request_id: NotRequired[RequestId]


ClientFrame = Annotated[
    Hello
    | Ping
    | ConversationList
    | ConversationCreate
    | ConversationOpen
    | ConversationRename
    | ConversationDelete
    | ChatSend
    | RunCancel
    | ApprovalRespond
    | ClarifyRespond
    | YoloCurrent
    | YoloSet
    | ModelsList
    | ModelsCurrent
    | ModelSet
    | ReasoningCurrent
    | ReasoningSet,
    Field(discriminator="type"),
]


# -- server → client


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

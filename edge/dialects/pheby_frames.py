"""Every pheby frame a client sends, as a TypedDict (spec/pheby-protocol-v1.md,
docs/protocol/pheby.md); what the server sends is in `pheby_server_frames`.

`ClientFrame` is a union discriminated by `type`; the published JSON Schema is generated
from it (`python -m edge.dialects.schema`). Fields are exactly those the codec
(`edge/dialects/pheby.py`) decodes.
"""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

from .frames import (
    ApprovalChoice,
    Id,
    NonBlank,
    Ping,
    ReasoningEffort,
    RequestId,
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

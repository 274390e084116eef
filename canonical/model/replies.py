"""Canonical direct replies (plugin → the one connection that asked).

A codec renders each in its dialect's shape (``edge/dialects/``): the plugin never builds
a dialect's frame. A reply of a type not listed here reaches the device as it is.
"""

from typing import Any, Literal, NotRequired, TypedDict

from .base import Json


class ErrorReply(TypedDict):
    type: Literal["error"]
    code: str
    message: str
    request_id: NotRequired[Any]
    client_id: NotRequired[str]
    # "channel": the channel store refused (a dialect may name such refusals its own way).
    subject: NotRequired[Literal["channel"]]


class SendAccepted(TypedDict):
    """A send was taken (or was taken before: a retry), with the run it started or joined."""

    type: Literal["send.accepted"]
    conversation_id: str
    chat_id: str
    thread_id: str | None
    run_id: str | None
    client_id: str | None
    request_id: Any
    # The run's broadcast run.accepted, sequenced with the send, carries the request id:
    # a dialect that answers a send with that event needs no reply of its own.
    announced: bool


class Result(TypedDict):
    """A channel command's outcome: the entry as it is now."""

    type: Literal["result"]
    op: str
    request_id: Any
    entry: Json


class ChannelListReply(TypedDict):
    type: Literal["channel.list"]
    request_id: Any
    # ChannelEntry.to_wire() with cron_jobs, and session_id/last_active when asked for.
    channels: list[Json]


class ConversationState(TypedDict):
    """What a client opening a conversation needs besides its messages (view
    "conversation")."""

    conversation_id: str
    attachments: list[Json]
    run: Json | None
    tools: list[Json]
    approvals: list[Json]
    clarifications: list[Json]


class HistoryReply(TypedDict):
    type: Literal["history"]
    request_id: Any
    chat_id: str
    thread_id: str | None
    messages: list[Json]
    has_more: bool
    conversation: NotRequired[ConversationState]


__all__ = [
    "ChannelListReply",
    "ConversationState",
    "ErrorReply",
    "HistoryReply",
    "Result",
    "SendAccepted",
]

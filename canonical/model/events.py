"""Canonical events (plugin → every device of the tenant), sequenced by the outbox.

The plugin builds each event once; the outbox gives it its ``cursor``; an edge parses it
once and encodes it once per dialect. Every event names its lane (``lane``, as a JSON
array) and the conversation that lane is (``conversation_id``): each codec keeps the one
its dialect speaks. The shapes below are those of the events the codecs turn into
frames; an event of any other type is passed on by a codec as it sees fit, or dropped.

(No ``from __future__ import annotations`` here: TypedDict reads ``NotRequired`` at run
time, and tests check events against ``__required_keys__``.)
"""

from typing import Any, Literal, NotRequired, TypedDict


class _Sequenced(TypedDict):
    lane: list[str | None]
    # None only for a lane the channel store no longer knows (output after a delete).
    conversation_id: str | None
    # Given by the outbox; absent only before an event is sequenced.
    cursor: NotRequired[int]


class RunAccepted(_Sequenced):
    type: Literal["run.accepted"]
    run_id: str
    request_id: NotRequired[Any]
    client_id: NotRequired[str | None]


class MessageStart(_Sequenced):
    type: Literal["message.start"]
    run_id: str
    message_id: str
    kind: NotRequired[str]


class MessageDelta(_Sequenced):
    type: Literal["message.delta"]
    run_id: str
    message_id: str
    # Cumulative: everything the assistant said this run (commentary included)...
    text: str
    # ...and the answer without the interim commentary (absent: the same as text).
    reply: NotRequired[str]
    ts: str


class MessageComplete(_Sequenced):
    type: Literal["message.complete"]
    message_id: str
    role: NotRequired[str]
    kind: NotRequired[str]
    text: str
    reply: NotRequired[str]
    ts: str
    run_id: NotRequired[str | None]
    reasoning: NotRequired[str | None]
    client_id: NotRequired[str]
    device_id: NotRequired[str]
    cron_job: NotRequired[Any]


class RunFinished(_Sequenced):
    type: Literal["run.finished"]
    run_id: str
    status: str
    error: NotRequired[str | None]


class Typing(TypedDict):
    type: Literal["typing"]
    lane: list[str | None]
    on: bool
    ts: NotRequired[str]


class ChannelChanged(_Sequenced):
    type: Literal["channel.created", "channel.renamed", "channel.deleted"]
    # The channel store's entry as devices see it (ChannelEntry.to_wire()).
    entry: dict[str, Any]
    auto: NotRequired[bool]


Event = RunAccepted | MessageStart | MessageDelta | MessageComplete | RunFinished | Typing
"""The run's events: what a codec must render exactly (the fan-out path)."""

EVENT_SHAPES: dict[str, type] = {
    "run.accepted": RunAccepted,
    "message.start": MessageStart,
    "message.delta": MessageDelta,
    "message.complete": MessageComplete,
    "run.finished": RunFinished,
    "typing": Typing,
    "channel.created": ChannelChanged,
    "channel.renamed": ChannelChanged,
    "channel.deleted": ChannelChanged,
}

__all__ = [
    "EVENT_SHAPES",
    "ChannelChanged",
    "Event",
    "MessageComplete",
    "MessageDelta",
    "MessageStart",
    "RunAccepted",
    "RunFinished",
    "Typing",
]

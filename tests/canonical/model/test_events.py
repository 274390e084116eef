"""canonical.model.events: the events the plugin builds have the shapes the model names."""

from __future__ import annotations

from typing import Any

import pytest

from canonical.model import Json
from canonical.model.events import EVENT_SHAPES
from tests.edge.dialect_events import a_channel_event, a_turn, a_typing, a_user_echo, an_entry


def shape_problems(event: Json) -> list[str]:
    shape: Any = EVENT_SHAPES[event["type"]]
    required, known = set(shape.__required_keys__), set(shape.__annotations__)
    problems = [f"missing {key}" for key in sorted(required - set(event))]
    problems += [f"unknown {key}" for key in sorted(set(event) - known)]
    return problems


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_a_runs_events_have_their_canonical_shapes(status: str) -> None:
    for event in a_turn(status, "boom" if status == "failed" else None).values():
        assert shape_problems(event) == [], event["type"]


def test_a_users_echo_and_typing_have_their_canonical_shapes() -> None:
    assert shape_problems(a_user_echo()) == []
    assert shape_problems(a_typing()) == []


@pytest.mark.parametrize("kind", ["channel.created", "channel.renamed", "channel.deleted"])
def test_a_channel_change_has_its_canonical_shape(kind: str) -> None:
    assert shape_problems(a_channel_event(kind, an_entry())) == []


def test_an_event_missing_a_field_is_told_apart() -> None:
    event = {k: v for k, v in a_turn()["message.delta"].items() if k != "message_id"}
    assert shape_problems({**event, "colour": "red"}) == ["missing message_id", "unknown colour"]

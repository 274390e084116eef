"""When the command reader waits before its next stream read (gateway_plugin.commands.reader)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from canonical.model import Json
from gateway_plugin.commands.reader import STORM_HELLOS, STORM_LINGER_S, linger_after


def _read(*cmds: str) -> list[tuple[str, Json]]:
    return [(f"1-{i}", {"cmd": cmd}) for i, cmd in enumerate(cmds)]


def test_a_read_of_several_hellos_lingers_for_the_next_ones() -> None:
    assert linger_after(_read(*["hello"] * STORM_HELLOS)) == STORM_LINGER_S


def test_a_lone_command_or_a_few_hellos_are_followed_by_the_next_read_at_once() -> None:
    assert linger_after([]) == 0.0
    assert linger_after(_read("chat.send")) == 0.0
    assert linger_after(_read(*["hello"] * (STORM_HELLOS - 1), "sync", "chat.send")) == 0.0


@given(st.lists(st.sampled_from(["hello", "sync", "chat.send", "ack"]), max_size=40))
def test_lingering_follows_the_number_of_hellos_in_the_read_alone(cmds: list[str]) -> None:
    expected = STORM_LINGER_S if cmds.count("hello") >= STORM_HELLOS else 0.0
    assert linger_after(_read(*cmds)) == expected

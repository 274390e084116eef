"""gateway_plugin.commands.registry: one handler per canonical command, and nothing else."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from canonical.model import Json
from canonical.model import commands as cmds
from canonical.model.commands import PLUGIN_COMMANDS
from edge.dialects.pheby import PhebyDialect
from gateway_plugin.commands.registry import CommandRegistry, DuplicateHandler
from tests.gateway_plugin.access.test_hellos import _Rig, make_rig, rig  # noqa: F401


async def _search(command: Json, args: cmds.SearchArgs) -> None:
    return None


def test_a_second_handler_for_a_command_is_an_error() -> None:
    registry = CommandRegistry()
    registry.add(cmds.SEARCH, _search)
    with pytest.raises(DuplicateHandler, match="search"):
        registry.add(cmds.SEARCH, _search)


def test_a_command_without_a_handler_has_none() -> None:
    assert CommandRegistry().get("search") is None


async def test_the_plugin_has_exactly_one_handler_for_every_canonical_command(
    rig: _Rig,  # noqa: F811
) -> None:
    # Exactly one: a second registration would have failed the controller's construction.
    assert rig.controller.commands.registry.names() == {spec.name for spec in PLUGIN_COMMANDS}


def _pheby(kind: str, request_id: str, **fields: Any) -> Json:
    decoded = PhebyDialect().decode({"type": kind, **fields})
    return {
        "cmd": decoded["cmd"],
        "edge": "e1",
        "conn": f"c-{request_id}",
        "dialect": "pheby",
        "device_id": "pheby-1",
        "request_id": request_id,
        "args": decoded["args"],
    }


async def test_an_unknown_command_is_answered_not_implemented(rig: _Rig) -> None:  # noqa: F811
    await rig.submit({**_pheby("conversation.list", "u1"), "cmd": "conversation.list"})
    [reply] = await rig.replies_for(1)
    assert reply["body"] == {
        "type": "error",
        "code": "not_implemented",
        "message": "conversation.list is not available yet",
        "request_id": "u1",
    }


async def test_a_conversation_is_listed_by_the_channel_commands_handler_with_its_activity(
    make_rig: Callable[..., Any],  # noqa: F811
) -> None:
    made: _Rig = await make_rig()
    try:
        await made.submit(_pheby("conversation.list", "l1"))
        [reply] = await made.replies_for(1)
        body = reply["body"]
        assert body["type"] == "channel.list" and body["request_id"] == "l1"
        assert body["channels"] and all(
            {"session_id", "last_active", "conversation_id", "name"} <= set(c)
            for c in body["channels"]
        )
    finally:
        await made.controller.stop()

"""The plugin's command registry: one handler per canonical command, typed by its spec.

``add(spec, handler)`` ties a handler to a ``CommandSpec[A]``; mypy checks that the
handler takes ``A`` (the command's TypedDict) as its arguments. A second handler for the
same command is an error when the registry is built (at the controller's start), not a
silent override; a command no handler is registered for is answered ``not_implemented``
by the caller.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from canonical.model import Json
from canonical.model.commands import CommandSpec

A = TypeVar("A")

Handler = Callable[[Json, A], Awaitable[None]]
"""A handler: the command's envelope, and its arguments typed as its spec says."""


class DuplicateHandler(Exception):
    """A canonical command was given a second handler."""


class CommandRegistry:
    def __init__(self) -> None:
        self._handlers: dict[str, Handler[Any]] = {}

    def add(self, spec: CommandSpec[A], handler: Handler[A]) -> None:
        if spec.name in self._handlers:
            raise DuplicateHandler(f"{spec.name} already has a handler")
        self._handlers[spec.name] = handler

    def get(self, name: str) -> Handler[Json] | None:
        """The handler of the command named ``name`` (its arguments as they came off the
        bus: a codec built them to the spec's shape)."""
        return cast("Handler[Json] | None", self._handlers.get(name))

    def names(self) -> frozenset[str]:
        return frozenset(self._handlers)


__all__ = ["CommandRegistry", "DuplicateHandler", "Handler"]

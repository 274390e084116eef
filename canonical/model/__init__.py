"""The canonical model as types: the one shape of commands, events and replies that every
dialect codec maps onto and the plugin alone speaks.

``base`` holds the two aliases the whole code base shares (``Json``, ``Lane``);
``commands``, ``events`` and ``replies`` the typed shapes (TypedDicts: plain dicts at run
time, so building, encoding and parsing them costs nothing over the dicts they describe,
docs/architecture.md "The canonical model").
"""

from __future__ import annotations

from .base import Json, Lane

__all__ = ["Json", "Lane"]

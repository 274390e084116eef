"""The edge's fast paths, and the one place that says which run.

Each module here reaches into uvicorn's or websockets' internals for a measured gain and
has a ``contract()`` check of exactly those internals (pure, no I/O):

- ``protocols`` (with the pure ``handshake``): uvicorn's httptools and websockets-sansio
  protocols with the opening handshake parsed once (stock: ``http="httptools"``,
  ``ws="websockets-sansio"`` by name);
- ``wire``: each event's frame written straight to uvicorn's socket (stock: the ASGI
  ``websocket.send`` through Starlette, uvicorn and websockets).

Callers ask :func:`server_protocols` and :func:`wire_for`; which pieces run is decided
once per process (``ANDROID_FASTPATH`` and the checks, ``canonical.fastpath.registry``).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from canonical.fastpath.registry import Piece, Registry

if TYPE_CHECKING:
    from .wire import UvicornWire


def _check(module: str) -> Callable[[], str | None]:
    # Imported only to check: an import that fails (a library's internals moved) fails
    # the contract instead of the process.
    def check() -> str | None:
        result: str | None = importlib.import_module(f"{__name__}.{module}").contract()
        return result

    return check


def _version(module: str) -> Callable[[], str]:
    def version() -> str:
        return str(importlib.import_module(module).__version__)

    return version


REGISTRY = Registry(
    "edge",
    [
        Piece("protocols", "uvicorn", _version("uvicorn"), _check("protocols")),
        Piece("wire", "uvicorn", _version("uvicorn"), _check("wire")),
    ],
)


def enabled(piece: str) -> bool:
    """Whether this process runs ``piece``'s fast path (decided at the first question)."""
    return REGISTRY.enabled(piece)


def active() -> frozenset[str]:
    """Every piece this process runs."""
    return REGISTRY.active()


def configure(setting: str) -> None:
    """The process's ``ANDROID_FASTPATH`` setting, from its loaded settings."""
    REGISTRY.configure(setting)


def stock_protocols() -> dict[str, Any]:
    """uvicorn's own protocol classes, by name: httptools when installed, else h11."""
    http = "httptools" if importlib.util.find_spec("httptools") is not None else "h11"
    return {"http": http, "ws": "websockets-sansio"}


def server_protocols() -> dict[str, Any]:
    """uvicorn ``http``/``ws`` options: the fast path's classes, or uvicorn's stock ones."""
    if not enabled("protocols"):
        return stock_protocols()
    from .protocols import EdgeHttpProtocol, EdgeWebSocketProtocol

    return {"http": EdgeHttpProtocol, "ws": EdgeWebSocketProtocol}


def wire_for(send: Callable[..., Any]) -> UvicornWire | None:
    """The direct frame writer for an ASGI ``send``, or None: the ASGI path."""
    if not enabled("wire"):
        return None
    from .wire import wire_for as direct

    return direct(send)


__all__ = [
    "REGISTRY",
    "active",
    "configure",
    "enabled",
    "server_protocols",
    "stock_protocols",
    "wire_for",
]

"""The fast paths of the cross-process code, and the one place that says which run.

Each module here reaches into a library's internals for a measured gain and has a
``contract()`` check of exactly those internals (pure, no I/O):

- ``jsonenc``: ``json.encoder.c_make_encoder`` built once (stock: ``json.JSONEncoder``);
- ``redis_mux``: one auto-pipelined connection for the bus's non-blocking commands, RESP
  parsed by hiredis (stock: the redis-py asyncio client, ``canonical.redis_stock``);
- ``redis_pubsub``: the edge's subscriber, dispatching messages as hiredis parses them
  (stock: redis-py's ``PubSub``, ``canonical.redis_stock``).

Callers ask :func:`enabled`; the answer is decided once per process (``ANDROID_FASTPATH``
and the checks, :mod:`canonical.fastpath.registry`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from .registry import Piece, Registry


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


def _python() -> str:
    import sys

    return sys.version.split()[0]


REGISTRY = Registry(
    "canonical",
    [
        Piece("jsonenc", "python", _python, _check("jsonenc")),
        Piece("redis_mux", "redis-py", _version("redis"), _check("redis_mux")),
        Piece("redis_pubsub", "hiredis", _version("hiredis"), _check("redis_pubsub")),
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


__all__ = ["REGISTRY", "active", "enabled"]

"""Which fast paths a process runs: decided once, from the switch and each contract check.

A fast path reaches into a library's internals. Each declares the library it leans on and
a *contract check*: a pure, fast function (no I/O) that returns None when every internal
it touches is present and shaped as expected, else what is not. At the first question a
process asks, :class:`Registry` runs the checks of its side and remembers the answer:
``ANDROID_FASTPATH=off`` turns every piece off; a failed (or raising) check turns its own
piece off, with one WARNING naming the piece, the library's version and what failed. A
piece that is off runs the library's stock path instead: slower, same behaviour.
"""

from __future__ import annotations

import dis
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("hdg.fastpath")

SWITCH = "ANDROID_FASTPATH"


@dataclass(frozen=True)
class Piece:
    """A fast path: its ``name``, the ``library`` it depends on and that library's
    ``version`` (for the log line), and its ``check`` (None: the contract holds)."""

    name: str
    library: str
    version: Callable[[], str]
    check: Callable[[], str | None]


def switched_off(environ: Mapping[str, str]) -> bool:
    """Whether ``ANDROID_FASTPATH`` (any case, as every ANDROID_* name) says ``off``."""
    for key, value in environ.items():
        if key.upper() == SWITCH:
            return value.strip().lower() == "off"
    return False


def verdict(piece: Piece) -> str | None:
    """The piece's check, with an exception counted as a failed contract."""
    try:
        return piece.check()
    except Exception as exc:  # a check that cannot even run: the internals moved
        return f"the contract check raised {type(exc).__name__}: {exc}"


def assigned(function: Callable[..., Any]) -> frozenset[str]:
    """The attribute names a function's code assigns (``self.x = ...``): what a contract
    compares when a fast path copies or relies on a library's ``__init__``."""
    return frozenset(
        str(i.argval) for i in dis.get_instructions(function) if i.opname == "STORE_ATTR"
    )


def _version(piece: Piece) -> str:
    try:
        return piece.version()
    except Exception:
        return "unknown"


class Registry:
    """The pieces of one side (``canonical`` or ``edge``) and the process's decision."""

    def __init__(self, side: str, pieces: list[Piece]) -> None:
        self.side = side
        self.pieces = {piece.name: piece for piece in pieces}
        self._active: frozenset[str] | None = None
        self._off: bool | None = None  # the process's settings, when given (configure)

    def active(self) -> frozenset[str]:
        """The pieces this process runs, decided (and logged) at the first call."""
        if self._active is None:
            off = switched_off(os.environ) if self._off is None else self._off
            self._active = self._decide(off)
        return self._active

    def configure(self, setting: str) -> None:
        """The process's ``ANDROID_FASTPATH`` setting (``on``/``off``) as its settings read
        it (for the plugin, possibly from config.yaml). It decides if nothing has asked
        yet; otherwise a setting the decision did not follow is logged."""
        off = setting.strip().lower() == "off"
        if self._active is None:
            self._off = off
        elif off and self._active:
            log.warning(
                "%s=off reached %s after its fast paths were chosen: set it in the "
                "environment of the process to turn them off",
                SWITCH,
                self.side,
            )

    def enabled(self, name: str) -> bool:
        if name not in self.pieces:
            raise KeyError(f"no fast path {name!r} in {self.side}")
        return name in self.active()

    def reset(self) -> None:
        """Forget the decision: the next question decides again (for tests, which change
        the switch or a library's internals within one process)."""
        self._active = None
        self._off = None

    def _decide(self, off: bool) -> frozenset[str]:
        if off:
            log.info(
                "%s=off: %s runs the stock path of every library (%s)",
                SWITCH,
                self.side,
                ", ".join(self.pieces),
            )
            return frozenset()
        active = set()
        for piece in self.pieces.values():
            failed = verdict(piece)
            if failed is None:
                active.add(piece.name)
            else:
                log.warning(
                    "fast path %s.%s off: %s %s does not have what it relies on (%s); "
                    "running %s's stock path",
                    self.side,
                    piece.name,
                    piece.library,
                    _version(piece),
                    failed,
                    piece.library,
                )
        return frozenset(active)


__all__ = ["SWITCH", "Piece", "Registry", "assigned", "switched_off", "verdict"]

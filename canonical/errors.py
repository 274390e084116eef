"""Errors of the cross-process contract.

ContractError                 root of everything this package raises
├── SettingsError             a setting is missing or wrong: stop start-up, name the setting
├── BusError                  the bus failed
│   └── BusUnavailable        the bus cannot be reached now: retry later, tell the client
└── ProtocolError             a frame or command breaks the contract: answer with `code`
"""

from __future__ import annotations


class ContractError(Exception):
    """Root of the contract package's errors."""


class SettingsError(ContractError):
    """A setting is missing or invalid; the message names it."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"{setting}: {problem}")
        self.setting = setting
        self.problem = problem


class BusError(ContractError):
    """The bus failed."""


class BusUnavailable(BusError):
    """The bus cannot be reached right now; callers retry with backoff."""


class ProtocolError(ContractError):
    """A frame or command breaks the protocol; `code` is the wire error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

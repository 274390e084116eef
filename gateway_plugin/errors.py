"""Errors of the plugin.

PluginError             root
├── CommandError        a command cannot be carried out: answer `code` to the requester
└── StorageClosed       a storage job submitted after its thread stopped (storage/thread.py)
"""

from __future__ import annotations


class PluginError(Exception):
    """Root of the plugin's errors."""


class CommandError(PluginError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

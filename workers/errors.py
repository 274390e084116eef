"""Errors raised by the workers package, grouped by what the caller should do.

::

    WorkerError                 root of everything this package raises
    ├── RetryableError          transient (network, 5xx, 429): retry with backoff
    ├── PermanentError          retrying cannot help: record a failed outcome
    │   ├── JobPayloadError     the job's arguments are malformed (`field` names the culprit)
    │   ├── UnsafePathError     a path lies outside the media root: refuse the job
    │   └── MediaError          a media file is corrupt, too large or unsupported (`code`)
    └── ConfigError             a setting is missing or wrong: stop, name the setting

Job functions never let these escape to arq: they turn them into outcome dicts
(``{"outcome": "failed", ...}``) or into ``arq.Retry``. A ``ConfigError`` raised at
start-up stops the worker with one line naming the bad setting.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "ConfigError",
    "JobPayloadError",
    "MediaError",
    "MediaErrorCode",
    "PermanentError",
    "RetryableError",
    "UnsafePathError",
    "WorkerError",
]

MediaErrorCode = Literal["corrupt", "too_large", "unsupported"]


class WorkerError(Exception):
    """Root of the workers package's errors."""


class RetryableError(WorkerError):
    """A transient failure: the same job may succeed later."""


class PermanentError(WorkerError):
    """Retrying cannot help; the job ends with a failed outcome."""


class JobPayloadError(PermanentError):
    """A job argument is missing or has the wrong type; ``field`` names it."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class UnsafePathError(PermanentError):
    """A path given to a job resolves outside the configured media root."""


class MediaError(PermanentError):
    """A media file cannot be transcoded; ``code`` says why.

    ``corrupt``: the bytes do not decode (truncated, random, hostile).
    ``too_large``: the file exceeds a pixel, duration or size cap.
    ``unsupported``: a readable file in a format or layout this worker does not handle.
    """

    def __init__(self, code: MediaErrorCode, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code: MediaErrorCode = code
        self.message = message


class ConfigError(WorkerError):
    """A setting is missing or invalid; the message starts with the setting's name."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"{setting}: {problem}")
        self.setting = setting
        self.problem = problem

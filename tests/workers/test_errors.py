"""workers.errors: one root, grouped by what the caller does."""

from __future__ import annotations

import workers.errors as errors
from workers.errors import (
    ConfigError,
    JobPayloadError,
    MediaError,
    PermanentError,
    RetryableError,
    UnsafePathError,
    WorkerError,
)


def test_every_error_descends_from_one_root() -> None:
    for cls in (
        RetryableError,
        PermanentError,
        ConfigError,
        JobPayloadError,
        UnsafePathError,
        MediaError,
    ):
        assert issubclass(cls, WorkerError)
    for cls in (JobPayloadError, UnsafePathError, MediaError):
        assert issubclass(cls, PermanentError)


def test_the_docstring_draws_every_class_in_the_tree() -> None:
    doc = errors.__doc__ or ""
    for name in errors.__all__:
        if name != "MediaErrorCode":
            assert name in doc


def test_errors_carry_what_the_caller_needs() -> None:
    assert ConfigError("NTFY_TOPIC", "is required").setting == "NTFY_TOPIC"
    assert str(MediaError("too_large", "100000x100000")) == "too_large: 100000x100000"
    assert JobPayloadError("kind", "is required").field == "kind"

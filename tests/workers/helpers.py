"""Small helpers shared by the workers' tests."""

from __future__ import annotations

from typing import Any

from workers.context import RESOURCES_KEY, WorkerResources


def job_ctx(res: WorkerResources, job_try: int = 1) -> dict[str, Any]:
    """The ``ctx`` an arq worker passes a job, minus ``redis``."""
    return {RESOURCES_KEY: res, "job_id": "test-job", "job_try": job_try}


def notification(**overrides: Any) -> dict[str, Any]:
    """A valid ``push_notify`` payload."""
    base: dict[str, Any] = {
        "idempotency_key": "msg-1:dev-1",
        "tenant": "default",
        "device_id": "dev-1",
        "backend": "fcm",
        "token_or_topic": "device-token-1",
        "kind": "reply",
        "chat_id": "chat-42",
        "thread_id": None,
        "cursor": "17",
        "title": "Hermes",
    }
    base.update(overrides)
    return base

"""The ``push_notify`` job: one notification to one device, idempotently.

Flow: validate the payload -> if the idempotency key is marked done, return the
recorded result -> if a device of the tenant has acknowledged the event's cursor
meanwhile, return ``acked`` without sending (checked on every try: a retry deferred by
``Retry-After`` may come after the user read it elsewhere) -> send -> act on the outcome:

* ``delivered`` / ``token_invalid``: mark done (SET NX), record dead FCM tokens in
  ``gw:{tenant}:push:dead_tokens``, return the outcome dict;
* ``retry_after`` / ``retry``: raise ``arq.Retry`` with the server's delay or
  exponential backoff + jitter; on the last allowed try, give up with ``failed``;
* ``failed``: return it (not marked done, so a deliberate re-enqueue can try again).

Exactly-once caveat: a worker killed between the service's 2xx and the done marker
re-sends on the re-run. That window is one Redis round-trip; the collapse key makes
such a duplicate replace the first notification rather than add a second one.
"""

from __future__ import annotations

import logging
from typing import Any

from arq import Retry

from ..context import WorkerResources, resources
from ..errors import ConfigError, JobPayloadError
from ..metrics import JOB_DURATION, PUSH_RESULTS
from .classify import Delivered, Failed, PushOutcome, RetryAfter, RetryLater, TokenInvalid
from .notification import Notification, deep_link

__all__ = ["push_notify"]

log = logging.getLogger(__name__)


async def push_notify(ctx: dict[str, Any], notification: dict[str, Any]) -> dict[str, Any]:
    """Send one push notification; returns an outcome dict (see module docstring)."""
    with JOB_DURATION.labels(job="push_notify").time():
        return await _push(resources(ctx), int(ctx.get("job_try") or 1), notification)


async def _push(res: WorkerResources, job_try: int, payload: dict[str, Any]) -> dict[str, Any]:
    try:
        n = Notification.from_dict(payload)
    except JobPayloadError as exc:
        backend = payload.get("backend") if isinstance(payload, dict) else None
        label = backend if backend in ("fcm", "ntfy") else "unknown"
        PUSH_RESULTS.labels(backend=label, outcome="failed").inc()
        return {"outcome": "failed", "reason": f"bad notification payload: {exc}", "backend": label}

    recorded = await res.idempotency.get(n.idempotency_key)
    if recorded is not None:
        log.info(
            "push %s already done (%s); not sending again",
            n.idempotency_key,
            recorded.get("outcome"),
        )
        return {**recorded, "duplicate": True}

    if await _already_read(res, n):
        PUSH_RESULTS.labels(backend=n.backend, outcome="acked").inc()
        log.info("push %s skipped: the event was read meanwhile", n.idempotency_key)
        return _result({"outcome": "acked"}, n, job_try)

    outcome: PushOutcome
    try:
        sender = res.sender(n.backend)
    except ConfigError as exc:
        outcome = Failed(str(exc))
    else:
        link = deep_link(res.config.deep_link_scheme, n.chat_id, n.thread_id)
        outcome = await sender.send(n, link)

    if isinstance(outcome, RetryAfter | RetryLater) and job_try >= res.config.push_max_tries:
        outcome = Failed(f"gave up after {job_try} tries: {outcome.reason}")
    PUSH_RESULTS.labels(backend=n.backend, outcome=outcome.kind).inc()

    result = _result(outcome.to_dict(), n, job_try)
    if isinstance(outcome, RetryAfter):
        raise Retry(defer=res.retry.after(outcome.seconds))
    if isinstance(outcome, RetryLater):
        raise Retry(defer=res.retry.backoff(job_try))
    if isinstance(outcome, TokenInvalid) and n.backend == "fcm":
        await res.dead_tokens.add(n.tenant, n.token_or_topic)
    if isinstance(outcome, Delivered | TokenInvalid):
        await res.idempotency.mark_done(
            n.idempotency_key, result, res.config.idempotency_ttl_seconds
        )
    else:
        log.warning("push %s failed: %s", n.idempotency_key, outcome.reason)
    return result


async def _already_read(res: WorkerResources, n: Notification) -> bool:
    """A device of the tenant has acknowledged the event this push is about."""
    if n.cursor is None or not (n.cursor.isascii() and n.cursor.isdigit()):
        return False
    return await res.acks.acked(n.tenant) >= int(n.cursor)


def _result(outcome: dict[str, Any], n: Notification, job_try: int) -> dict[str, Any]:
    return {
        **outcome,
        "backend": n.backend,
        "tenant": n.tenant,
        "device_id": n.device_id,
        "idempotency_key": n.idempotency_key,
        "tries": job_try,
    }

"""The ``push_notify`` job: one notification to one device, idempotently.

Flow: validate the payload -> if the idempotency key is marked done, return the
recorded result -> if a device of the tenant has acknowledged the event's cursor
meanwhile, return ``acked`` without sending (checked on every try: a retry deferred by
``Retry-After`` may come after the user read it elsewhere) -> send -> act on the outcome:

* ``delivered`` / ``token_invalid``: mark done (SET NX), record dead FCM tokens in
  ``gw:{tenant}:push:dead_tokens``, return the outcome dict;
* ``retry_after`` / ``retry``: raise ``arq.Retry`` with the server's delay or
  exponential backoff + jitter; on the last allowed try, give up with ``failed``;
* ``failed``: return it (not marked done, so a deliberate re-enqueue can try again);
* Redis unreachable or timing out anywhere in the job: ``arq.Retry`` with backoff, up to
  the last try (then ``failed``). A push that went out before Redis failed is kept in
  the process (``WorkerResources.unsent_records``), so the retry writes its records
  instead of sending it again.

Exactly-once caveat: a worker killed between the service's 2xx and the done marker
re-sends on the re-run, and so does a retry after a Redis failure that another worker
process picks up. That window is one Redis round-trip; the collapse key makes such a
duplicate replace the first notification rather than add a second one.
"""

from __future__ import annotations

import logging
from typing import Any

from arq import Retry
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

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
        res = resources(ctx)
        job_try = int(ctx.get("job_try") or 1)
        try:
            return await _push(res, job_try, notification)
        except (RedisConnectionError, RedisTimeoutError) as exc:
            return _after_redis_failure(res, job_try, notification, exc)


def _after_redis_failure(
    res: WorkerResources, job_try: int, payload: dict[str, Any], exc: Exception
) -> dict[str, Any]:
    """Redis failed mid-job (a failover, a restart): back off and try the job again, up to
    its last try. A push that already went out is remembered in this process
    (``res.unsent_records``), so the next try only writes its records."""
    label = _backend_label(payload)
    reason = f"Redis unavailable ({type(exc).__name__})"
    if job_try < res.config.push_max_tries:
        PUSH_RESULTS.labels(backend=label, outcome="retry").inc()
        delay = res.retry.backoff(job_try)
        log.warning("push try %d: %s; trying again in %.1fs", job_try, reason, delay)
        raise Retry(defer=delay)
    key = payload.get("idempotency_key") if isinstance(payload, dict) else None
    sent = res.unsent_records.pop(str(key), None)
    if sent is not None:  # it went out: say so, though no done marker could be written
        log.warning("push %s sent, but its done marker was not written: %s", key, reason)
        return sent
    PUSH_RESULTS.labels(backend=label, outcome="failed").inc()
    log.warning("push %s failed: gave up after %d tries: %s", key, job_try, reason)
    return {
        "outcome": "failed",
        "reason": f"gave up after {job_try} tries: {reason}",
        "backend": label,
        "tries": job_try,
    }


def _backend_label(payload: object) -> str:
    backend = payload.get("backend") if isinstance(payload, dict) else None
    return backend if backend in ("fcm", "ntfy") else "unknown"


async def _push(res: WorkerResources, job_try: int, payload: dict[str, Any]) -> dict[str, Any]:
    try:
        n = Notification.from_dict(payload)
    except JobPayloadError as exc:
        label = _backend_label(payload)
        PUSH_RESULTS.labels(backend=label, outcome="failed").inc()
        return {"outcome": "failed", "reason": f"bad notification payload: {exc}", "backend": label}

    sent = res.unsent_records.get(n.idempotency_key)
    if sent is not None:  # an earlier try sent it; Redis failed before its records were written
        await _record(res, n, sent)
        return sent

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
    if isinstance(outcome, Delivered | TokenInvalid):
        res.remember_unsent_record(n.idempotency_key, result)
        await _record(res, n, result)
    else:
        log.warning("push %s failed: %s", n.idempotency_key, outcome.reason)
    return result


async def _record(res: WorkerResources, n: Notification, result: dict[str, Any]) -> None:
    """Write what a finished push leaves behind: a dead token's report, the done marker."""
    if result.get("outcome") == "token_invalid" and n.backend == "fcm":
        await res.dead_tokens.add(n.tenant, n.token_or_topic)
    await res.idempotency.mark_done(n.idempotency_key, result, res.config.idempotency_ttl_seconds)
    res.unsent_records.pop(n.idempotency_key, None)


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

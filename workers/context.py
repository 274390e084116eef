"""The shared resources job functions find in their ``ctx``.

arq passes every job a ``ctx`` dict; the worker's start-up hook (or the in-process
runner) stores one :class:`WorkerResources` under ``ctx["hdg"]``. Job functions read
everything through it, never ``ctx["redis"]`` directly, so the same coroutines run in
an arq worker (Redis-backed stores) and embedded (in-memory stores, no Redis).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
from redis.asyncio import Redis

from .config import WorkerConfig
from .errors import ConfigError
from .idempotency import IdempotencyStore, MemoryIdempotencyStore, RedisIdempotencyStore
from .push.acks import AckLedger, MemoryAcks, RedisAcks
from .push.classify import PushOutcome
from .push.dead_tokens import DeadTokenRegistry, MemoryDeadTokens, RedisDeadTokens
from .push.fcm import FcmSender, ServiceAccount
from .push.notification import Notification
from .push.ntfy import NtfySender
from .retry import RetryPolicy

__all__ = ["RESOURCES_KEY", "PushSender", "WorkerResources", "build_resources", "resources"]

log = logging.getLogger(__name__)

RESOURCES_KEY = "hdg"
MAX_UNSENT_RECORDS = 10_000


class PushSender(Protocol):
    backend: str

    async def send(self, notification: Notification, link: str) -> PushOutcome: ...


@dataclass(eq=False)
class WorkerResources:
    """Configuration, stores, the HTTP client and the push senders of one process."""

    config: WorkerConfig
    idempotency: IdempotencyStore
    dead_tokens: DeadTokenRegistry
    acks: AckLedger
    http: httpx.AsyncClient
    retry: RetryPolicy
    senders: dict[str, PushSender] = field(default_factory=dict)
    owns_http: bool = True
    # Pushes that went out whose records (done marker, dead token) Redis refused, by
    # idempotency key: the job's retry writes them instead of sending again.
    unsent_records: dict[str, dict[str, Any]] = field(default_factory=dict)

    def remember_unsent_record(self, key: str, result: dict[str, Any]) -> None:
        self.unsent_records[key] = result
        while len(self.unsent_records) > MAX_UNSENT_RECORDS:  # Redis down for long
            del self.unsent_records[next(iter(self.unsent_records))]

    def sender(self, backend: str) -> PushSender:
        """The sender for ``backend``; ConfigError naming the missing setting if absent."""
        try:
            return self.senders[backend]
        except KeyError:
            if backend == "fcm":
                raise ConfigError(
                    "ANDROID_FCM_SERVICE_ACCOUNT", "is not set, so FCM pushes cannot be sent"
                ) from None
            raise ConfigError(
                "ANDROID_PUSH_BACKEND", f"push backend {backend!r} is not configured"
            ) from None

    async def aclose(self) -> None:
        if self.owns_http:
            await self.http.aclose()


def build_resources(
    config: WorkerConfig,
    *,
    redis: Redis | None = None,
    http: httpx.AsyncClient | None = None,
    idempotency: IdempotencyStore | None = None,
    dead_tokens: DeadTokenRegistry | None = None,
    acks: AckLedger | None = None,
) -> WorkerResources:
    """Assemble resources: Redis-backed stores when ``redis`` is given, else in-memory.

    Loads the FCM service account eagerly, so a broken key file stops start-up with a
    :class:`ConfigError` naming ``ANDROID_FCM_SERVICE_ACCOUNT``.
    """
    client = http or httpx.AsyncClient(
        timeout=httpx.Timeout(config.push_http_timeout, connect=min(5.0, config.push_http_timeout)),
        limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
        follow_redirects=False,
    )
    if idempotency is None:
        idempotency = (
            RedisIdempotencyStore(redis) if redis is not None else MemoryIdempotencyStore()
        )
    if dead_tokens is None:
        dead_tokens = RedisDeadTokens(redis) if redis is not None else MemoryDeadTokens()
    if acks is None:
        acks = RedisAcks(redis) if redis is not None else MemoryAcks()
    senders: dict[str, PushSender] = {
        "ntfy": NtfySender(
            client,
            server_url=config.ntfy_server_url,
            default_topic=config.ntfy_topic,
            authorization=config.ntfy_authorization(),
        )
    }
    if config.fcm_service_account is not None:
        account = ServiceAccount.from_file(config.fcm_service_account)
        senders["fcm"] = FcmSender(account, client, api_base=config.fcm_api_base)
    elif config.push_backend == "fcm":
        log.warning("ANDROID_FCM_SERVICE_ACCOUNT is not set: FCM pushes will fail until it is")
    return WorkerResources(
        config=config,
        idempotency=idempotency,
        dead_tokens=dead_tokens,
        acks=acks,
        http=client,
        retry=RetryPolicy(base=config.retry_base_seconds, cap=config.retry_max_seconds),
        senders=senders,
        owns_http=http is None,
    )


def resources(ctx: dict[str, Any]) -> WorkerResources:
    """The resources stored in a job's ``ctx`` by the start-up hook or the runner."""
    value = ctx.get(RESOURCES_KEY)
    if not isinstance(value, WorkerResources):
        raise RuntimeError(
            "ctx has no worker resources: run jobs through workers.settings (arq) "
            "or workers.inprocess.InProcessRunner"
        )
    return value

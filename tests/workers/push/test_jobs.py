"""workers.push.jobs: the push_notify job, called directly with a ctx (no arq)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from arq import Retry
from prometheus_client import REGISTRY
from redis.asyncio import Redis

from tests.harness.processes import RedisServer
from tests.workers.fake_services import FakeFcm, FakeNtfy, FcmScript, NtfyScript
from tests.workers.helpers import job_ctx, notification
from workers.config import WorkerConfig, load_config
from workers.context import WorkerResources, build_resources
from workers.push.acks import RedisAcks, acked_key
from workers.push.dead_tokens import MemoryDeadTokens, RedisDeadTokens, dead_tokens_key
from workers.push.jobs import push_notify

MakeResources = Callable[..., WorkerResources]


def results(backend: str, outcome: str) -> float:
    value = REGISTRY.get_sample_value(
        "hdg_push_results_total", {"backend": backend, "outcome": outcome}
    )
    return value or 0.0


@pytest.fixture
def fcm_resources(
    make_resources: MakeResources, fcm: FakeFcm, service_account_file: Path
) -> WorkerResources:
    return make_resources(fcm_service_account=service_account_file, fcm_api_base=fcm.url)


async def test_a_delivered_push_returns_its_outcome_and_counts_it(
    fcm_resources: WorkerResources, fcm: FakeFcm
) -> None:
    before = results("fcm", "delivered")
    result = await push_notify(job_ctx(fcm_resources), notification())
    assert result["outcome"] == "delivered"
    assert result["device_id"] == "dev-1"
    assert result["message_id"].startswith("projects/hdg-test-project/messages/")
    assert results("fcm", "delivered") == before + 1
    assert len(fcm.deliveries("device-token-1")) == 1


async def test_a_rerun_of_a_delivered_push_does_not_push_again(
    fcm_resources: WorkerResources, fcm: FakeFcm
) -> None:
    first = await push_notify(job_ctx(fcm_resources), notification())
    again = await push_notify(job_ctx(fcm_resources, job_try=2), notification())
    assert again == {**first, "duplicate": True}
    assert fcm.attempts["device-token-1"] == 1


async def test_a_dead_token_is_recorded_for_the_plugin_to_prune(
    fcm_resources: WorkerResources, fcm: FakeFcm
) -> None:
    fcm.script("device-token-1", FcmScript.unregistered())
    result = await push_notify(job_ctx(fcm_resources), notification(tenant="acme"))
    assert result["outcome"] == "token_invalid"
    assert isinstance(fcm_resources.dead_tokens, MemoryDeadTokens)
    assert fcm_resources.dead_tokens.tokens == {"acme": {"device-token-1"}}


async def test_dead_tokens_land_in_the_tenants_redis_set(
    redis_server: RedisServer, fcm: FakeFcm, service_account_file: Path
) -> None:
    redis = Redis.from_url(redis_server.url_for_db(3))
    await redis.delete(dead_tokens_key("acme"))
    res = build_resources(
        load_config(
            bus_url=redis_server.url_for_db(3),
            fcm_service_account=service_account_file,
            fcm_api_base=fcm.url,
        ),
        redis=redis,
    )
    try:
        assert isinstance(res.dead_tokens, RedisDeadTokens)
        fcm.script("device-token-1", FcmScript.sender_id_mismatch())
        await push_notify(job_ctx(res), notification(tenant="acme", idempotency_key="k-dead"))
        assert await redis.smembers("gw:acme:push:dead_tokens") == {b"device-token-1"}
        assert await redis.get("gw:done:k-dead") is not None
        # What the plugin does once its registry has dropped them.
        assert await res.dead_tokens.members("acme") == {"device-token-1"}
        await res.dead_tokens.discard("acme", {"device-token-1"})
        assert await res.dead_tokens.members("acme") == set()
    finally:
        await res.aclose()
        await redis.delete("gw:done:k-dead", dead_tokens_key("acme"))
        await redis.aclose()


async def test_quota_exceeded_defers_the_retry_by_at_least_retry_after(
    fcm_resources: WorkerResources, fcm: FakeFcm
) -> None:
    fcm.script("device-token-1", FcmScript.quota_exceeded(retry_after=9))
    with pytest.raises(Retry) as raised:
        await push_notify(job_ctx(fcm_resources), notification())
    assert raised.value.defer_score is not None
    assert 9_000 <= raised.value.defer_score <= 9_000 + 900


@pytest.mark.parametrize(
    "script", [FcmScript.unavailable(), FcmScript.internal()], ids=["503", "500"]
)
async def test_transient_errors_retry_with_backoff(
    fcm_resources: WorkerResources, fcm: FakeFcm, script: FcmScript
) -> None:
    fcm.script("device-token-1", script)
    with pytest.raises(Retry):
        await push_notify(job_ctx(fcm_resources), notification())
    result = await push_notify(job_ctx(fcm_resources, job_try=2), notification())
    assert result["outcome"] == "delivered"
    assert len(fcm.deliveries("device-token-1")) == 1


async def test_the_last_try_gives_up_with_a_failed_outcome(
    make_resources: MakeResources, fcm: FakeFcm, service_account_file: Path
) -> None:
    res = make_resources(
        fcm_service_account=service_account_file, fcm_api_base=fcm.url, push_max_tries=3
    )
    fcm.script("device-token-1", FcmScript.unavailable())
    result = await push_notify(job_ctx(res, job_try=3), notification())
    assert result["outcome"] == "failed"
    assert result["reason"].startswith("gave up after 3 tries: UNAVAILABLE")


async def test_a_failed_push_is_not_marked_done(
    fcm_resources: WorkerResources, fcm: FakeFcm
) -> None:
    fcm.script("device-token-1", FcmScript.third_party_auth())
    assert (await push_notify(job_ctx(fcm_resources), notification()))["outcome"] == "failed"
    assert await fcm_resources.idempotency.get("msg-1:dev-1") is None


async def test_fcm_without_a_service_account_fails_and_names_the_setting(
    make_resources: MakeResources,
) -> None:
    result = await push_notify(job_ctx(make_resources()), notification())
    assert result["outcome"] == "failed"
    assert result["reason"].startswith("ANDROID_FCM_SERVICE_ACCOUNT")


async def test_a_malformed_payload_fails_without_raising(make_resources: MakeResources) -> None:
    result = await push_notify(job_ctx(make_resources()), notification(kind="shout"))
    assert result == {
        "outcome": "failed",
        "reason": "bad notification payload: kind: must be one of reply, approval, clarify, cron (got 'shout')",
        "backend": "fcm",
    }


async def test_ntfy_pushes_go_through_the_same_job(
    make_resources: MakeResources, ntfy: FakeNtfy
) -> None:
    res = make_resources(ntfy_server_url=ntfy.url)
    payload = notification(backend="ntfy", token_or_topic="phone-topic", thread_id="t 1")
    result = await push_notify(job_ctx(res), payload)
    assert result["outcome"] == "delivered"
    assert ntfy.published[0]["click"] == "hermes-device://chat/chat-42?thread=t%201"


async def test_ntfy_rate_limits_become_retries(
    make_resources: MakeResources, ntfy: FakeNtfy
) -> None:
    res = make_resources(ntfy_server_url=ntfy.url)
    ntfy.script("phone-topic", NtfyScript.rate_limited())
    before = results("ntfy", "retry")
    with pytest.raises(Retry):
        await push_notify(job_ctx(res), notification(backend="ntfy", token_or_topic="phone-topic"))
    assert results("ntfy", "retry") == before + 1


async def test_the_deep_link_scheme_is_a_setting(
    make_resources: MakeResources, ntfy: FakeNtfy
) -> None:
    res = make_resources(ntfy_server_url=ntfy.url, deep_link_scheme="acme-chat")
    await push_notify(job_ctx(res), notification(backend="ntfy", token_or_topic="t"))
    assert ntfy.published[0]["click"] == "acme-chat://chat/chat-42"


async def test_a_retry_after_an_ack_of_its_event_is_not_sent(
    fcm_resources: WorkerResources, fcm: FakeFcm
) -> None:
    fcm.script("device-token-1", FcmScript.quota_exceeded(retry_after=1))
    with pytest.raises(Retry):
        await push_notify(job_ctx(fcm_resources), notification(tenant="acme", cursor="17"))
    before = results("fcm", "acked")
    await fcm_resources.acks.record("acme", 17)  # read on another device meanwhile

    result = await push_notify(job_ctx(fcm_resources, job_try=2), notification(tenant="acme"))
    assert result["outcome"] == "acked" and result["tries"] == 2
    assert fcm.attempts["device-token-1"] == 1 and fcm.deliveries("device-token-1") == []
    assert results("fcm", "acked") == before + 1


async def test_an_ack_of_an_earlier_event_or_another_tenant_does_not_stop_a_push(
    fcm_resources: WorkerResources, fcm: FakeFcm
) -> None:
    await fcm_resources.acks.record("acme", 16)
    await fcm_resources.acks.record("other", 99)
    result = await push_notify(job_ctx(fcm_resources), notification(tenant="acme", cursor="17"))
    assert result["outcome"] == "delivered"


async def test_the_redis_ack_ledger_only_ever_rises(redis_server: RedisServer) -> None:
    redis = Redis.from_url(redis_server.url_for_db(3))
    ledger = RedisAcks(redis)
    try:
        await redis.delete(acked_key("acme"))
        assert await ledger.acked("acme") == 0
        await ledger.record("acme", 40)
        await ledger.record("acme", 12)  # another device, further behind
        assert await ledger.acked("acme") == 40
        await ledger.record("acme", 41)
        assert await ledger.acked("acme") == 41 and await ledger.acked("other") == 0
    finally:
        await redis.delete(acked_key("acme"))
        await redis.aclose()


# -- Redis failing under a job -------------------------------------------------------------


@pytest.fixture
async def flaky_redis(
    redis_factory: Callable[..., RedisServer],
    make_config: Callable[..., WorkerConfig],
    fcm: FakeFcm,
    service_account_file: Path,
) -> AsyncIterator[tuple[RedisServer, WorkerResources]]:
    """A private Redis the test may stop and restart, and resources backed by it."""
    server = redis_factory()
    redis = Redis.from_url(server.url)
    config = make_config(
        bus_url=server.url, fcm_service_account=service_account_file, fcm_api_base=fcm.url
    )
    res = build_resources(config, redis=redis)
    try:
        yield server, res
    finally:
        await res.aclose()
        await redis.aclose()


async def test_a_redis_failure_before_sending_retries_with_backoff_and_sends_nothing(
    flaky_redis: tuple[RedisServer, WorkerResources], fcm: FakeFcm
) -> None:
    server, res = flaky_redis
    server.stop()
    before = results("fcm", "retry")
    with pytest.raises(Retry) as raised:
        await push_notify(job_ctx(res), notification())
    assert raised.value.defer_score is not None and raised.value.defer_score >= 1_000
    assert fcm.attempts["device-token-1"] == 0 and results("fcm", "retry") == before + 1

    server.restart()
    result = await push_notify(job_ctx(res, job_try=2), notification())
    assert result["outcome"] == "delivered" and len(fcm.deliveries("device-token-1")) == 1


async def test_a_redis_failure_after_sending_retries_without_sending_again(
    flaky_redis: tuple[RedisServer, WorkerResources], fcm: FakeFcm
) -> None:
    server, res = flaky_redis
    fcm.send_delay = 0.5  # Redis goes down while FCM is answering
    first = asyncio.create_task(push_notify(job_ctx(res), notification()))
    await eventually(lambda: fcm.attempts["device-token-1"] == 1, "the send")
    server.stop()
    with pytest.raises(Retry):
        await first

    server.restart()
    result = await push_notify(job_ctx(res, job_try=2), notification())
    assert result["outcome"] == "delivered" and result["tries"] == 1
    assert fcm.attempts["device-token-1"] == 1
    assert await res.idempotency.get("msg-1:dev-1") == result  # the done marker, at last


async def test_a_dead_token_found_before_redis_failed_is_still_reported(
    flaky_redis: tuple[RedisServer, WorkerResources], fcm: FakeFcm
) -> None:
    server, res = flaky_redis
    fcm.send_delay = 0.5
    fcm.script("device-token-1", FcmScript.unregistered())
    first = asyncio.create_task(push_notify(job_ctx(res), notification(tenant="acme")))
    await eventually(lambda: fcm.attempts["device-token-1"] == 1, "the send")
    server.stop()
    with pytest.raises(Retry):
        await first

    server.restart()
    result = await push_notify(job_ctx(res, job_try=2), notification(tenant="acme"))
    assert result["outcome"] == "token_invalid" and fcm.attempts["device-token-1"] == 1
    assert await res.dead_tokens.members("acme") == {"device-token-1"}


async def test_redis_down_on_the_last_try_ends_the_job_as_failed(
    flaky_redis: tuple[RedisServer, WorkerResources], fcm: FakeFcm
) -> None:
    server, res = flaky_redis
    server.stop()
    tries = res.config.push_max_tries
    result = await push_notify(job_ctx(res, job_try=tries), notification())
    assert result["outcome"] == "failed"
    assert result["reason"] == f"gave up after {tries} tries: Redis unavailable (ConnectionError)"
    assert fcm.attempts["device-token-1"] == 0


async def eventually(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def test_pushes_awaiting_their_records_are_bounded_oldest_first(
    make_resources: MakeResources, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("workers.context.MAX_UNSENT_RECORDS", 2)
    res = make_resources()
    for key in ("k1", "k2", "k3"):
        res.remember_unsent_record(key, {"outcome": "delivered"})
    assert list(res.unsent_records) == ["k2", "k3"]

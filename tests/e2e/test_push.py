"""Push decisions against the real gateway: a local ntfy/FCM that answers like the real
service receives exactly the pushes that should happen."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Deployment
from tests.e2e.flows import frames_of_run, iris_send
from tests.workers.fake_services import FakeNtfy, running_fcm, running_ntfy

TOPIC = "hdg-test-topic"


@pytest.fixture(scope="module")
def ntfy_server() -> Iterator[FakeNtfy]:
    with running_ntfy() as fake:
        yield fake


@pytest.fixture
def ntfy(ntfy_server: FakeNtfy) -> FakeNtfy:
    ntfy_server.reset()
    return ntfy_server


def _push_env(ntfy: FakeNtfy, delay: float) -> dict[str, str]:
    return {
        "ANDROID_PUSH_BACKEND": "ntfy",
        "NTFY_SERVER_URL": ntfy.url,
        "NTFY_TOPIC": TOPIC,
        "ANDROID_PUSH_DELAY_S": str(delay),
    }


async def _published(ntfy: FakeNtfy, count: int, timeout: float = 15.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(ntfy.published) >= count:
            return list(ntfy.published)
        await asyncio.sleep(0.05)
    return list(ntfy.published)


async def test_a_reply_nobody_is_online_for_is_pushed_without_its_content(
    embedded: Callable[..., Deployment], ntfy: FakeNtfy
) -> None:
    deployment = embedded(**_push_env(ntfy, 5.0))
    phone = await deployment.iris("phone")
    ack = await iris_send(phone, "android:default", "[long] the secret plan is pineapple")
    await phone.close()
    published = await _published(ntfy, 1, timeout=60)
    assert len(published) == 1
    body = published[0]
    assert body["topic"] == TOPIC and "pineapple" not in str(body)
    assert "android:default" in str(body.get("click", "")) or "android" in str(body)
    assert ack["run_id"]


async def test_an_online_device_that_acks_gets_no_push(
    embedded: Callable[..., Deployment], ntfy: FakeNtfy
) -> None:
    deployment = embedded(**_push_env(ntfy, 2.0))
    phone = await deployment.iris("phone")
    ack = await iris_send(phone, "android:default", "hello there")
    await frames_of_run(phone, ack["run_id"])
    await phone.send({"type": "ack", "cursor": phone.last_cursor})
    await asyncio.sleep(3.5)
    assert ntfy.published == []


async def test_an_online_device_that_never_acks_is_pushed_after_the_delay(
    embedded: Callable[..., Deployment], ntfy: FakeNtfy
) -> None:
    deployment = embedded(**_push_env(ntfy, 1.0))
    phone = await deployment.iris("phone")
    ack = await iris_send(phone, "android:default", "hello there")
    finished_at = time.monotonic()
    await frames_of_run(phone, ack["run_id"])
    published = await _published(ntfy, 1)
    assert len(published) == 1 and time.monotonic() - finished_at >= 0.9


async def test_an_approval_request_is_pushed_when_nobody_acks_it(
    embedded: Callable[..., Deployment], ntfy: FakeNtfy
) -> None:
    deployment = embedded(**_push_env(ntfy, 0.5))
    phone = await deployment.iris("phone")
    await iris_send(phone, "android:default", "[danger] tidy up")
    await phone.wait_type("picker.approval", timeout=60)
    published = await _published(ntfy, 1)
    assert any("Approval" in str(p.get("title")) for p in published)


async def test_fcm_pushes_reach_the_registered_token(
    embedded: Callable[..., Deployment], tmp_path: Path
) -> None:
    (tmp_path / "fcm").mkdir()
    with running_fcm(tmp_path / "fcm") as (fcm, account_path):
        deployment = embedded(
            ANDROID_PUSH_BACKEND="fcm",
            ANDROID_FCM_SERVICE_ACCOUNT=str(account_path),
            ANDROID_FCM_API_BASE=fcm.url,
            ANDROID_PUSH_DELAY_S="0.5",
        )
        phone = await deployment.iris("phone")
        registered = await phone.request({"type": "fcm.register", "token": "device-token-1"})
        assert registered["type"] == "result"
        ack = await iris_send(phone, "android:default", "hello fcm")
        await frames_of_run(phone, ack["run_id"])
        for _ in range(100):
            if fcm.deliveries("device-token-1"):
                break
            await asyncio.sleep(0.1)
        messages = fcm.deliveries("device-token-1")
        assert len(messages) == 1
        assert messages[0]["android"]["collapse_key"] == "android:default"

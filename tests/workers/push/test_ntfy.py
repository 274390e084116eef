"""workers.push.ntfy against a local fake ntfy server (real sockets)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from tests.workers.fake_services import FakeNtfy, NtfyScript
from tests.workers.helpers import notification
from workers.config import WorkerConfig
from workers.push.classify import Delivered, Failed, RetryAfter, RetryLater
from workers.push.notification import Notification, ntfy_sequence_id
from workers.push.ntfy import NtfySender

LINK = "hermes-device://chat/chat-42"


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5) as c:
        yield c


def note(topic: str = "hermes-phone", **overrides: object) -> Notification:
    return Notification.from_dict(notification(backend="ntfy", token_or_topic=topic, **overrides))


def sender_for(client: httpx.AsyncClient, ntfy: FakeNtfy, config: WorkerConfig) -> NtfySender:
    return NtfySender(
        client,
        server_url=ntfy.url,
        default_topic=config.ntfy_topic,
        authorization=config.ntfy_authorization(),
    )


async def test_publishes_json_to_the_server_root(
    client: httpx.AsyncClient, ntfy: FakeNtfy, make_config: Callable[..., WorkerConfig]
) -> None:
    outcome = await sender_for(client, ntfy, make_config()).send(note(), LINK)
    assert isinstance(outcome, Delivered)
    assert outcome.message_id == "msg000000001"
    [body] = ntfy.published
    assert body == {
        "topic": "hermes-phone",
        "title": "Hermes",
        "message": "Open the app to read it.",
        "priority": 3,
        "tags": ["speech_balloon"],
        "click": LINK,
        "sequence_id": "chat-42",
    }


async def test_approvals_are_high_priority_with_an_open_action(
    client: httpx.AsyncClient, ntfy: FakeNtfy, make_config: Callable[..., WorkerConfig]
) -> None:
    await sender_for(client, ntfy, make_config()).send(note(kind="approval", title=None), LINK)
    [body] = ntfy.published
    assert body["priority"] == 4
    assert body["title"] == "Approval needed"
    assert body["actions"] == [{"action": "view", "label": "Open", "url": LINK, "clear": True}]


async def test_the_preview_is_the_message_only_when_opted_in(
    client: httpx.AsyncClient, ntfy: FakeNtfy, make_config: Callable[..., WorkerConfig]
) -> None:
    sender = sender_for(client, ntfy, make_config())
    await sender.send(note(preview="Deploy finished"), LINK)
    assert ntfy.published[0]["message"] == "Deploy finished"


async def test_the_configured_topic_is_used_when_the_device_has_none(
    client: httpx.AsyncClient, ntfy: FakeNtfy, make_config: Callable[..., WorkerConfig]
) -> None:
    sender = sender_for(client, ntfy, make_config(ntfy_topic="fallback-topic"))
    assert isinstance(await sender.send(note(topic=""), LINK), Delivered)
    assert ntfy.published[0]["topic"] == "fallback-topic"


async def test_without_any_topic_the_push_fails_and_names_the_setting(
    client: httpx.AsyncClient, ntfy: FakeNtfy, make_config: Callable[..., WorkerConfig]
) -> None:
    outcome = await sender_for(client, ntfy, make_config()).send(note(topic=""), LINK)
    assert isinstance(outcome, Failed)
    assert "NTFY_TOPIC" in outcome.reason


async def test_a_bearer_token_authenticates(
    client: httpx.AsyncClient, ntfy: FakeNtfy, make_config: Callable[..., WorkerConfig]
) -> None:
    ntfy.reset(token="tk_secret")
    sender = sender_for(client, ntfy, make_config(ntfy_token="tk_secret"))
    assert isinstance(await sender.send(note(), LINK), Delivered)


async def test_user_and_password_authenticate_with_basic_auth(
    client: httpx.AsyncClient, ntfy: FakeNtfy, make_config: Callable[..., WorkerConfig]
) -> None:
    ntfy.reset(basic=("phil", "s3cret"))
    sender = sender_for(client, ntfy, make_config(ntfy_user="phil", ntfy_password="s3cret"))
    assert isinstance(await sender.send(note(), LINK), Delivered)


async def test_a_user_colon_password_token_is_basic_auth_as_in_hermes(
    client: httpx.AsyncClient, ntfy: FakeNtfy, make_config: Callable[..., WorkerConfig]
) -> None:
    ntfy.reset(basic=("phil", "s3cret"))
    sender = sender_for(client, ntfy, make_config(ntfy_token="phil:s3cret"))
    assert isinstance(await sender.send(note(), LINK), Delivered)


@pytest.mark.parametrize("token", [None, "tk_wrong"])
async def test_missing_or_wrong_credentials_fail(
    client: httpx.AsyncClient,
    ntfy: FakeNtfy,
    make_config: Callable[..., WorkerConfig],
    token: str | None,
) -> None:
    ntfy.reset(token="tk_secret")
    outcome = await sender_for(client, ntfy, make_config(ntfy_token=token)).send(note(), LINK)
    assert isinstance(outcome, Failed)
    assert ntfy.published == []


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        (NtfyScript.rate_limited(retry_after=30), RetryAfter),
        (NtfyScript.rate_limited(), RetryLater),
        (NtfyScript.server_error(), RetryLater),
        (NtfyScript.forbidden(), Failed),
    ],
    ids=["429-retry-after", "429-bare", "500", "403"],
)
async def test_the_error_matrix(
    client: httpx.AsyncClient,
    ntfy: FakeNtfy,
    make_config: Callable[..., WorkerConfig],
    script: NtfyScript,
    expected: type,
) -> None:
    ntfy.script("hermes-phone", script)
    outcome = await sender_for(client, ntfy, make_config()).send(note(), LINK)
    assert isinstance(outcome, expected)
    if isinstance(outcome, RetryAfter):
        assert outcome.seconds == 30.0


async def test_an_unreachable_server_is_retried(client: httpx.AsyncClient) -> None:
    from tests.harness.processes import free_port

    sender = NtfySender(client, server_url=f"http://127.0.0.1:{free_port()}")
    assert isinstance(await sender.send(note(), LINK), RetryLater)


def test_sequence_ids_are_stable_and_ntfy_safe() -> None:
    assert ntfy_sequence_id("chat-42") == "chat-42"
    odd = ntfy_sequence_id("telegram:chat/42 with spaces")
    assert odd == ntfy_sequence_id("telegram:chat/42 with spaces")
    assert odd.isalnum() and len(odd) <= 64

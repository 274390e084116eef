"""workers.push.fcm against a local fake of Google OAuth + FCM HTTP v1 (real sockets)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import jwt
import pytest

from tests.workers.fake_services import FakeFcm, FcmScript, ServiceAccountFile
from tests.workers.helpers import notification
from workers.errors import ConfigError
from workers.push.classify import Delivered, Failed, RetryAfter, RetryLater, TokenInvalid
from workers.push.fcm import FCM_SCOPE, AccessTokenSource, FcmSender, ServiceAccount
from workers.push.notification import Notification

LINK = "hermes-device://chat/chat-42"


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5) as c:
        yield c


@pytest.fixture
def account(fcm: FakeFcm) -> ServiceAccount:
    assert fcm.account is not None
    return ServiceAccount.from_info(fcm.account.info)


@pytest.fixture
def sender(account: ServiceAccount, client: httpx.AsyncClient, fcm: FakeFcm) -> FcmSender:
    return FcmSender(account, client, api_base=fcm.url)


def note(token: str = "device-token-1", **overrides: object) -> Notification:
    return Notification.from_dict(notification(token_or_topic=token, **overrides))


# -- service account ---------------------------------------------------------------------


def test_a_service_account_file_loads(service_account_file: Path, fcm: FakeFcm) -> None:
    account = ServiceAccount.from_file(service_account_file)
    assert account.project_id == "hdg-test-project"
    assert account.token_uri == fcm.token_uri
    assert "PRIVATE KEY" not in repr(account)


@pytest.mark.parametrize("missing", ["project_id", "client_email", "private_key", "token_uri"])
def test_a_key_file_without_a_required_field_names_the_setting(fcm: FakeFcm, missing: str) -> None:
    assert fcm.account is not None
    info = {k: v for k, v in fcm.account.info.items() if k != missing}
    with pytest.raises(ConfigError, match=f"ANDROID_FCM_SERVICE_ACCOUNT: .*{missing}"):
        ServiceAccount.from_info(info)


def test_a_key_file_of_another_type_is_refused(fcm: FakeFcm) -> None:
    assert fcm.account is not None
    with pytest.raises(ConfigError, match="service_account"):
        ServiceAccount.from_info({**fcm.account.info, "type": "authorized_user"})


def test_a_key_file_that_is_not_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "sa.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match="ANDROID_FCM_SERVICE_ACCOUNT: .*not valid JSON"):
        ServiceAccount.from_file(path)


def test_the_assertion_carries_the_jwt_bearer_claims(account: ServiceAccount, fcm: FakeFcm) -> None:
    assert fcm.account is not None
    token = account.assertion(now=1_700_000_000)
    claims = jwt.decode(
        token,
        fcm.account.public_key_pem,
        algorithms=["RS256"],
        audience=fcm.token_uri,
        options={"verify_exp": False, "verify_iat": False},
    )
    assert claims == {
        "iss": fcm.account.info["client_email"],
        "scope": FCM_SCOPE,
        "aud": fcm.token_uri,
        "iat": 1_700_000_000,
        "exp": 1_700_003_600,
    }
    assert jwt.get_unverified_header(token)["kid"] == fcm.account.info["private_key_id"]


# -- access tokens -------------------------------------------------------------------------


async def test_the_access_token_is_fetched_once_and_reused(sender: FcmSender, fcm: FakeFcm) -> None:
    for i in range(3):
        assert isinstance(await sender.send(note(f"tok-{i}"), LINK), Delivered)
    assert fcm.grants == 1
    assert fcm.grant_rejections == []


async def test_the_access_token_is_refreshed_five_minutes_before_expiry(
    account: ServiceAccount, client: httpx.AsyncClient, fcm: FakeFcm
) -> None:
    now = [1_000.0]
    source = AccessTokenSource(account, client, clock=lambda: now[0])
    first = await source.token()
    now[0] += fcm.token_lifetime - 301  # 5 min + 1 s before expiry: still fresh
    assert await source.token() == first
    now[0] += 2  # inside the 5-minute margin: refresh
    second = await source.token()
    assert second != first
    assert fcm.grants == 2


async def test_a_grant_signed_with_the_wrong_key_fails_with_a_clear_reason(
    client: httpx.AsyncClient, fcm: FakeFcm
) -> None:
    impostor = ServiceAccountFile.generate(fcm.token_uri)  # same claims, other key
    assert fcm.account is not None
    impostor.info["private_key_id"] = fcm.account.info["private_key_id"]
    sender = FcmSender(ServiceAccount.from_info(impostor.info), client, api_base=fcm.url)
    outcome = await sender.send(note(), LINK)
    assert isinstance(outcome, Failed)
    assert "rejected the service account" in outcome.reason
    assert "ANDROID_FCM_SERVICE_ACCOUNT" in outcome.reason
    assert fcm.grant_rejections and "Signature" in fcm.grant_rejections[0]


async def test_an_unreachable_token_endpoint_is_retried(
    account: ServiceAccount, client: httpx.AsyncClient
) -> None:
    from tests.harness.processes import free_port

    dead = ServiceAccount.from_info(
        {**_info(account), "token_uri": f"http://127.0.0.1:{free_port()}/token"}
    )
    outcome = await FcmSender(dead, client, api_base="http://127.0.0.1:9").send(note(), LINK)
    assert isinstance(outcome, RetryLater)


def _info(account: ServiceAccount) -> dict[str, str]:
    return {
        "type": "service_account",
        "project_id": account.project_id,
        "client_email": account.client_email,
        "private_key": account.private_key,
        "private_key_id": account.private_key_id or "",
        "token_uri": account.token_uri,
    }


# -- sending -----------------------------------------------------------------------------


async def test_one_request_per_device_token_over_one_reused_connection(
    sender: FcmSender, fcm: FakeFcm
) -> None:
    tokens = [f"tok-{i}" for i in range(4)]
    for token in tokens:
        assert isinstance(await sender.send(note(token), LINK), Delivered)
    assert [fcm.attempts[t] for t in tokens] == [1, 1, 1, 1]
    assert len(set(fcm.peers)) == 1  # keep-alive: the same client socket every time


async def test_the_message_carries_no_content_and_collapses_per_chat(
    sender: FcmSender, fcm: FakeFcm
) -> None:
    await sender.send(note(), LINK)
    [message] = fcm.deliveries("device-token-1")
    assert message["android"]["collapse_key"] == "chat-42"
    assert message["android"]["notification"]["tag"] == "chat-42"
    assert message["android"]["priority"] == "HIGH"
    assert message["data"] == {
        "kind": "reply",
        "chat_id": "chat-42",
        "title": "Hermes",
        "link": LINK,
        "cursor": "17",
    }
    assert message["notification"] == {"title": "Hermes", "body": "Open the app to read it."}


async def test_a_preview_is_sent_only_when_opted_in(sender: FcmSender, fcm: FakeFcm) -> None:
    await sender.send(note(preview="The build passed."), LINK)
    [message] = fcm.deliveries("device-token-1")
    assert message["data"]["preview"] == "The build passed."
    assert message["notification"]["body"] == "The build passed."


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        (FcmScript.unregistered(), TokenInvalid),
        (FcmScript.sender_id_mismatch(), TokenInvalid),
        (FcmScript.invalid_token(), TokenInvalid),
        (FcmScript.quota_exceeded(retry_after=7), RetryAfter),
        (FcmScript.unavailable(), RetryLater),
        (FcmScript.internal(), RetryLater),
        (FcmScript.third_party_auth(), Failed),
    ],
    ids=[
        "unregistered",
        "sender-id-mismatch",
        "invalid-token",
        "quota",
        "unavailable",
        "internal",
        "third-party-auth",
    ],
)
async def test_the_error_matrix(
    sender: FcmSender, fcm: FakeFcm, script: FcmScript, expected: type
) -> None:
    fcm.script("device-token-1", script)
    outcome = await sender.send(note(), LINK)
    assert isinstance(outcome, expected)
    assert fcm.attempts["device-token-1"] == 1
    assert fcm.deliveries("device-token-1") == []


async def test_quota_exceeded_reports_the_servers_retry_after(
    sender: FcmSender, fcm: FakeFcm
) -> None:
    fcm.script("device-token-1", FcmScript.quota_exceeded(retry_after=7))
    outcome = await sender.send(note(), LINK)
    assert isinstance(outcome, RetryAfter)
    assert outcome.seconds == 7.0


async def test_an_expired_oauth_token_is_refreshed_once_and_the_message_resent(
    sender: FcmSender, fcm: FakeFcm
) -> None:
    await sender.send(note("warm-up"), LINK)
    fcm.script("device-token-1", FcmScript.expired_token())
    outcome = await sender.send(note(), LINK)
    assert isinstance(outcome, Delivered)
    assert fcm.grants == 2
    assert fcm.attempts["device-token-1"] == 2
    assert len(fcm.deliveries("device-token-1")) == 1


async def test_a_second_401_after_refreshing_fails_instead_of_looping(
    sender: FcmSender, fcm: FakeFcm
) -> None:
    fcm.script("device-token-1", FcmScript.expired_token(), FcmScript.expired_token())
    outcome = await sender.send(note(), LINK)
    assert isinstance(outcome, Failed)
    assert "freshly minted" in outcome.reason
    assert fcm.attempts["device-token-1"] == 2


async def test_all_tokens_expiring_server_side_is_survived(sender: FcmSender, fcm: FakeFcm) -> None:
    await sender.send(note("a"), LINK)
    fcm.expire_all_tokens()
    assert isinstance(await sender.send(note("b"), LINK), Delivered)
    assert fcm.grants == 2


async def test_the_wrong_project_fails_permanently(client: httpx.AsyncClient, fcm: FakeFcm) -> None:
    assert fcm.account is not None
    other = ServiceAccount.from_info({**fcm.account.info, "project_id": "someone-else"})
    outcome = await FcmSender(other, client, api_base=fcm.url).send(note(), LINK)
    assert isinstance(outcome, Failed)
    assert "PERMISSION_DENIED" in outcome.reason


async def test_an_unreachable_fcm_is_retried(
    account: ServiceAccount, client: httpx.AsyncClient, fcm: FakeFcm
) -> None:
    from tests.harness.processes import free_port

    sender = FcmSender(account, client, api_base=f"http://127.0.0.1:{free_port()}")
    assert isinstance(await sender.send(note(), LINK), RetryLater)


def test_the_fake_rejects_a_message_with_non_string_data() -> None:
    from tests.workers.fake_services import _message_problem

    assert _message_problem({"message": {"token": "t", "data": {"n": 1}}}) == "message.data"
    assert _message_problem(json.loads('{"message": {"token": "t"}}')) is None

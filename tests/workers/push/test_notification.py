"""workers.push.notification: payload validation and message bodies (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.workers.helpers import notification
from workers.errors import JobPayloadError
from workers.push.notification import Notification, deep_link, fcm_message, ntfy_message


def test_a_full_payload_parses() -> None:
    n = Notification.from_dict(notification(thread_id="t-1", cursor=17, preview="hi"))
    assert (n.kind, n.chat_id, n.thread_id, n.cursor, n.preview) == (
        "reply",
        "chat-42",
        "t-1",
        "17",
        "hi",
    )


@pytest.mark.parametrize(
    "missing", ["idempotency_key", "tenant", "device_id", "backend", "kind", "chat_id"]
)
def test_a_missing_field_is_named(missing: str) -> None:
    payload = notification()
    del payload[missing]
    with pytest.raises(JobPayloadError) as raised:
        Notification.from_dict(payload)
    assert raised.value.field == missing


def test_fcm_needs_a_token_but_ntfy_can_fall_back_to_the_configured_topic() -> None:
    with pytest.raises(JobPayloadError, match="token_or_topic"):
        Notification.from_dict(notification(token_or_topic=""))
    assert (
        Notification.from_dict(notification(backend="ntfy", token_or_topic=None)).token_or_topic
        == ""
    )


def test_each_kind_has_a_content_free_default_title() -> None:
    titles = {
        k: Notification.from_dict(notification(kind=k, title=None)).title
        for k in ("reply", "approval", "clarify", "cron")
    }
    assert titles == {
        "reply": "New reply",
        "approval": "Approval needed",
        "clarify": "Hermes has a question",
        "cron": "Scheduled task finished",
    }


def test_previews_are_truncated() -> None:
    assert len(Notification.from_dict(notification(preview="x" * 1000)).preview or "") == 240


def test_deep_links_encode_ids() -> None:
    assert deep_link("hermes-device", "chat/42") == "hermes-device://chat/chat%2F42"
    assert deep_link("hermes-device", "c", "t&x=1") == "hermes-device://chat/c?thread=t%26x%3D1"


def test_cron_pushes_are_normal_priority_others_high() -> None:
    cron = fcm_message(Notification.from_dict(notification(kind="cron")), "l")["message"]["android"]
    reply = fcm_message(Notification.from_dict(notification()), "l")["message"]["android"]
    assert (cron["priority"], reply["priority"]) == ("NORMAL", "HIGH")


def test_no_body_carries_content_unless_a_preview_was_given() -> None:
    n = Notification.from_dict(notification(title="Hermes"))
    fcm = fcm_message(n, "l")["message"]
    ntfy = ntfy_message(n, "topic", "l")
    assert "preview" not in fcm["data"]
    assert fcm["notification"]["body"] == ntfy["message"] == "Open the app to read it."


payload_values = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=30)
    | st.lists(st.integers(), max_size=2)
)
payloads = st.fixed_dictionaries(
    {},
    optional={
        key: payload_values | st.sampled_from(["fcm", "ntfy", "reply", "approval", "x"])
        for key in (
            "idempotency_key",
            "tenant",
            "device_id",
            "backend",
            "token_or_topic",
            "kind",
            "chat_id",
            "thread_id",
            "cursor",
            "title",
            "preview",
        )
    },
)


@given(payloads)
def test_any_payload_parses_or_names_its_bad_field(payload: dict[str, Any]) -> None:
    try:
        n = Notification.from_dict(payload)
    except JobPayloadError as exc:
        assert exc.field in payload or exc.field in (
            "idempotency_key",
            "tenant",
            "device_id",
            "backend",
            "kind",
            "chat_id",
            "token_or_topic",
        )
    else:
        assert all(isinstance(v, str) for v in fcm_message(n, "l")["message"]["data"].values())

"""workers.push.classify: pure response classification."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from workers.push.classify import (
    FCM_ERROR_TYPE,
    AuthExpired,
    Delivered,
    Failed,
    RetryAfter,
    RetryLater,
    TokenInvalid,
    classify_fcm,
    classify_ntfy,
    parse_retry_after,
)


def fcm_error(
    status: int, error_status: str, code: str | None = None, message: str = "x", **extra: Any
) -> bytes:
    details: list[dict[str, Any]] = []
    if code:
        details.append({"@type": FCM_ERROR_TYPE, "errorCode": code})
    details.extend(extra.get("details", []))
    return json.dumps(
        {"error": {"code": status, "message": message, "status": error_status, "details": details}}
    ).encode()


# -- FCM -------------------------------------------------------------------------------


def test_a_2xx_is_delivered_with_the_message_name() -> None:
    outcome = classify_fcm(200, b'{"name": "projects/p/messages/0:1"}')
    assert outcome == Delivered("projects/p/messages/0:1")


def test_unregistered_drops_the_token() -> None:
    outcome = classify_fcm(404, fcm_error(404, "NOT_FOUND", "UNREGISTERED"))
    assert isinstance(outcome, TokenInvalid)
    assert "UNREGISTERED" in outcome.reason


def test_a_404_without_an_fcm_error_code_is_a_failure_not_a_dead_token() -> None:
    assert isinstance(classify_fcm(404, fcm_error(404, "NOT_FOUND")), Failed)


def test_sender_id_mismatch_drops_the_token() -> None:
    assert isinstance(
        classify_fcm(403, fcm_error(403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH")), TokenInvalid
    )


def test_invalid_argument_naming_the_token_drops_it() -> None:
    violation = {
        "@type": "type.googleapis.com/google.rpc.BadRequest",
        "fieldViolations": [{"field": "message.token", "description": "bad"}],
    }
    body = fcm_error(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", details=[violation])
    assert isinstance(classify_fcm(400, body), TokenInvalid)


def test_invalid_argument_whose_message_names_the_registration_token_drops_it() -> None:
    body = fcm_error(
        400,
        "INVALID_ARGUMENT",
        "INVALID_ARGUMENT",
        "The registration token is not a valid FCM registration token",
    )
    assert isinstance(classify_fcm(400, body), TokenInvalid)


def test_invalid_argument_about_another_field_is_our_bug_and_fails() -> None:
    violation = {
        "@type": "type.googleapis.com/google.rpc.BadRequest",
        "fieldViolations": [{"field": "message.data[0].value", "description": "bad"}],
    }
    body = fcm_error(
        400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "Invalid value", details=[violation]
    )
    assert isinstance(classify_fcm(400, body), Failed)


def test_quota_exceeded_honours_retry_after_seconds() -> None:
    outcome = classify_fcm(
        429, fcm_error(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED"), {"Retry-After": "37"}
    )
    assert isinstance(outcome, RetryAfter)
    assert outcome.seconds == 37.0
    assert outcome.reason.startswith("QUOTA_EXCEEDED")


def test_quota_exceeded_without_retry_after_backs_off() -> None:
    assert isinstance(
        classify_fcm(429, fcm_error(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED")), RetryLater
    )


@pytest.mark.parametrize(("status", "code"), [(503, "UNAVAILABLE"), (500, "INTERNAL")])
def test_unavailable_and_internal_are_retried(status: int, code: str) -> None:
    assert isinstance(classify_fcm(status, fcm_error(status, code, code)), RetryLater)


def test_a_5xx_with_retry_after_waits_as_told() -> None:
    outcome = classify_fcm(503, fcm_error(503, "UNAVAILABLE", "UNAVAILABLE"), {"retry-after": "5"})
    assert isinstance(outcome, RetryAfter)
    assert outcome.seconds == 5.0


def test_a_bare_gateway_error_without_a_body_is_retried() -> None:
    assert isinstance(classify_fcm(502, b"<html>Bad Gateway</html>"), RetryLater)


def test_a_plain_401_asks_for_a_fresh_oauth_token() -> None:
    assert isinstance(classify_fcm(401, fcm_error(401, "UNAUTHENTICATED")), AuthExpired)


def test_third_party_auth_error_fails_and_keeps_the_token() -> None:
    body = fcm_error(401, "UNAUTHENTICATED", "THIRD_PARTY_AUTH_ERROR")
    assert isinstance(classify_fcm(401, body), Failed)


def test_the_fcm_error_code_wins_over_the_http_status() -> None:
    # UNREGISTERED is authoritative even when a proxy rewrote the status.
    assert isinstance(
        classify_fcm(400, fcm_error(400, "INVALID_ARGUMENT", "UNREGISTERED")), TokenInvalid
    )


def test_details_of_other_types_are_ignored() -> None:
    body = json.dumps(
        {"error": {"status": "NOT_FOUND", "details": [{"@type": "x", "errorCode": "UNREGISTERED"}]}}
    )
    assert isinstance(classify_fcm(404, body), Failed)


# -- ntfy ------------------------------------------------------------------------------


def test_ntfy_2xx_is_delivered_with_the_message_id() -> None:
    assert classify_ntfy(200, b'{"id": "abc", "event": "message"}') == Delivered("abc")


def test_ntfy_429_honours_retry_after_when_given() -> None:
    outcome = classify_ntfy(
        429, b'{"code": 42901, "http": 429, "error": "limit reached"}', {"Retry-After": "12"}
    )
    assert isinstance(outcome, RetryAfter)
    assert outcome.seconds == 12.0
    assert "limit reached" in outcome.reason


def test_ntfy_429_without_retry_after_backs_off_exponentially() -> None:
    assert isinstance(classify_ntfy(429, b"{}"), RetryLater)


def test_ntfy_5xx_is_retried() -> None:
    assert isinstance(classify_ntfy(502, b""), RetryLater)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413])
def test_other_ntfy_4xx_fail(status: int) -> None:
    assert isinstance(classify_ntfy(status, b'{"error": "nope"}'), Failed)


# -- Retry-After -----------------------------------------------------------------------


def test_retry_after_accepts_delta_seconds() -> None:
    assert parse_retry_after("120") == 120.0


def test_retry_after_accepts_an_http_date() -> None:
    now = 1_445_412_480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert parse_retry_after("Wed, 21 Oct 2015 07:29:00 GMT", now=now) == 60.0


def test_retry_after_in_the_past_means_now() -> None:
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1_445_412_480.0 + 999) == 0.0


@pytest.mark.parametrize("value", [None, "", "soon", "-5", "Wed, 21 Oct 2015 07:28:00"])
def test_retry_after_that_cannot_be_read_is_ignored(value: str | None) -> None:
    assert parse_retry_after(value) is None


def test_retry_after_is_capped_at_a_day() -> None:
    assert parse_retry_after("999999999999") == 86_400.0


# -- properties ------------------------------------------------------------------------

statuses = st.integers(min_value=-1000, max_value=10_000)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
error_codes = st.sampled_from(
    [
        "UNREGISTERED",
        "SENDER_ID_MISMATCH",
        "INVALID_ARGUMENT",
        "QUOTA_EXCEEDED",
        "UNAVAILABLE",
        "INTERNAL",
        "THIRD_PARTY_AUTH_ERROR",
        "UNSPECIFIED_ERROR",
        "",
    ]
)
google_bodies = st.builds(
    lambda status, code, message, extra: json.dumps(
        {
            "error": {
                "status": status,
                "message": message,
                "details": [{"@type": FCM_ERROR_TYPE, "errorCode": code}, extra],
            }
        }
    ).encode(),
    st.text(max_size=20),
    error_codes,
    st.text(max_size=60),
    json_values,
)
bodies = (
    st.none()
    | st.binary(max_size=300)
    | st.text(max_size=300)
    | json_values.map(lambda v: json.dumps(v).encode())
    | google_bodies
)
headers = st.dictionaries(
    st.sampled_from(["Retry-After", "retry-after", "Content-Type", "X-Other"]),
    st.text(max_size=40) | st.integers(0, 10**15).map(str),
    max_size=3,
)
FCM_OUTCOMES = (Delivered, TokenInvalid, RetryAfter, RetryLater, Failed, AuthExpired)
NTFY_OUTCOMES = (Delivered, TokenInvalid, RetryAfter, RetryLater, Failed)


@given(statuses, bodies, headers)
def test_fcm_classification_never_raises_and_yields_one_outcome(
    status: int, body: bytes | str | None, hdrs: dict[str, str]
) -> None:
    outcome = classify_fcm(status, body, hdrs)
    assert isinstance(outcome, FCM_OUTCOMES)
    if isinstance(outcome, RetryAfter):
        assert 0.0 <= outcome.seconds <= 86_400.0


@given(statuses, bodies, headers)
def test_ntfy_classification_never_raises_and_yields_one_outcome(
    status: int, body: bytes | str | None, hdrs: dict[str, str]
) -> None:
    outcome = classify_ntfy(status, body, hdrs)
    assert isinstance(outcome, NTFY_OUTCOMES)
    assert not isinstance(outcome, TokenInvalid)  # ntfy topics are never "dead tokens"


@given(st.integers(200, 299), bodies)
def test_every_2xx_is_delivered(status: int, body: bytes | str | None) -> None:
    assert isinstance(classify_fcm(status, body), Delivered)
    assert isinstance(classify_ntfy(status, body), Delivered)


@example("0\x1f", 0.0)  # Unicode whitespace that float() refuses
@example("\u0663", 0.0)  # a non-ASCII digit
@given(st.text(max_size=80), st.floats(min_value=0, max_value=4e9))
def test_parse_retry_after_never_raises(value: str, now: float) -> None:
    seconds = parse_retry_after(value, now=now)
    assert seconds is None or 0.0 <= seconds <= 86_400.0

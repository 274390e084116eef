"""canonical.sentinel: the redis+sentinel:// URL, parsed by a pure function."""

from __future__ import annotations

import urllib.parse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from canonical.sentinel import (
    DEFAULT_SENTINEL_PORT,
    SentinelTarget,
    bus_url_for_display,
    is_sentinel_url,
    parse_sentinel_url,
    retry_attempts,
)


def test_hosts_service_db_and_password_are_read() -> None:
    target = parse_sentinel_url(
        "redis+sentinel://:s%40cret@10.0.0.1:26379,10.0.0.2,[::1]:26380/hdg/2"
        "?sentinel_password=other"
    )
    assert target == SentinelTarget(
        sentinels=(("10.0.0.1", 26379), ("10.0.0.2", DEFAULT_SENTINEL_PORT), ("::1", 26380)),
        service="hdg",
        db=2,
        username=None,
        password="s@cret",
        sentinel_password="other",
    )


def test_user_and_password_and_a_bare_password_read_as_redis_py_does() -> None:
    assert parse_sentinel_url("redis+sentinel://app:pw@h/s").username == "app"
    assert parse_sentinel_url("redis+sentinel://app:pw@h/s").password == "pw"
    bare = parse_sentinel_url("redis+sentinel://pw@h/s/")
    assert (bare.username, bare.password, bare.db) == (None, "pw", 0)


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("redis+sentinel://h1,h2", "service name"),
        ("redis+sentinel://h1/", "service name"),
        ("redis+sentinel:///hdg", "sentinel addresses"),
        ("redis+sentinel://h1,,h2/hdg", "bad sentinel address"),
        ("redis+sentinel://h1:x/hdg", "bad port"),
        ("redis+sentinel://h1:/hdg", "bad port"),
        ("redis+sentinel://h1:70000/hdg", "bad port"),
        ("redis+sentinel://::1:26379/hdg", "IPv6 goes in brackets"),
        ("redis+sentinel://[::1/hdg", "bad sentinel address"),
        ("redis+sentinel://h1/hdg/one", "db must be a number"),
        ("redis+sentinel://h1/hdg/1/2", "/<service-name>/<db>"),
        ("redis+sentinel://h1/hdg?timeout=3", "unknown option"),
        ("redis://h1/0", "starts with redis+sentinel://"),
    ],
)
def test_a_bad_url_says_what_is_wrong(url: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle.replace("+", r"\+").replace("/", "/")):
        parse_sentinel_url(url)


hosts = st.one_of(
    st.from_regex(r"[a-z][a-z0-9.-]{0,20}", fullmatch=True),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(str),
)
ports = st.integers(1, 65535)
names = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=20)
secrets_ = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20)


@given(
    sentinels=st.lists(st.tuples(hosts, ports), min_size=1, max_size=5),
    service=names,
    db=st.integers(0, 10_000),
    password=st.none() | secrets_,
)
def test_any_url_built_from_parts_parses_back_to_them(
    sentinels: list[tuple[str, int]], service: str, db: int, password: str | None
) -> None:
    def address(host: str, port: int) -> str:
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    auth = "" if password is None else f":{urllib.parse.quote(password, safe='')}@"
    url = (
        f"redis+sentinel://{auth}{','.join(address(h, p) for h, p in sentinels)}/"
        f"{urllib.parse.quote(service, safe='')}/{db}"
    )
    target = parse_sentinel_url(url)
    assert is_sentinel_url(url)
    assert target.sentinels == tuple(sentinels)
    assert (target.service, target.db, target.password) == (service, db, password)
    assert parse_sentinel_url(target.redacted()).sentinels == target.sentinels


@given(st.text(max_size=60))
def test_any_text_parses_or_raises_value_error(text: str) -> None:
    try:
        parse_sentinel_url("redis+sentinel://" + text)
    except ValueError:
        pass


@given(st.floats(0.0, 300.0))
def test_the_retries_wait_at_least_the_ride_out(ride_out_s: float) -> None:
    attempts = retry_attempts(ride_out_s)
    waited = sum(min(1.0, 0.05 * 2**i) for i in range(1, attempts + 1))
    assert waited >= ride_out_s
    assert attempts == 0 or waited - min(1.0, 0.05 * 2**attempts) < ride_out_s


def test_a_bus_url_shown_in_a_message_carries_no_password() -> None:
    shown = bus_url_for_display("redis+sentinel://:pw@h1,h2:26380/hdg/1?sentinel_password=spw")
    assert shown == "redis+sentinel://h1:26379,h2:26380/hdg/1"
    assert bus_url_for_display("redis://:pw@h:6379/0") == "h:6379/0"
    assert "pw" not in bus_url_for_display("redis+sentinel://:pw@h1/")

"""canonical.fastpath: each contract check holds on the installed libraries and fails when
an internal it relies on is missing or changed; a failed check gives a real Redis bus
redis-py's own client and PubSub, said once in the log."""

from __future__ import annotations

import json
import json.encoder
import logging
import sys
from collections.abc import Iterator
from typing import Any

import hiredis
import pytest
import redis.asyncio.connection
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.client import PubSub

from canonical import fastpath
from canonical.fastpath import jsonenc, redis_mux, redis_pubsub
from canonical.fastpath.redis_mux import RedisMux
from canonical.fastpath.redis_pubsub import SubscriberWire
from canonical.fastpath.registry import verdict
from canonical.redis_bus import RedisBus
from canonical.redis_stock import StockCommands, StockSubscriber
from tests.canonical.test_bus_contract import Recorder, settle, unique
from tests.harness.processes import RedisServer


@pytest.fixture
def fresh_decision(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The canonical registry decides again, under this test's environment and patches
    (and once more, as the process had it, after the patches are undone)."""
    monkeypatch.delenv("ANDROID_FASTPATH", raising=False)
    fastpath.REGISTRY.reset()
    yield
    fastpath.REGISTRY.reset()


def fastpath_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "hdg.fastpath" and r.levelno == logging.WARNING
    ]


@pytest.mark.parametrize("name", ["jsonenc", "redis_mux", "redis_pubsub"])
def test_each_contract_holds_on_the_installed_libraries(name: str) -> None:
    assert verdict(fastpath.REGISTRY.pieces[name]) is None


# --------------------------------------------------------------------------- jsonenc


def test_the_json_contract_fails_without_the_c_encoder_factory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(json.encoder, "c_make_encoder")
    assert "c_make_encoder is missing" in str(jsonenc.contract())


def test_the_json_contract_fails_when_the_factory_takes_other_arguments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = json.encoder.c_make_encoder  # type: ignore[attr-defined]

    def fewer(markers: Any, default: Any, encoder: Any, indent: Any, *rest: Any) -> Any:
        if len(rest) != 4:  # a CPython that dropped an argument
            raise TypeError(f"c_make_encoder() takes 8 arguments ({4 + len(rest)} given)")
        return real(markers, default, encoder, indent, *rest)

    monkeypatch.setattr(json.encoder, "c_make_encoder", fewer)
    assert "no longer takes" in str(jsonenc.contract())


def test_the_json_contract_fails_when_the_factory_encodes_differently(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = json.encoder.c_make_encoder  # type: ignore[attr-defined]

    def spaced(*args: Any) -> Any:
        return real(*args[:4], ": ", ", ", *args[6:])  # separators no longer where they were

    monkeypatch.setattr(json.encoder, "c_make_encoder", spaced)
    assert "differs from json.dumps" in str(jsonenc.contract())


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(json_values, st.booleans())
def test_the_stock_encoder_writes_exactly_the_fast_encoders_text(
    value: Any, ensure_ascii: bool
) -> None:
    assert jsonenc.stock(ensure_ascii)(value) == jsonenc.build(ensure_ascii)(value)
    assert jsonenc.stock(ensure_ascii)(value) == json.dumps(
        value, ensure_ascii=ensure_ascii, separators=(",", ":")
    )


# --------------------------------------------------------------------------- hiredis, redis-py


@pytest.mark.parametrize("name", ["Reader", "pack_command", "ProtocolError"])
@pytest.mark.parametrize("contract", [redis_mux.contract, redis_pubsub.contract])
def test_the_redis_contracts_fail_without_a_hiredis_name_they_use(
    monkeypatch: pytest.MonkeyPatch, name: str, contract: Any
) -> None:
    monkeypatch.delattr(hiredis, name)
    assert f"hiredis.{name} is missing" in str(contract())


def test_the_redis_contracts_fail_when_hiredis_reader_takes_no_reply_error_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = hiredis.Reader

    def reader(**options: Any) -> Any:
        if "replyError" in options:
            raise TypeError("'replyError' is an invalid keyword argument")
        return real(**options)

    monkeypatch.setattr(hiredis, "Reader", reader)
    assert "changed" in str(redis_mux.contract())
    assert "changed" in str(redis_pubsub.contract())


def test_the_redis_contracts_fail_when_hiredis_packs_commands_differently(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hiredis, "pack_command", lambda parts: b" ".join(map(bytes, parts)))
    assert redis_mux.contract() is not None


def test_the_mux_contract_fails_when_redis_py_parses_urls_differently(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = redis.asyncio.connection.parse_url
    monkeypatch.setattr(
        redis.asyncio.connection,
        "parse_url",
        lambda url: {k: v for k, v in real(url).items() if k != "username"},
    )
    assert "parse_url returns" in str(redis_mux.contract())


def test_the_mux_contract_fails_when_redis_py_has_no_tls_context_builder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(redis.asyncio.connection, "RedisSSLContext")
    assert "RedisSSLContext" in str(redis_mux.contract())


# --------------------------------------------------------------------------- the fall-back


class TlsContextWithoutGet:
    """A redis-py whose TLS context builder has changed shape (a plain redis:// bus never
    uses it, so the stock client still works)."""

    def __init__(self, keyfile: Any = None) -> None:
        self.keyfile = keyfile


async def round_trip(bus: RedisBus) -> Any:
    """A command, a pipeline and a published event through the bus's subscription; the
    connection the subscription read them on."""
    tenant, edge = unique("tenant"), unique("edge")
    await bus.register_tenant(tenant, "fallback-token-" + "f" * 20)
    assert await bus.resolve_tenant("fallback-token-" + "f" * 20) == tenant
    assert await bus.ping()
    recorder = Recorder()
    sub = bus.subscription(edge, recorder)
    try:
        await sub.start()
        await sub.add_tenant(tenant)
        await settle(recorder, lambda p: bus.publish(tenant, p))
        await bus.publish_many(tenant, [b"one", b"two"])
        await recorder.wait_for(b"two")
        assert recorder.payloads()[-2:] == [b"one", b"two"]
        return sub._wire  # type: ignore[attr-defined]
    finally:
        await sub.close()


async def test_a_bus_whose_redis_py_fails_the_contracts_runs_redis_pys_client_and_pubsub(
    fresh_decision: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    redis_server: RedisServer,
) -> None:
    monkeypatch.setattr(redis.asyncio.connection, "RedisSSLContext", TlsContextWithoutGet)
    bus = RedisBus(redis_server.url)
    try:
        assert isinstance(bus.mux, StockCommands)
        assert bus.endpoint is None and bus.pubsub_client is not None
        wire = await round_trip(bus)
        assert isinstance(wire, StockSubscriber) and isinstance(wire.pubsub, PubSub)
    finally:
        await bus.close()
    second = RedisBus(redis_server.url)  # decided already: nothing logged again
    assert isinstance(second.mux, StockCommands)
    await second.close()
    lines = fastpath_warnings(caplog)
    assert len(lines) == 2
    mux_line, pubsub_line = sorted(lines)
    assert "canonical.redis_mux off" in mux_line and f"redis-py {redis.__version__}" in mux_line
    assert "RedisSSLContext" in mux_line
    assert "canonical.redis_pubsub off" in pubsub_line and hiredis.__version__ in pubsub_line


async def test_android_fastpath_off_gives_the_bus_redis_pys_client_and_pubsub(
    fresh_decision: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    redis_server: RedisServer,
) -> None:
    monkeypatch.setenv("ANDROID_FASTPATH", "off")
    bus = RedisBus(redis_server.url)
    try:
        assert isinstance(bus.mux, StockCommands)
        assert isinstance(await round_trip(bus), StockSubscriber)
    finally:
        await bus.close()
    assert not fastpath_warnings(caplog)


async def test_with_every_contract_holding_the_bus_runs_the_fast_paths(
    fresh_decision: None, redis_server: RedisServer
) -> None:
    bus = RedisBus(redis_server.url)
    try:
        assert isinstance(bus.mux, RedisMux) and bus.endpoint is not None
        assert isinstance(await round_trip(bus), SubscriberWire)
    finally:
        await bus.close()


async def test_a_fast_path_that_cannot_even_be_imported_leaves_the_bus_on_redis_py(
    fresh_decision: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    redis_server: RedisServer,
) -> None:
    # A hiredis without the names the module binds at import: the import itself fails.
    monkeypatch.setitem(sys.modules, "canonical.fastpath.redis_mux", None)
    monkeypatch.setitem(sys.modules, "canonical.fastpath.redis_pubsub", None)
    bus = RedisBus(redis_server.url)
    try:
        assert isinstance(bus.mux, StockCommands)
        assert isinstance(await round_trip(bus), StockSubscriber)
    finally:
        await bus.close()
    assert len(fastpath_warnings(caplog)) == 2
    assert all("import of" in line for line in fastpath_warnings(caplog))

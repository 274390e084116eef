"""gateway_plugin.hermes.contract: the Hermes internals the seam relies on, checked against
the installed Hermes (a real GatewayRunner and its SessionStore), against that Hermes with
one internal taken away, and against a state.db written by Hermes' own SessionDB."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway.config import GatewayConfig, PlatformConfig
from gateway.platform_registry import PlatformEntry, platform_registry
from gateway.run import GatewayRunner
from hermes_state import SessionDB

from gateway_plugin.errors import CommandError
from gateway_plugin.hermes import agent_port, contract, cron_send, state_db
from gateway_plugin.hermes import runner as hr
from gateway_plugin.hermes.adapter import AndroidAdapter
from gateway_plugin.hermes.bridge import PLATFORM, register_platform
from gateway_plugin.hermes.transcript import Transcript

LANE = ("android:default", None)
# Where the contract says an internal is used: the modules of the seam (the adapter's
# module by its class).
SEAM: dict[str, Any] = {
    "adapter": AndroidAdapter,
    "agent_port": agent_port.AgentPortMixin,
    "cron_send": cron_send,
    "runner": hr,
    "state_db": state_db,
}


@pytest.fixture(autouse=True)
def _fresh_contract() -> Iterator[None]:
    contract.reset()
    state_db.forget_schema_checks()
    yield
    contract.reset()
    state_db.forget_schema_checks()


@pytest.fixture
def hermes_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "hermes"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    return home


@pytest.fixture
def runner(hermes_home: Path) -> GatewayRunner:
    """Hermes' own gateway runner, as `hermes gateway run` builds it (not started)."""
    return GatewayRunner(GatewayConfig())


def _state_db(path: Path) -> Path:
    db = SessionDB(db_path=path)
    try:
        db.create_session("s1", PLATFORM, chat_id=LANE[0], chat_type="dm")
        db.append_message("s1", "user", "hello there")
    finally:
        db.close()
    return path


def test_the_installed_hermes_has_every_internal_the_seam_uses(runner: GatewayRunner) -> None:
    assert contract.installed_hermes() == contract.SUPPORTED_HERMES
    assert contract.check(runner=runner, session_store=runner.session_store) == []


def test_every_listed_internal_says_where_it_is_used_and_why() -> None:
    for private in contract.PRIVATE:
        for place in private.used_in.split():
            module, _, function = place.partition(".")
            assert hasattr(SEAM[module], function), place
        assert private.why, private.symbol


def test_a_missing_load_bearing_method_stops_the_platform_naming_it(
    runner: GatewayRunner, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delattr(GatewayRunner, "_session_key_for_source")
    mismatches = contract.check(runner=runner, session_store=runner.session_store)
    assert mismatches == [
        contract.Mismatch("gateway.run.GatewayRunner._session_key_for_source", None)
    ]
    with caplog.at_level(logging.ERROR), pytest.raises(contract.HermesUnsupported) as refused:
        contract.apply(mismatches)
    line = str(refused.value)
    assert "gateway.run.GatewayRunner._session_key_for_source" in line
    assert f"supported: Hermes {contract.SUPPORTED_HERMES}" in line
    assert "does not start" in line
    assert line in caplog.text


def test_a_missing_preference_internal_turns_model_and_reasoning_off_with_its_name(
    runner: GatewayRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hermes defines it on a mixin of the runner (its slash commands).
    owner = next(k for k in GatewayRunner.__mro__ if "_handle_reasoning_command" in vars(k))
    monkeypatch.delattr(owner, "_handle_reasoning_command")
    mismatches = contract.check(runner=runner)
    assert [m.item for m in mismatches] == ["gateway.run.GatewayRunner._handle_reasoning_command"]
    contract.apply(mismatches)  # no platform refusal: one feature is off
    assert not contract.enabled(contract.PREFERENCES)
    assert contract.enabled(contract.HARD_STOP)
    with pytest.raises(CommandError) as unavailable:
        hr.model_state(runner, "agent:main:android:dm:android:default")
    assert unavailable.value.code == "unavailable"
    assert "_handle_reasoning_command" in unavailable.value.message


def test_a_missing_runner_attribute_is_found_on_the_live_runner(runner: GatewayRunner) -> None:
    del runner._running_agents
    mismatches = contract.check(runner=runner, session_store=runner.session_store)
    assert mismatches == [contract.Mismatch("runner._running_agents", contract.HARD_STOP)]
    contract.apply(mismatches)
    assert hr.agent_running(runner, "agent:main:android:dm:android:default") is False


def test_a_session_store_without_its_lock_leaves_start_up_resumes_as_hermes_set_them(
    runner: GatewayRunner,
) -> None:
    store = runner.session_store
    del store._lock
    mismatches = contract.check(runner=runner, session_store=store)
    assert [m.item for m in mismatches] == ["session_store._lock"]
    contract.apply(mismatches)
    assert hr.keep_resumes_of(store, set()) == 0


def test_hermes_own_state_db_has_the_schema_the_statements_read(tmp_path: Path) -> None:
    path = _state_db(tmp_path / "state.db")
    with sqlite3.connect(path) as conn:
        assert contract.check_schema(conn) == []
    assert [s["id"] for s in Transcript(path).sessions(LANE)] == ["s1"]


def test_a_state_db_lacking_a_column_turns_history_off_with_one_error_naming_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _state_db(tmp_path / "state.db")
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE messages RENAME COLUMN reasoning_content TO thinking")
    with caplog.at_level(logging.ERROR, logger="hdg.plugin"):
        transcript = Transcript(path)
        assert transcript.merged(LANE) == []
        assert transcript.sessions(LANE) == []
        assert transcript.turn_since(LANE, 0.0) is None
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "state.db column messages.reasoning_content" in errors[0]
    assert contract.SUPPORTED_HERMES in errors[0]
    assert not contract.enabled(contract.HISTORY)


async def test_the_adapter_refuses_to_connect_to_a_hermes_lacking_an_internal(
    runner: GatewayRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANDROID_TOKEN", "contract-test-token-" + "c" * 24)
    monkeypatch.setenv("ANDROID_CRON_HOME_CHANNEL", "android:home")  # register() sets it

    class Context:
        """What Hermes' PluginContext does with a platform: registers its entry."""

        def register_platform(self, **kwargs: Any) -> None:
            platform_registry.register(PlatformEntry(source="plugin", **kwargs))

        def register_hook(self, name: str, callback: Any) -> None:
            pass

    register_platform(Context())
    try:
        adapter = platform_registry.create_adapter(PLATFORM, PlatformConfig(enabled=True))
        assert adapter is not None
        adapter.gateway_runner = runner
        adapter.set_session_store(runner.session_store)
        monkeypatch.delattr(GatewayRunner, "_session_key_for_source")
        assert await adapter.connect() is False
        assert adapter._fatal_error_code == "hermes_unsupported"
        assert "_session_key_for_source" in adapter._fatal_error_message
        assert adapter.controller is None  # nothing was started
    finally:
        platform_registry.unregister(PLATFORM)

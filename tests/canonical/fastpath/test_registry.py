"""canonical.fastpath.registry: a process decides once which fast paths run, from
ANDROID_FASTPATH and each piece's contract check, and says once why a piece is off."""

from __future__ import annotations

import logging

import pytest

from canonical import fastpath
from canonical.errors import SettingsError
from canonical.fastpath.registry import Piece, Registry, switched_off, verdict
from canonical.settings import load_settings


class Check:
    """A contract check that answers ``result`` (or raises) and counts its calls."""

    def __init__(self, result: str | None = None, raises: bool = False) -> None:
        self.result, self.raises, self.calls = result, raises, 0

    def __call__(self) -> str | None:
        self.calls += 1
        if self.raises:
            raise AttributeError("module 'lib' has no attribute 'inner'")
        return self.result


def piece(name: str, check: Check | None = None) -> Piece:
    return Piece(name, "lib", lambda: "9.9.9", check or Check())


@pytest.fixture
def no_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANDROID_FASTPATH", raising=False)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "hdg.fastpath" and r.levelno == logging.WARNING
    ]


def test_every_piece_whose_contract_holds_runs(no_switch: None) -> None:
    registry = Registry("side", [piece("a"), piece("b")])
    assert registry.active() == {"a", "b"}
    assert registry.enabled("a") and registry.enabled("b")


def test_a_failed_contract_turns_only_its_piece_off_with_one_warning_naming_it(
    no_switch: None, caplog: pytest.LogCaptureFixture
) -> None:
    broken = Check("Reader.gets is missing")
    registry = Registry("side", [piece("a"), piece("b", broken)])
    for _ in range(3):
        assert registry.enabled("a") and not registry.enabled("b")
    assert broken.calls == 1  # decided once
    [line] = warnings(caplog)
    assert "side.b" in line and "lib 9.9.9" in line and "Reader.gets is missing" in line
    assert "stock path" in line


def test_a_contract_check_that_raises_counts_as_failed(
    no_switch: None, caplog: pytest.LogCaptureFixture
) -> None:
    registry = Registry("side", [piece("a", Check(raises=True))])
    assert registry.active() == frozenset()
    assert "AttributeError" in warnings(caplog)[0]
    assert verdict(piece("x", Check(raises=True))) is not None


def test_android_fastpath_off_turns_every_piece_off_without_running_the_checks(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hdg.fastpath")
    monkeypatch.setenv("ANDROID_FASTPATH", "off")
    checked = Check()
    registry = Registry("side", [piece("a", checked)])
    assert registry.active() == frozenset()
    assert checked.calls == 0
    assert not warnings(caplog)
    assert any("ANDROID_FASTPATH=off" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("environ", "off"),
    [
        ({}, False),
        ({"ANDROID_FASTPATH": "on"}, False),
        ({"ANDROID_FASTPATH": "off"}, True),
        ({"android_fastpath": " OFF "}, True),
        ({"ANDROID_FASTPATH": ""}, False),
    ],
)
def test_the_switch_is_read_as_every_android_variable_is(
    environ: dict[str, str], off: bool
) -> None:
    assert switched_off(environ) is off


def test_a_setting_given_before_the_first_question_decides(no_switch: None) -> None:
    registry = Registry("side", [piece("a")])
    registry.configure("off")
    assert registry.active() == frozenset()


def test_a_setting_given_after_the_decision_is_logged_not_silently_ignored(
    no_switch: None, caplog: pytest.LogCaptureFixture
) -> None:
    registry = Registry("side", [piece("a")])
    assert registry.active() == {"a"}
    registry.configure("on")
    assert not warnings(caplog)
    registry.configure("off")
    assert registry.active() == {"a"}
    assert "set it in the environment" in warnings(caplog)[0]


def test_reset_decides_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANDROID_FASTPATH", raising=False)
    registry = Registry("side", [piece("a")])
    assert registry.active() == {"a"}
    monkeypatch.setenv("ANDROID_FASTPATH", "off")
    assert registry.active() == {"a"}
    registry.reset()
    assert registry.active() == frozenset()


def test_asking_for_a_piece_that_does_not_exist_is_an_error() -> None:
    with pytest.raises(KeyError):
        Registry("side", [piece("a")]).enabled("b")


def test_the_setting_reads_the_same_variable_and_refuses_anything_but_on_or_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANDROID_FASTPATH", raising=False)
    assert load_settings().fastpath == "on"
    monkeypatch.setenv("ANDROID_FASTPATH", "off")
    assert load_settings().fastpath == "off"
    monkeypatch.setenv("ANDROID_FASTPATH", "fast")
    with pytest.raises(SettingsError, match="ANDROID_FASTPATH"):
        load_settings()


def test_the_canonical_registry_holds_every_piece_that_relies_on_a_librarys_internals() -> None:
    assert set(fastpath.REGISTRY.pieces) == {"jsonenc", "redis_mux", "redis_pubsub"}

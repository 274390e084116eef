"""gateway_plugin.shutdown: fitting the plugin's stop inside the time Hermes allows."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway_plugin.shutdown import HERMES_TIMEOUT_ENV, MARGIN_S, Deadline, disconnect_budget


def test_the_budget_is_hermes_default_of_five_seconds_unless_set() -> None:
    assert disconnect_budget({}) == 5.0
    assert disconnect_budget({HERMES_TIMEOUT_ENV: "  "}) == 5.0


def test_the_budget_follows_the_setting_hermes_reads() -> None:
    assert disconnect_budget({HERMES_TIMEOUT_ENV: "12.5"}) == 12.5


def test_zero_or_less_means_hermes_waits_for_ever() -> None:
    for raw in ("0", "-3", "nan"):
        assert disconnect_budget({HERMES_TIMEOUT_ENV: raw}) is None


def test_a_setting_hermes_ignores_is_ignored_here_too() -> None:
    assert disconnect_budget({HERMES_TIMEOUT_ENV: "soon"}) == 5.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_wait_gets_what_is_left_after_the_ones_before() -> None:
    clock = Clock()
    deadline = Deadline(5.0, clock)
    assert deadline.left(2.0) == 2.0
    clock.now += 2.0
    assert deadline.left(30.0) == 5.0 - MARGIN_S - 2.0
    clock.now += 10.0
    assert deadline.left(30.0) == 0.0


def test_without_a_budget_every_wait_keeps_its_own_cap() -> None:
    clock = Clock()
    deadline = Deadline(None, clock)
    clock.now += 1e6
    assert deadline.left(30.0) == 30.0


@given(
    budget=st.floats(0, 1e6),
    elapsed=st.floats(0, 1e6),
    cap=st.floats(0, 1e6),
)
def test_a_wait_never_outlasts_its_cap_or_the_budget(
    budget: float, elapsed: float, cap: float
) -> None:
    clock = Clock()
    deadline = Deadline(budget, clock)
    clock.now += elapsed
    left = deadline.left(cap)
    assert 0.0 <= left <= cap
    assert elapsed + left <= max(budget - MARGIN_S, 0.0) + 1e-6 or left == 0.0

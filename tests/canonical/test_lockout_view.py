"""canonical.lockout_view.LockoutView: when an edge may skip the lockout lookup."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from canonical.lockout_view import LockoutView


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def live_view(clock: Clock, margin_s: float = 30.0, max_entries: int = 10_000) -> LockoutView:
    view = LockoutView(margin_s=margin_s, max_entries=max_entries, clock=clock)
    view.attach("subscription", [])
    return view


def test_without_a_live_subscription_no_address_is_certainly_clear() -> None:
    view = LockoutView()
    assert not view.certainly_clear("10.0.0.1")
    view.attach("sub", [])
    assert view.certainly_clear("10.0.0.1")
    view.detach("sub")
    assert not view.certainly_clear("10.0.0.1")


def test_a_noted_failure_counts_for_its_window_plus_the_margin() -> None:
    clock = Clock()
    view = live_view(clock, margin_s=30.0)
    view.note("10.0.0.1", 60.0)
    assert not view.certainly_clear("10.0.0.1")
    assert view.certainly_clear("10.0.0.2")
    clock.now += 89.0
    assert not view.certainly_clear("10.0.0.1")
    clock.now += 1.0
    assert view.certainly_clear("10.0.0.1")


def test_a_shorter_notice_never_cuts_a_longer_one_short() -> None:
    clock = Clock()
    view = live_view(clock, margin_s=0.0)
    view.note("a", 60.0)
    view.note("a", 1.0)
    clock.now += 30.0
    assert not view.certainly_clear("a")


def test_failures_recorded_before_the_subscription_come_from_the_index() -> None:
    clock = Clock()
    view = LockoutView(clock=clock, margin_s=0.0)
    view.attach("sub", [("a", 20.0), ("b", -5.0)])
    assert not view.certainly_clear("a")
    assert view.certainly_clear("b")  # already past its window


def test_a_flood_of_failing_addresses_sends_every_check_to_redis() -> None:
    clock = Clock()
    view = live_view(clock, max_entries=3, margin_s=0.0)
    for n in range(4):
        view.note(f"10.0.0.{n}", 60.0)
    assert not view.live
    assert not view.certainly_clear("192.168.1.1")
    clock.now += 61.0
    view.note("10.0.0.9", 60.0)  # over the cap again: the expired ones are pruned
    assert view.live
    assert view.certainly_clear("192.168.1.1")


def test_a_flood_scans_the_view_at_most_once_a_second() -> None:
    clock = Clock()
    view = live_view(clock, max_entries=2, margin_s=0.0)
    for n in range(3):
        view.note(f"old-{n}", 0.1)  # the third is over the cap: a scan, nothing expired
    clock.now += 0.5  # the three have expired, but the last scan was half a second ago
    view.note("new", 60.0)
    assert not view.live
    clock.now += 0.5
    view.note("newer", 60.0)  # a second on: this one scans, and drops the expired
    assert view.live
    assert view.certainly_clear("old-0")
    assert not view.certainly_clear("new")


@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.floats(0, 120), st.floats(0, 200)),
        max_size=30,
    ),
    st.sampled_from(["a", "b", "c"]),
)
def test_an_address_with_an_unexpired_failure_is_never_clear(
    notices: list[tuple[str, float, float]], probe: str
) -> None:
    clock = Clock()
    view = live_view(clock, margin_s=0.0)
    latest: dict[str, float] = {}
    for source, ttl, advance in notices:
        clock.now += advance
        view.note(source, ttl)
        latest[source] = max(latest.get(source, 0.0), clock.now + ttl)
        if view.certainly_clear(probe):
            assert latest.get(probe, 0.0) <= clock.now

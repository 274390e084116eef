"""Pending decisions and their expiry, on an injected clock."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway_plugin.commands.interactive import PICKER_TTL_S, Interactive, Pending

LANE = ("android:default", None)
KINDS = ["approval", "clarify", "model", "choice", "confirm"]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _pending(kind: str, picker_id: str) -> Pending:
    return Pending(kind, picker_id, LANE, "session", {"title": "Reasoning", "choices": []})


def test_a_model_picker_is_pending_until_its_expiry_and_expired_from_then_on() -> None:
    clock = Clock()
    state = Interactive(clock)
    state.add(_pending("model", "p1"))
    clock.now += PICKER_TTL_S - 1
    assert [p.picker_id for p in state.for_lane(LANE)] == ["p1"]
    assert state.take_expired() == []
    clock.now += 1
    assert state.for_lane(LANE) == []  # a reconnecting device is not offered it again
    assert [p.picker_id for p in state.take_expired()] == ["p1"]
    assert state.pending == {}


def test_approvals_and_clarifications_are_left_for_hermes_to_expire() -> None:
    clock = Clock()
    state = Interactive(clock)
    for kind in KINDS:
        state.add(_pending(kind, kind))
    clock.now += 10 * PICKER_TTL_S
    assert sorted(p.kind for p in state.take_expired()) == ["choice", "confirm", "model"]
    assert sorted(state.pending) == ["approval", "clarify"]


@given(
    st.lists(
        st.tuples(st.sampled_from(KINDS), st.integers(min_value=0, max_value=3 * 300)),
        max_size=30,
    )
)
def test_after_each_sweep_exactly_the_unexpired_decisions_remain(
    steps: list[tuple[str, int]],
) -> None:
    clock = Clock()
    state = Interactive(clock)
    added: dict[str, tuple[str, float]] = {}
    for index, (kind, wait) in enumerate(steps):
        state.add(_pending(kind, f"p{index}"))
        added[f"p{index}"] = (kind, clock.now)
        clock.now += wait
        state.take_expired()
        assert set(state.pending) == {
            picker_id
            for picker_id, (kind, at) in added.items()
            if kind in ("approval", "clarify") or clock.now - at < PICKER_TTL_S
        }

"""The one retry policy: capped exponential ceilings, delays drawn below them (full
jitter), a loop's count starting over after a success, and bounded retries."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from canonical.backoff import RECONNECT, Attempts, Backoff, retrying

policies = st.builds(
    Backoff,
    first_s=st.floats(min_value=0.001, max_value=10.0),
    max_s=st.floats(min_value=0.01, max_value=600.0),
)


def test_ceilings_double_from_the_first_delay_up_to_the_cap() -> None:
    policy = Backoff(first_s=0.1, max_s=1.6)
    assert [policy.ceiling(n) for n in range(7)] == pytest.approx(
        [0.1, 0.2, 0.4, 0.8, 1.6, 1.6, 1.6]
    )


@given(policies, st.integers(min_value=0, max_value=10_000), st.floats(0.0, 1.0))
def test_every_delay_lies_between_zero_and_its_capped_ceiling(
    policy: Backoff, failures: int, u: float
) -> None:
    delay = policy.delay(failures, lambda low, high: low + (high - low) * u)
    assert 0.0 <= delay <= policy.ceiling(failures) <= policy.max_s


@given(policies, st.integers(min_value=0, max_value=100))
def test_the_draw_spans_the_whole_range_from_zero_full_jitter(
    policy: Backoff, failures: int
) -> None:
    seen: list[tuple[float, float]] = []

    def draw(low: float, high: float) -> float:
        seen.append((low, high))
        return high

    assert policy.delay(failures, draw) == policy.ceiling(failures)
    assert seen == [(0.0, policy.ceiling(failures))]


def test_real_draws_spread_over_the_range_instead_of_clustering_at_the_ceiling() -> None:
    delays = [RECONNECT.delay(10) for _ in range(2000)]
    assert min(delays) < RECONNECT.max_s * 0.1 and max(delays) > RECONNECT.max_s * 0.9


def test_a_loop_waits_longer_while_it_keeps_failing_and_little_again_after_a_success() -> None:
    attempts = Attempts(Backoff(first_s=0.1, max_s=5.0), draw=lambda low, high: high)
    assert [attempts.next_delay() for _ in range(8)] == pytest.approx(
        [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    )
    attempts.succeeded()
    assert attempts.next_delay() == pytest.approx(0.1)


def test_the_tenacity_strategy_has_the_same_bounds_as_the_policy() -> None:
    from tenacity import RetryCallState

    policy = Backoff(first_s=0.1, max_s=1.6)
    wait = policy.wait()
    state = RetryCallState(None, None, (), {})  # type: ignore[arg-type]
    for failures in range(8):
        state.attempt_number = failures + 1
        assert all(0.0 <= wait(state) <= policy.ceiling(failures) for _ in range(50))


def test_a_retried_call_succeeds_once_its_error_goes_away() -> None:
    calls: list[int] = []

    async def scenario() -> None:
        async for attempt in retrying(
            ConnectionError, give_up_after_s=5.0, policy=Backoff(0.001, 0.01)
        ):
            with attempt:
                calls.append(1)
                if len(calls) < 3:
                    raise ConnectionError("down")

    asyncio.run(scenario())
    assert len(calls) == 3


def test_a_retried_call_gives_up_in_time_with_the_last_error() -> None:
    async def scenario() -> None:
        async for attempt in retrying(
            ConnectionError, give_up_after_s=0.05, policy=Backoff(0.001, 0.01)
        ):
            with attempt:
                raise ConnectionError("still down")

    with pytest.raises(ConnectionError, match="still down"):
        asyncio.run(scenario())


def test_an_error_of_another_kind_is_not_retried() -> None:
    calls: list[int] = []

    async def scenario() -> None:
        async for attempt in retrying(ConnectionError, give_up_after_s=5.0):
            with attempt:
                calls.append(1)
                raise ValueError("a bug")

    with pytest.raises(ValueError):
        asyncio.run(scenario())
    assert calls == [1]

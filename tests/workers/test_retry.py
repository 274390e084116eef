"""workers.retry: exponential backoff with jitter, and Retry-After."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from workers.retry import RetryPolicy

POLICY = RetryPolicy(base=2.0, factor=2.0, cap=600.0)


def test_backoff_doubles_per_try_within_equal_jitter_bounds() -> None:
    assert [POLICY.backoff(t, draw=0.0) for t in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert [POLICY.backoff(t, draw=1.0) for t in (1, 2, 3, 4)] == [2.0, 4.0, 8.0, 16.0]


def test_backoff_is_capped() -> None:
    assert POLICY.backoff(50, draw=1.0) == 600.0
    assert POLICY.backoff(10**9, draw=0.0) == 300.0


def test_jitter_spreads_retries_of_a_burst() -> None:
    import random

    rng = random.Random(7)
    policy = RetryPolicy(rng=rng.random)
    delays = {round(policy.backoff(3), 6) for _ in range(50)}
    assert len(delays) > 40
    assert all(4.0 <= d <= 8.0 for d in delays)


def test_retry_after_is_honoured_never_earlier() -> None:
    assert POLICY.after(30, draw=0.0) == 30.0
    assert POLICY.after(30, draw=1.0) == 33.0
    assert POLICY.after(600, draw=1.0) == 605.0  # jitter is at most 5 s


@given(st.integers(-5, 10**6), st.floats(0, 1))
def test_backoff_is_always_positive_and_bounded(job_try: int, draw: float) -> None:
    assert 0 < POLICY.backoff(job_try, draw) <= 600.0


@given(st.floats(-1e9, 1e12, allow_nan=False), st.floats(0, 1))
def test_retry_after_delays_are_bounded(seconds: float, draw: float) -> None:
    assert 0.0 <= POLICY.after(seconds, draw) <= 86_400.0 + 5.0

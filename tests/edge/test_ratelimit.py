"""edge.ratelimit.TokenBucket with an injected clock: no sleeping."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from edge.ratelimit import TokenBucket


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_new_bucket_allows_a_full_burst_then_refuses() -> None:
    bucket = TokenBucket(rate=1.0, burst=5, clock=Clock())
    assert [bucket.take() for _ in range(6)] == [True] * 5 + [False]


def test_tokens_refill_at_the_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=2.0, burst=4, clock=clock)
    for _ in range(4):
        assert bucket.take()
    assert not bucket.take()
    clock.now += 0.5  # one token at 2/s
    assert bucket.take()
    assert not bucket.take()
    clock.now += 1.0
    assert bucket.take() and bucket.take()
    assert not bucket.take()


def test_refill_never_exceeds_the_burst() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=10.0, burst=3, clock=clock)
    clock.now += 3600
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]


def test_a_refused_take_costs_nothing() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=1.0, burst=2, clock=clock)
    assert bucket.take(2)
    for _ in range(10):
        assert not bucket.take()
    clock.now += 1.0
    assert bucket.take()


def test_a_take_may_cost_more_than_one_token() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=1.0, burst=10, clock=clock)
    assert bucket.take(7)
    assert not bucket.take(4)
    assert bucket.take(3)
    assert not bucket.take(0.5)
    clock.now += 0.5
    assert bucket.take(0.5)


def test_a_cost_above_the_burst_is_never_allowed() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=100.0, burst=5, clock=clock)
    clock.now += 1000
    assert not bucket.take(6)
    assert bucket.take(5)


def test_refill_is_measured_on_the_injected_clock() -> None:
    clock = Clock(now=50.0)
    bucket = TokenBucket(rate=1.0, burst=1, clock=clock)
    assert bucket.take()
    clock.now = 50.999
    assert not bucket.take()
    clock.now = 51.0
    assert bucket.take()


@settings(max_examples=300)
@given(
    rate=st.floats(0.1, 100),
    burst=st.integers(1, 50),
    steps=st.lists(st.tuples(st.floats(0, 10), st.floats(0.1, 5)), max_size=50),
)
def test_allowed_cost_never_exceeds_burst_plus_rate_times_elapsed(
    rate: float, burst: int, steps: list[tuple[float, float]]
) -> None:
    clock = Clock(0.0)
    bucket = TokenBucket(rate=rate, burst=burst, clock=clock)
    allowed = 0.0
    for delay, cost in steps:
        clock.now += delay
        if bucket.take(cost):
            allowed += cost
    assert allowed <= burst + rate * clock.now + 1e-6

"""Timestamps as both dialects print them."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from canonical.protocol import iso_from_unix, iso_ms, now_iso


@given(st.floats(min_value=0, max_value=253_402_300_799.0))  # up to 9999-12-31T23:59:59
def test_iso_ms_prints_exactly_what_datetime_prints(ts: float) -> None:
    assert iso_ms(ts) == datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


@given(st.integers(min_value=0, max_value=4_000_000_000), st.sampled_from([-1e-6, 0.0, 1e-6]))
def test_iso_ms_rounds_like_datetime_at_second_boundaries(second: int, nudge: float) -> None:
    ts = second + 0.9999995 + nudge
    assert iso_ms(ts) == datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def test_now_iso_is_utc_milliseconds() -> None:
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", now_iso())


@given(st.floats(min_value=-1e10, max_value=3e11))
def test_a_stored_time_prints_as_datetime_prints_it_in_range_or_out(ts: float) -> None:
    try:
        expected: str | type[Exception] = datetime.fromtimestamp(ts, UTC).isoformat(
            timespec="milliseconds"
        )
    except (OverflowError, ValueError, OSError) as error:
        expected = type(error)
    try:
        printed: str | None | type[Exception] = iso_from_unix(ts)
    except (OverflowError, ValueError, OSError) as error:
        printed = type(error)
    assert printed == expected


def test_no_stored_time_prints_as_none() -> None:
    assert iso_from_unix(None) is None

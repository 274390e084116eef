"""canonical.bus: direct replies batched per edge, and taken apart again."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from canonical import bus
from canonical.bus import direct_batches, direct_envelope, direct_envelopes


def test_one_reply_is_sent_as_the_envelope_itself() -> None:
    envelope = direct_envelope("c1", "reply", {"type": "result"})
    assert direct_batches([envelope]) == [envelope]
    assert direct_envelopes(envelope) == [json.loads(envelope)]


def test_several_replies_for_one_edge_are_one_message_in_their_order() -> None:
    envelopes = [direct_envelope(f"c{i}", "replay", {"n": i}) for i in range(3)]
    (message,) = direct_batches(envelopes)
    assert [e["conn"] for e in direct_envelopes(message)] == ["c0", "c1", "c2"]


def test_a_message_that_is_not_json_is_refused_and_what_is_no_envelope_is_skipped() -> None:
    with pytest.raises(ValueError):
        direct_envelopes(b"[{")
    assert direct_envelopes(b'[{"conn":"c1"},7,"x",null,[]]') == [{"conn": "c1"}]
    assert direct_envelopes(b"42") == []


@given(
    st.lists(st.integers(0, 3000), max_size=40),
    st.integers(200, 5000),
)
def test_batches_keep_every_envelope_in_order_and_stay_below_the_size_limit(
    sizes: list[int], limit: int
) -> None:
    envelopes = [direct_envelope(f"c{i}", "replay", {"pad": "x" * n}) for i, n in enumerate(sizes)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bus, "DIRECT_BATCH_MAX_BYTES", limit)
        messages = direct_batches(envelopes)
    got = [e for message in messages for e in direct_envelopes(message)]
    assert got == [json.loads(e) for e in envelopes]
    for message in messages:
        # Only an envelope larger than the limit by itself makes a larger message.
        assert len(message) <= limit + 2 or len(direct_envelopes(message)) == 1

"""A history page read in chunks of rows is the page of the whole merged transcript."""

from __future__ import annotations

import random

import pytest
from hermes_state import SessionDB

from gateway_plugin.hermes.transcript import CHUNK_ROWS, Transcript, page

LANE = ("android:default", None)
T0 = 1_767_225_600.0


@pytest.fixture(scope="module")
def long_lane(tmp_path_factory: pytest.TempPathFactory) -> tuple[Transcript, list[int]]:
    """A lane of several chunks: turns of one user row and 0-6 assistant rows (some blank,
    as tool calls are), the odd user row without an answer, over two sessions."""
    path = tmp_path_factory.mktemp("hermes") / "state.db"
    db = SessionDB(db_path=path)
    rng = random.Random(5)
    ids: list[int] = []
    try:
        for n, sid in enumerate(("s1", "s2")):
            db.create_session(sid, "android", chat_id=LANE[0], chat_type="dm", session_key=f"k{n}")
            for turn in range(3 * CHUNK_ROWS // 4):
                ids.append(db.append_message(sid, "user", f"q{n}.{turn}", timestamp=T0 + len(ids)))
                for part in range(rng.choice([0, 1, 1, 2, 3, 6])):
                    text = rng.choice(["", "  ", f"a{n}.{turn}.{part} "])
                    ids.append(db.append_message(sid, "assistant", text, timestamp=T0 + len(ids)))
    finally:
        db.close()
    return Transcript(path), ids


@pytest.mark.parametrize("limit", [1, 2, 7, 50, 500])
def test_every_page_matches_the_page_of_the_whole_transcript(
    long_lane: tuple[Transcript, list[int]], limit: int
) -> None:
    transcript, ids = long_lane
    merged = transcript.merged(LANE)
    befores: list[str | None] = [None, "m0", f"m{ids[-1] + 1}"]
    befores += [f"m{row}" for row in ids[:: max(1, len(ids) // 40)]]  # starts and insides
    for before in befores:
        expected = page([dict(m, rows=list(m["rows"])) for m in merged], limit, before)
        assert transcript.messages(LANE, limit, before) == expected, (limit, before)


def test_paging_backwards_walks_the_whole_lane_once(
    long_lane: tuple[Transcript, list[int]],
) -> None:
    transcript, _ = long_lane
    seen: list[str] = []
    before = None
    while True:
        messages, more = transcript.messages(LANE, 9, before)
        seen[:0] = [m["message_id"] for m in messages]
        if not more:
            break
        before = messages[0]["message_id"]
    assert seen == [m["message_id"] for m in transcript.merged(LANE)]

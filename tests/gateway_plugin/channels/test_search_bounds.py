"""The LIKE fallback of search is bounded: the newest LIKE_SCAN_ROWS messages, and a time
budget after which it answers no hits instead of scanning on."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hermes_state import SessionDB

from gateway_plugin.channels import search
from gateway_plugin.channels.search import SearchIndex

T0 = 1_767_225_600.0


@pytest.fixture(scope="module")
def state_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("hermes") / "state.db"
    db = SessionDB(db_path=path)
    db.create_session("s", "android", chat_id="android:default", chat_type="dm", session_key="k")
    db.close()
    rows = [("s", "user", "an old note: qz marks the spot", T0)]
    rows += [("s", "user", f"filler message {n}", T0 + 1 + n) for n in range(20_050)]
    rows += [("s", "user", "a new note: qy marks it", T0 + 30_000)]
    conn = sqlite3.connect(path)
    with conn:
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
            rows,
        )
    conn.close()
    yield path


def test_a_short_term_is_found_among_the_newest_messages(state_db: Path) -> None:
    index = SearchIndex(state_db)
    try:
        hits = index.search("qy", mode="substring")
    finally:
        index.close()
    assert [h.snippet for h in hits] == ["a new note: [qy] marks it"]


def test_a_match_older_than_the_scanned_window_is_not_found(state_db: Path) -> None:
    index = SearchIndex(state_db)
    try:
        assert index.search("qz", mode="substring") == []
    finally:
        index.close()


def test_a_scan_past_its_time_budget_answers_no_hits(
    state_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "LIKE_BUDGET_S", 0.0)
    index = SearchIndex(state_db)
    try:
        assert index.search("qy", mode="substring") == []
        monkeypatch.setattr(search, "LIKE_BUDGET_S", 5.0)
        assert len(index.search("qy", mode="substring")) == 1  # each search has its own budget
    finally:
        index.close()

"""Search against a real state.db written by Hermes' own SessionDB."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hermes_state import SessionDB
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway_plugin.channels.search import SearchError, SearchHit, SearchIndex
from gateway_plugin.channels.store import ChannelDirectory
from gateway_plugin.errors import CommandError

HOME = "android:default"
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@dataclass
class World:
    index: SearchIndex
    channels: ChannelDirectory
    ids: dict[str, int]  # label -> messages.id
    db_path: Path


def _build(db_path: Path) -> dict[str, int]:
    db = SessionDB(db_path=db_path)
    sessions = {
        "home": ("android", HOME, None),
        "topic": ("android", HOME, "t_1"),
        "work": ("android", "android:chan_1", None),
        "old": ("android", "android:chan_2", None),
        "tg": ("telegram", "12345", None),
    }
    for sid, (source, chat, thread) in sessions.items():
        key = f"agent:main:{source}:dm:{chat}" + (f":{thread}" if thread else "")
        db.create_session(
            sid, source, chat_id=chat, thread_id=thread, chat_type="dm", session_key=key
        )
    messages = [
        ("home_hello", "home", "user", "hello world from the default lane"),
        ("home_reply", "home", "assistant", "Hello! How can I help with the deployment?"),
        ("home_tool", "home", "tool", "deployment tool output"),
        ("home_cjk", "home", "user", "你好世界，今天天气很好"),
        ("topic_q", "topic", "user", "deployment checklist for friday"),
        ("topic_a", "topic", "assistant", "The deployment checklist: build, test, ship"),
        ("work_q", "work", "user", "quarterly report numbers please"),
        ("work_dense", "work", "assistant", "kubernetes kubernetes kubernetes cluster"),
        (
            "work_sparse",
            "work",
            "assistant",
            "a long answer that mentions kubernetes only once among very many other words "
            "about storage, networking, budgets, people, plans and the weather",
        ),
        ("old_cron", "old", "assistant", "Cron output: disk usage report for the nightly job"),
        ("tg_hello", "tg", "user", "hello world deployment from telegram"),
        ("home_undo", "home", "user", "zebra secret that the user rewound"),
    ]
    ids: dict[str, int] = {}
    for n, (label, sid, role, text) in enumerate(messages):
        ids[label] = db.append_message(sid, role, text, timestamp=T0 + n * 60)
    db.rewind_to_message("home", ids["home_undo"])
    db.close()
    return ids


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("hermes")
    db_path = root / "state.db"
    ids = _build(db_path)
    channels = ChannelDirectory(root / "android" / "channels.db")
    channels.ensure_default()
    channels.create_channel("Work")
    old = channels.create_channel("Old Reports")
    channels.delete(old.chat_id)
    index = SearchIndex(db_path)
    yield World(index, channels, ids, db_path)
    index.close()
    channels.close()


def _labels(world: World, hits: list[SearchHit]) -> set[str]:
    by_id = {str(v): k for k, v in world.ids.items()}
    return {by_id[h.message_id] for h in hits}


# ---- scopes ----------------------------------------------------------------------------


def test_scope_all_finds_every_android_lane_but_no_other_platform_and_no_tool_rows(
    world: World,
) -> None:
    hits = world.index.search("deployment", scope="all")
    assert _labels(world, hits) == {"home_reply", "topic_q", "topic_a"}


def test_scope_chat_without_a_thread_covers_the_chat_and_its_threads(world: World) -> None:
    hits = world.index.search("deployment", scope="chat", chat_id=HOME)
    assert _labels(world, hits) == {"home_reply", "topic_q", "topic_a"}
    assert world.index.search("kubernetes", scope="chat", chat_id=HOME) == []


def test_scope_chat_with_a_thread_covers_only_that_thread(world: World) -> None:
    hits = world.index.search("deployment", scope="chat", chat_id=HOME, thread_id="t_1")
    assert _labels(world, hits) == {"topic_q", "topic_a"}
    assert all(h.thread_id == "t_1" for h in hits)


def test_scope_chat_needs_a_chat_id(world: World) -> None:
    with pytest.raises(SearchError) as excinfo:
        world.index.search("hello", scope="chat")
    assert excinfo.value.code == "bad_request"
    assert isinstance(excinfo.value, CommandError)


def test_an_unknown_scope_or_mode_is_a_bad_request(world: World) -> None:
    with pytest.raises(SearchError):
        world.index.search("hello", scope="everything")  # type: ignore[arg-type]
    with pytest.raises(SearchError):
        world.index.search("hello", mode="regex")  # type: ignore[arg-type]


def test_rewound_messages_are_not_found(world: World) -> None:
    assert world.index.search("zebra") == []
    assert world.index.search("zebra", mode="substring") == []


# ---- qualifiers ------------------------------------------------------------------------


def test_the_role_qualifier_restricts_hits_to_that_role(world: World) -> None:
    hits = world.index.search("deployment role:user")
    assert _labels(world, hits) == {"topic_q"}
    assert {h.role for h in world.index.search("deployment role:assistant")} == {"assistant"}


def test_the_channel_qualifier_resolves_names_through_the_directory(world: World) -> None:
    resolver = world.channels.chat_ids_matching
    hits = world.index.search("report channel:work", channel_resolver=resolver)
    assert _labels(world, hits) == {"work_q"}
    assert {h.chat_id for h in hits} == {"android:chan_1"}


def test_archived_channels_stay_searchable_by_name(world: World) -> None:
    resolver = world.channels.chat_ids_matching
    hits = world.index.search('report channel:"Old Reports"', channel_resolver=resolver)
    assert _labels(world, hits) == {"old_cron"}
    assert _labels(world, world.index.search("nightly")) == {"old_cron"}


def test_an_unknown_channel_qualifier_finds_nothing(world: World) -> None:
    resolver = world.channels.chat_ids_matching
    assert world.index.search("report channel:Nope", channel_resolver=resolver) == []


def test_without_a_resolver_the_channel_qualifier_is_a_chat_id(world: World) -> None:
    hits = world.index.search("report channel:android:chan_2")
    assert _labels(world, hits) == {"old_cron"}


def test_only_qualifiers_and_no_words_find_nothing(world: World) -> None:
    assert world.index.search("role:user") == []


# ---- substring and CJK -----------------------------------------------------------------


def test_a_word_search_without_hits_falls_back_to_substrings(world: World) -> None:
    hits = world.index.search("ello")
    assert _labels(world, hits) == {"home_hello", "home_reply"}
    assert all("[ello]" in h.snippet.lower() for h in hits)


def test_substring_mode_matches_inside_words_with_readable_context(world: World) -> None:
    hits = world.index.search("ploym", mode="substring")
    assert _labels(world, hits) == {"home_reply", "topic_q", "topic_a"}
    assert "de[ploym]ent checklist for friday" in {h.snippet for h in hits}


def test_a_short_cjk_word_is_found_inside_a_longer_sentence(world: World) -> None:
    hits = world.index.search("世界")
    assert _labels(world, hits) == {"home_cjk"}
    assert "[世界]" in hits[0].snippet


def test_a_long_cjk_phrase_uses_the_trigram_index(world: World) -> None:
    hits = world.index.search("天气很好")
    assert _labels(world, hits) == {"home_cjk"}
    assert "[天气很好]" in hits[0].snippet


def test_short_latin_terms_narrow_a_substring_search(world: World) -> None:
    assert _labels(world, world.index.search("ploym fr", mode="substring")) == {"topic_q"}


# ---- hits, ranking, limits -------------------------------------------------------------


def test_a_hit_carries_ids_lane_role_snippet_and_an_iso_utc_timestamp(world: World) -> None:
    (hit,) = world.index.search("checklist role:user")
    assert hit.message_id == str(world.ids["topic_q"])
    assert (hit.chat_id, hit.thread_id, hit.role, hit.session_id) == (HOME, "t_1", "user", "topic")
    assert "[checklist]" in hit.snippet
    when = datetime.fromisoformat(hit.ts)
    assert when.utcoffset() == timedelta(0)
    assert when.timestamp() == pytest.approx(T0 + 4 * 60)
    wire = hit.to_wire()
    assert json.loads(json.dumps(wire)) == wire
    assert set(wire) == {
        "message_id",
        "chat_id",
        "thread_id",
        "role",
        "snippet",
        "ts",
        "session_id",
        "rank",
    }


def test_hits_are_ranked_by_bm25_best_first(world: World) -> None:
    hits = world.index.search("kubernetes")
    assert [_labels(world, [h]).pop() for h in hits] == ["work_dense", "work_sparse"]
    assert hits[0].rank < hits[1].rank


def test_the_limit_is_clamped_between_1_and_200(world: World) -> None:
    assert len(world.index.search("deployment", limit=1)) == 1
    assert len(world.index.search("deployment", limit=0)) == 1
    assert len(world.index.search("deployment", limit=-5)) == 1
    assert len(world.index.search("deployment", limit=10_000)) == 3


# ---- robustness ------------------------------------------------------------------------


def test_a_non_integer_limit_is_a_bad_request(world: World) -> None:
    with pytest.raises(SearchError):
        world.index.search("hello", limit="many")  # type: ignore[arg-type]


def test_a_state_db_path_with_uri_special_characters_works(tmp_path: Path) -> None:
    odd = tmp_path / "Application Support #1 ?x=1 %20"
    odd.mkdir()
    _build(odd / "state.db")
    index = SearchIndex(odd / "state.db")
    assert len(index.search("hello world")) == 1
    index.close()


def test_a_missing_state_db_gives_no_results(tmp_path: Path) -> None:
    assert SearchIndex(tmp_path / "nope" / "state.db").search("hello") == []


def test_a_state_db_created_after_the_index_is_picked_up(tmp_path: Path) -> None:
    index = SearchIndex(tmp_path / "state.db")
    assert index.search("hello") == []
    _build(tmp_path / "state.db")
    assert len(index.search("hello world")) == 1
    index.close()


def _fingerprint(db_path: Path) -> list[str]:
    files = [db_path, db_path.with_name(db_path.name + "-wal")]
    # An empty -wal is what the first reader of a WAL database creates: no write.
    return [
        hashlib.sha256(f.read_bytes()).hexdigest()
        for f in files
        if f.exists() and f.stat().st_size > 0
    ]


def test_searching_never_writes_to_state_db(world: World) -> None:
    before = _fingerprint(world.db_path)
    for q in ("hello", "ello", "世界", "天气很好", "x channel:Work"):
        world.index.search(q, channel_resolver=world.channels.chat_ids_matching)
    assert _fingerprint(world.db_path) == before


@pytest.mark.parametrize(
    "query",
    [
        '"',
        '""',
        "*",
        "NEAR(",
        "NEAR(hello world",
        "hello OR",
        "^hello",
        "content:hello",
        "(hello",
        "🎉🎉🎉",
        "\x00",
        "a" * 2048,
        "hello " * 400,
        "role:",
        'channel:"',
        "channel:",
        "%",
        "_",
        "\\",
    ],
)
def test_hostile_input_never_raises_and_returns_a_list(
    world: World, query: str, caplog: pytest.LogCaptureFixture
) -> None:
    for mode in ("auto", "substring"):
        hits = world.index.search(query, mode=mode)
        assert isinstance(hits, list)
    assert not caplog.records  # not even a swallowed sqlite error


def test_like_wildcards_in_a_query_are_literal(world: World) -> None:
    assert world.index.search("%", mode="substring") == []
    assert world.index.search("_", mode="substring") == []


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    query=st.text(max_size=200)
    | st.text(alphabet='"*^:()NEAR+-{}%_\\ 你好世界🎉', max_size=60)
    | st.text(min_size=2000, max_size=2100)
)
def test_no_query_text_makes_search_raise(
    world: World, query: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert isinstance(world.index.search(query), list)
    assert isinstance(world.index.search(query, scope="chat", chat_id=HOME), list)
    assert not caplog.records  # not even a swallowed sqlite error

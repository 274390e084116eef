from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway_plugin.channels.search_query import (
    MAX_QUERY_CHARS,
    MAX_TERMS,
    contains_cjk,
    match_expression,
    parse_query,
    quote_term,
)

# Characters that mean something to FTS5, to the qualifier parser, or to SQLite strings.
NASTY = ['"', "*", "^", ":", "(", ")", "NEAR(", "OR", "AND", "NOT", "+", "-", "{", "}", "'"]
hostile = st.lists(
    st.sampled_from(
        [*NASTY, " ", "role:", "channel:", 'channel:"', "🎉", "你好", "世界", "\x00", "\n"]
    )
    | st.text(max_size=8),
    max_size=60,
).map("".join)
queries = st.text(max_size=300) | hostile | st.text(min_size=2000, max_size=2100)


def test_plain_words_become_quoted_terms_joined_by_spaces() -> None:
    parsed = parse_query("hello   world")
    assert parsed.terms == ("hello", "world")
    assert parsed.word_match() == '"hello" "world"'
    assert not parsed.is_empty and not parsed.roles and not parsed.channels


def test_role_and_channel_qualifiers_are_extracted() -> None:
    parsed = parse_query('deploy ROLE:User channel:"Cron Reports" role:assistant channel:chan_7')
    assert parsed.terms == ("deploy",)
    assert parsed.roles == ("user", "assistant")
    assert parsed.channels == ("Cron Reports", "chan_7")


def test_a_channel_qualifier_may_be_a_full_chat_id() -> None:
    assert parse_query("x channel:android:chan_7").channels == ("android:chan_7",)


def test_an_unknown_role_or_an_empty_channel_stays_free_text() -> None:
    parsed = parse_query("role:tool channel: x")
    assert parsed.terms == ("role:tool", "channel:", "x")
    assert not parsed.roles and not parsed.channels


def test_a_quoted_phrase_is_one_term_and_an_unclosed_quote_runs_to_the_end() -> None:
    assert parse_query('"exact phrase" other').terms == ("exact phrase", "other")
    assert parse_query('a "unclosed tail').terms == ("a", "unclosed tail")


def test_embedded_quotes_are_escaped_by_doubling() -> None:
    assert parse_query('he"llo').word_match() == '"he""llo"'
    assert quote_term('a"b') == '"a""b"'


def test_only_qualifiers_means_no_query() -> None:
    parsed = parse_query("role:user channel:Work")
    assert parsed.is_empty and parsed.word_match() is None and parsed.trigram_match() is None


@pytest.mark.parametrize("raw", ["", "   ", "\x00\x01", "\n\t"])
def test_empty_input_means_no_query(raw: str) -> None:
    assert parse_query(raw).is_empty


def test_control_characters_are_stripped() -> None:
    assert parse_query("hel\x00lo wor\x07ld").terms == ("hel", "lo", "wor", "ld")


def test_input_is_capped_in_characters_and_terms() -> None:
    assert len(parse_query("x" * 5000).terms[0]) == MAX_QUERY_CHARS
    many = parse_query(" ".join(f"w{i}" for i in range(50)))
    assert many.terms == tuple(f"w{i}" for i in range(MAX_TERMS))


def test_terms_without_letters_or_digits_are_left_out_of_the_word_match() -> None:
    parsed = parse_query("* ^ hello 🎉")
    assert parsed.word_match() == '"hello"'
    assert parse_query("* 🎉").word_match() is None


def test_short_terms_are_kept_apart_for_substring_matching() -> None:
    parsed = parse_query("世界 hello ab")
    assert parsed.long_terms == ("hello",)
    assert parsed.short_terms == ("世界", "ab")
    assert parsed.trigram_match() == '"hello"'
    assert parsed.has_cjk


def test_cjk_detection_covers_han_kana_and_hangul() -> None:
    assert all(contains_cjk(t) for t in ("世界", "ひらがな", "カタカナ", "한국어"))
    assert not contains_cjk("hello wörld")


def test_match_expression_of_nothing_is_none() -> None:
    assert match_expression([]) is None
    assert match_expression(["", ""]) is None


@pytest.fixture(scope="module")
def fts() -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE words USING fts5(content)")
    conn.execute("CREATE VIRTUAL TABLE grams USING fts5(content, tokenize='trigram')")
    for text in ["hello world", "你好世界", 'quote " and NEAR(a b)', "emoji 🎉🎉🎉 party"]:
        conn.execute("INSERT INTO words VALUES (?)", (text,))
        conn.execute("INSERT INTO grams VALUES (?)", (text,))
    yield conn
    conn.close()


@settings(max_examples=500, deadline=None)
@given(queries)
def test_no_user_input_produces_an_fts5_syntax_error(fts: sqlite3.Connection, raw: str) -> None:
    parsed = parse_query(raw)
    assert len(parsed.terms) <= MAX_TERMS
    for table, expr in (("words", parsed.word_match()), ("grams", parsed.trigram_match())):
        if expr is not None:
            fts.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (expr,)).fetchall()


def test_fts5_operators_are_searched_literally(fts: sqlite3.Connection) -> None:
    expr = parse_query("NEAR(a").trigram_match()
    assert expr is not None
    rows = fts.execute("SELECT content FROM grams WHERE grams MATCH ?", (expr,)).fetchall()
    assert rows == [('quote " and NEAR(a b)',)]

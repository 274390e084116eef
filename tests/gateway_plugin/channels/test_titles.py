from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway_plugin.channels.store import validate_name
from gateway_plugin.channels.titles import (
    FALLBACK_TITLE,
    PendingTitles,
    clean_generated_title,
    derive_title,
)

LINE_BREAKS = set("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")

# Text rich in the things derive_title strips: markdown, commands, URLs, fences, CJK.
markdownish = st.lists(
    st.sampled_from(
        [
            "# ",
            "> ",
            "- ",
            "1. ",
            "**",
            "`",
            "```py\n",
            "\n```\n",
            "/ask ",
            "https://www.example.com/a?b=c ",
            "[link](http://x.y) ",
            "![img](a.png) ",
            "hello ",
            "world",
            ". ",
            "? ",
            ", ",
            " - ",
            "…",
            "你好世界",
            "。",
            "🎉",
            "\n",
            "\t",
            "ß",
            "straße ",
        ]
    )
    | st.text(max_size=12),
    max_size=40,
).map("".join)
any_text = st.text(max_size=400) | markdownish


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("hey can you help me debug this? it fails on start", "Hey can you help me debug this?"),
        ("What's the weather in Berlin. And tomorrow?", "What's the weather in Berlin"),
        ("/ask what is the weather like today", "What is the weather like today"),
        ("# Deploy plan\n\nstep one", "Deploy plan"),
        ("> quoted **bold** words", "Quoted bold words"),
        ("- [x] ship the thing", "Ship the thing"),
        ("look at https://www.github.com/foo/bar?x=1 please", "Look at github.com please"),
        ("see [the docs](https://docs.example.com/a) now", "See the docs now"),
        ("```python\nprint('hi')\n```", "Print('hi')"),
        ("\n\n   \t  spaced    out   words  \n", "Spaced out words"),
        ("🎉🎉🎉", FALLBACK_TITLE),
        ("", FALLBACK_TITLE),
        ("/new", FALLBACK_TITLE),
        ("!!! ??? ...", FALLBACK_TITLE),
        ("你好世界。今天怎么样", "你好世界"),
        ("ßig start", "ßig start"),
    ],
)
def test_derive_title_examples(text: str, title: str) -> None:
    assert derive_title(text) == title


def test_a_long_sentence_is_cut_at_a_word_boundary_with_an_ellipsis() -> None:
    text = "I have been thinking about the architecture of the new gateway for a while now"
    title = derive_title(text)
    assert title == "I have been thinking about the architecture of…"
    assert len(title) <= 48


def test_a_long_sentence_prefers_a_whole_clause() -> None:
    text = "Can you summarise yesterday's standup notes, then draft an email to the team about it"
    assert derive_title(text) == "Can you summarise yesterday's standup notes"


def test_cjk_text_is_cut_by_characters() -> None:
    text = (
        "我想知道如何在北京找到一个好的餐馆并且价格不要太贵最好是在市中心附近的地方吧我想知道如何"
    )
    title = derive_title(text, max_len=20)
    assert title == text[:19] + "…"


def test_a_single_overlong_word_is_hard_cut() -> None:
    assert derive_title("x" * 200, max_len=12) == "X" * 1 + "x" * 10 + "…"


def test_a_max_len_past_the_channel_name_limit_still_gives_a_valid_name() -> None:
    title = derive_title("0" * 101, max_len=101)  # found by Hypothesis
    assert len(title) == 100 and validate_name(title) == title


def test_a_tiny_max_len_is_rejected() -> None:
    with pytest.raises(ValueError):
        derive_title("hello", max_len=5)


@settings(max_examples=400)
@given(any_text, st.integers(min_value=10, max_value=120))
def test_a_derived_title_is_never_empty_never_too_long_and_one_line(
    text: str, max_len: int
) -> None:
    title = derive_title(text, max_len)
    assert title and title == title.strip()
    assert len(title) <= max_len
    assert not LINE_BREAKS & set(title)
    assert validate_name(title) == title  # always usable as a channel name


@settings(max_examples=400)
@given(any_text, st.integers(min_value=10, max_value=120))
def test_deriving_a_title_from_a_title_keeps_it(text: str, max_len: int) -> None:
    title = derive_title(text, max_len)
    if "…" not in title:
        assert derive_title(title, max_len) == title


@given(any_text)
def test_derive_title_is_deterministic(text: str) -> None:
    assert derive_title(text) == derive_title(text)


@pytest.mark.parametrize(
    ("raw", "title"),
    [
        ('"Debugging the gateway."', "Debugging the gateway"),
        ("Title: Fix the flaky test", "Fix the flaky test"),
        ("**Title:** “Berlin weather”", "Berlin weather"),
        ("<think>the user wants…</think>\nTrip planning!", "Trip planning"),
        ("Title:\nRecipe ideas", "Recipe ideas"),
        ("  'Quarterly numbers'  \nsome explanation the model added", "Quarterly numbers"),
        ("# Heading title", "Heading title"),
    ],
)
def test_clean_generated_title_examples(raw: str, title: str) -> None:
    assert clean_generated_title(raw) == title


@pytest.mark.parametrize("raw", ["", "   ", '""', "Title:", "<think>only thinking</think>", "…"])
def test_an_empty_generated_title_is_none(raw: str) -> None:
    assert clean_generated_title(raw) is None


def test_a_generated_paragraph_is_not_a_title() -> None:
    assert clean_generated_title("word " * 100) is None


def test_a_long_generated_title_is_trimmed_to_sixty_characters() -> None:
    raw = "A very long title that a model produced because it ignored the instructions given"
    title = clean_generated_title(raw)
    assert title is not None and len(title) <= 60 and title.endswith("…")


@given(st.text(max_size=300))
def test_a_cleaned_generated_title_is_none_or_a_valid_channel_name(raw: str) -> None:
    title = clean_generated_title(raw)
    if title is not None:
        assert len(title) <= 60
        assert validate_name(title) == title


# ---- titles awaited for auto threads ----------------------------------------------------

lanes = st.builds(lambda n: ("android:default", f"t_{n}"), st.integers(min_value=1, max_value=40))


@given(
    st.lists(st.tuples(st.sampled_from(["add", "take"]), lanes), max_size=80),
    st.integers(min_value=1, max_value=8),
)
def test_pending_titles_never_hold_more_than_their_limit_and_keep_the_newest(
    steps: list[tuple[str, tuple[str, str | None]]], limit: int
) -> None:
    pending = PendingTitles(limit)
    for op, lane in steps:
        if op == "add":
            pending.add(lane, f"opening of {lane[1]}")
            assert lane in pending
        else:
            pending.take(lane)
            assert lane not in pending
        assert len(pending) <= limit


def test_a_taken_title_is_forgotten() -> None:
    pending = PendingTitles()
    pending.add(("android:default", "t_1"), "plan the trip")
    assert pending.take(("android:default", "t_1")) == "plan the trip"
    assert pending.take(("android:default", "t_1")) is None and len(pending) == 0


def test_pruning_forgets_the_threads_whose_run_is_gone() -> None:
    pending = PendingTitles()
    running, gone = ("android:default", "t_1"), ("android:default", "t_2")
    pending.add(running, "still going")
    pending.add(gone, "cancelled long ago")
    assert pending.prune(lambda lane: lane == running) == 1
    assert running in pending and gone not in pending


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        PendingTitles(0)

"""The shared JSON encoders: json.dumps's text, built once, and always UTF-8 encodable."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from canonical.jsonenc import (
    TooDeep,
    dumps,
    dumps_ascii,
    has_lone_surrogate,
    loads_bounded,
    scrub_surrogates,
)

# Every JSON document, strings from the whole code-point range (lone surrogates included).
_any_text = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF))
_clean_text = st.text(st.characters(blacklist_categories=("Cs",)))


def _documents(text: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
        max_leaves=12,
    )


@given(_documents(_clean_text))
def test_without_lone_surrogates_dumps_is_json_dumps_compact_and_non_ascii(doc: Any) -> None:
    assert dumps(doc) == json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


@given(_documents(_any_text))
def test_dumps_ascii_is_json_dumps_compact_ascii(doc: Any) -> None:
    assert dumps_ascii(doc) == json.dumps(doc, separators=(",", ":"))


@given(_documents(_any_text))
def test_dumps_always_encodes_as_utf8_and_reads_back(doc: Any) -> None:
    text = dumps(doc)
    assert text == scrub_surrogates(json.dumps(doc, ensure_ascii=False, separators=(",", ":")))
    json.loads(text.encode("utf-8"))  # a surrogate left in would raise here


def test_a_lone_surrogate_becomes_the_replacement_character_and_a_split_pair_rejoins() -> None:
    assert dumps({"t": "a\ud800b"}) == '{"t":"a\ufffdb"}'
    assert scrub_surrogates("\ud83d\ude00") == "\U0001f600"
    assert scrub_surrogates("\ude00\ud83d") == "\ufffd\ufffd"


def test_objects_json_cannot_encode_are_still_a_type_error() -> None:
    with pytest.raises(TypeError):
        dumps({"x": object()})


@pytest.mark.parametrize(
    ("raw", "lone"),
    [
        ('{"t":"plain"}', False),
        ('{"t":"\\ud83d\\ude00"}', False),  # an escaped pair is one character
        ('{"t":"\\\\ud800"}', False),  # an escaped backslash, then text
        ('{"t":"\\ud800"}', True),
        ('{"t":"\\uDC00x"}', True),
        ('{"t":["ok",{"k":"\\udfff"}]}', True),
    ],
)
def test_lone_surrogates_are_found_only_where_an_escape_makes_one(raw: str, lone: bool) -> None:
    assert has_lone_surrogate(raw, json.loads(raw)) is lone


def _nested(depth: int, opener: str = "[", closer: str = "]") -> str:
    return opener * depth + closer * depth


@given(_documents(_clean_text))
def test_loads_bounded_reads_what_json_loads_reads(doc: Any) -> None:
    text = json.dumps(doc)
    assert loads_bounded(text, 64) == json.loads(text)


@pytest.mark.parametrize("depth", [1, 2, 64])
def test_nesting_up_to_the_limit_is_read(depth: int) -> None:
    assert loads_bounded(_nested(depth), 64) is not None
    # Brackets inside strings are text, not nesting: a walk, still accepted.
    assert loads_bounded(json.dumps({"code": "[{" * 200, "x": [[1]]}), depth + 2)


@pytest.mark.parametrize("depth", [65, 500, 1_000, 100_000])
def test_deeper_nesting_is_too_deep_never_a_recursion_error(depth: int) -> None:
    for text in (_nested(depth), '{"a":' * depth + "1" + "}" * depth):
        with pytest.raises(TooDeep) as refused:
            loads_bounded(text, 64)
        assert isinstance(refused.value, ValueError)  # callers catching ValueError see it
    with pytest.raises(ValueError):  # unfinished as well: still a ValueError
        loads_bounded(_nested(depth)[:-1], 64)


def test_too_deep_is_found_however_the_nesting_is_spread() -> None:
    wide = json.dumps([[0] * 100, {"k": [[[[1]]]]}])  # 7 brackets, 6 deep
    assert loads_bounded(wide, 6) == json.loads(wide)
    with pytest.raises(TooDeep):
        loads_bounded(wide, 5)

"""Compact JSON for frames, bus messages and stored events: built once, UTF-8 safe.

``json.JSONEncoder.encode`` builds a new C encoder on every call, about half the cost of
encoding a small frame; these encoders are built once (``canonical.fastpath.jsonenc``).
Python strings may hold lone surrogates (a model's ``"\\ud800"`` escape decodes to one)
that UTF-8 cannot carry:
``dumps`` replaces them with U+FFFD, so its text always encodes, whoever reads it next
(a socket, SQLite, the bus). Surrogate-free input gives exactly ``json.dumps``'s text
with the same options.
"""

from __future__ import annotations

import json
from typing import Any

from . import fastpath
from .fastpath import jsonenc as _fast

# c_make_encoder built once (canonical.fastpath), or the standard library's encoder when
# that fast path is off: the same text either way.
_build = _fast.build if fastpath.enabled("jsonenc") else _fast.stock
_dumps_raw = _build(ensure_ascii=False)
dumps_ascii = _build(ensure_ascii=True)
"""Compact JSON with every non-ASCII character escaped (lone surrogates too)."""


def scrub_surrogates(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (a split pair is rejoined)."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def dumps_clean(obj: Any) -> tuple[str, bool]:
    """Compact JSON, non-ASCII kept as is, always encodable as UTF-8; and whether a lone
    surrogate had to be replaced (the text then no longer says exactly what ``obj`` does)."""
    text = _dumps_raw(obj)
    if text.isascii():  # O(1): CPython keeps the flag
        return text, False
    try:
        text.encode()
    except UnicodeEncodeError:
        return scrub_surrogates(text), True
    return text, False


def dumps(obj: Any) -> str:
    """Compact JSON, non-ASCII kept as is, always encodable as UTF-8."""
    return dumps_clean(obj)[0]


def has_lone_surrogate(raw: str, parsed: Any) -> bool:
    """Whether ``parsed`` (``json.loads(raw)`` of UTF-8 text) holds a lone surrogate.

    Only a ``\\uD800``–``\\uDFFF`` escape can produce one, so text without such an escape
    costs one substring search.
    """
    if "\\ud" not in raw and "\\uD" not in raw:
        return False
    try:
        _dumps_raw(parsed).encode()
    except UnicodeEncodeError:
        return True
    return False


class TooDeep(ValueError):
    """A JSON document nested deeper than allowed."""


def loads_bounded(text: str, max_depth: int) -> Any:
    """``json.loads``, refusing with :class:`TooDeep` (a ValueError) a document nested more
    than ``max_depth`` arrays and objects deep.

    ``json.loads`` recurses once per level: about a thousand levels (2 KB of brackets)
    raise RecursionError, and fewer would still exhaust the stack of whatever handles the
    document next (its encoder, the plugin). A text with at most ``max_depth`` brackets
    cannot nest deeper, so an ordinary frame costs two ``str.count`` and no walk.
    """
    if text.count("[") + text.count("{") <= max_depth:
        return json.loads(text)
    try:
        value = json.loads(text)
    except RecursionError:
        raise TooDeep(f"nested deeper than {max_depth} levels") from None
    if _deeper_than(value, max_depth):
        raise TooDeep(f"nested deeper than {max_depth} levels")
    return value


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` holds arrays/objects more than ``limit`` deep (no recursion)."""
    if not isinstance(value, dict | list):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False

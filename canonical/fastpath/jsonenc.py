"""Compact JSON encoders built once from CPython's private C encoder factory.

Measured: ``json.JSONEncoder.encode`` builds a new C encoder on every call, about half the
cost of encoding a small frame (a pheby ``ready``: 4.3 → 2.2 µs); every frame, bus message
and stored event is encoded through here (``bench/fanout.py``, edge CPU per delivery).

``json.encoder.c_make_encoder`` is not public API: its positional arguments are CPython's
(3.11: markers, default, encoder, indent, key separator, item separator, sort_keys,
skipkeys, allow_nan). :func:`contract` checks the factory is there and encodes a sample
exactly as ``json.dumps`` does; the stock path is ``json.JSONEncoder(...).encode``.
"""

from __future__ import annotations

import json
import json.encoder
import sys
from collections.abc import Callable
from typing import Any

_Encoder = Callable[[Any, int], "list[str] | tuple[str, ...]"]

# Every kind of value the project encodes, and the escapes both encoders must agree on.
_SAMPLE: Any = {
    "s": 'quote " backslash \\ nl \n é ☃ \U0001f600',
    "n": [0, -1, 1.5, 1e300, True, False, None],
    "o": {"nested": [{"k": "v"}], "": []},
}
# json.dumps(_SAMPLE, separators=(",", ":")) as CPython writes it, by ensure_ascii (written
# out: the standard library's own encoder goes through c_make_encoder too).
_EXPECTED = {
    False: '{"s":"quote \\" backslash \\\\ nl \\n é ☃ \U0001f600",'
    '"n":[0,-1,1.5,1e+300,true,false,null],"o":{"nested":[{"k":"v"}],"":[]}}',
    True: '{"s":"quote \\" backslash \\\\ nl \\n \\u00e9 \\u2603 \\ud83d\\ude00",'
    '"n":[0,-1,1.5,1e+300,true,false,null],"o":{"nested":[{"k":"v"}],"":[]}}',
}


def stock(ensure_ascii: bool) -> Callable[[Any], str]:
    """The standard library's encoder with the same options (``json.dumps``'s text)."""
    return json.JSONEncoder(
        ensure_ascii=ensure_ascii, check_circular=False, separators=(",", ":")
    ).encode


def build(ensure_ascii: bool) -> Callable[[Any], str]:
    """An encoder made once with ``c_make_encoder``: the same text as :func:`stock`."""
    fallback = json.JSONEncoder(
        ensure_ascii=ensure_ascii, check_circular=False, separators=(",", ":")
    )
    make = json.encoder.c_make_encoder  # type: ignore[attr-defined]  # private
    strings = (
        json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    )
    # markers=None: no cycle check (our documents are trees; a cycle is a RecursionError).
    encoder: _Encoder = make(None, fallback.default, strings, None, ":", ",", False, False, True)

    def encode(obj: Any) -> str:
        return "".join(encoder(obj, 0))

    return encode


def contract() -> str | None:
    """None when ``c_make_encoder`` exists, takes these arguments and encodes as
    ``json.dumps`` does; else what is wrong."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return "json.encoder.c_make_encoder is missing (no C accelerator)"
    if not callable(make):
        return "json.encoder.c_make_encoder is not callable"
    for ensure_ascii in (False, True):
        try:
            ours = build(ensure_ascii)(_SAMPLE)
        except TypeError as exc:  # a changed argument list
            return f"c_make_encoder no longer takes CPython 3.11's arguments ({exc})"
        if ours != _EXPECTED[ensure_ascii]:
            return f"c_make_encoder's text differs from json.dumps (ensure_ascii={ensure_ascii})"
    return None


def version() -> str:
    return sys.version.split()[0]


__all__ = ["build", "contract", "stock", "version"]

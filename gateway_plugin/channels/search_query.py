"""Parse a user's search box text into qualifiers and FTS5-safe match expressions.

User text never reaches FTS5 syntax: every term becomes a double-quoted string (a phrase),
so operators like ``NEAR(``, ``*``, ``^``, ``:`` or ``OR`` are searched for literally and
no input can raise an FTS5 syntax error.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

Role = Literal["user", "assistant"]

MAX_QUERY_CHARS: Final = 512
MAX_TERMS: Final = 16
TRIGRAM_MIN: Final = 3  # the trigram tokenizer cannot match anything shorter
_ROLES: Final[dict[str, Role]] = {"user": "user", "assistant": "assistant"}
_CJK_RANGES: Final = (
    (0x3000, 0x303F),  # CJK symbols and punctuation
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xAC00, 0xD7AF),  # Hangul syllables
    (0x20000, 0x2A6DF),  # CJK extension B
)


@dataclass(frozen=True)
class ParsedQuery:
    terms: tuple[str, ...] = ()  # free-text terms; a quoted phrase stays one term
    roles: tuple[Role, ...] = ()  # empty = user and assistant
    channels: tuple[str, ...] = ()  # raw `channel:` values (names or chat ids)

    @property
    def is_empty(self) -> bool:
        return not self.terms

    @property
    def has_cjk(self) -> bool:
        return any(contains_cjk(t) for t in self.terms)

    def word_match(self) -> str | None:
        """MATCH expression for the unicode61 table. Terms without a letter or digit are
        dropped: unicode61 indexes nothing else, so they could never match there."""
        return match_expression(t for t in self.terms if any(c.isalnum() for c in t))

    def trigram_match(self) -> str | None:
        """MATCH expression for the trigram table (terms of at least three characters)."""
        return match_expression(self.long_terms)

    @property
    def long_terms(self) -> tuple[str, ...]:
        return tuple(t for t in self.terms if len(t) >= TRIGRAM_MIN)

    @property
    def short_terms(self) -> tuple[str, ...]:
        """Terms too short for the trigram index; callers match these with LIKE."""
        return tuple(t for t in self.terms if len(t) < TRIGRAM_MIN)


def contains_cjk(text: str) -> bool:
    return any(lo <= ord(ch) <= hi for ch in text for lo, hi in _CJK_RANGES)


def quote_term(term: str) -> str:
    """One FTS5 string literal: inside double quotes only a doubled quote is special."""
    return '"' + term.replace('"', '""') + '"'


def match_expression(terms: Iterable[str]) -> str | None:
    """Quoted terms joined by spaces (FTS5's implicit AND); None when there are none."""
    quoted = [quote_term(t) for t in terms if t]
    return " ".join(quoted) if quoted else None


def _sanitise(raw: str) -> str:
    text = raw[:MAX_QUERY_CHARS] if isinstance(raw, str) else ""
    # Control, format-less separator and surrogate chars become spaces: NUL would end the
    # FTS5 string early, and line breaks have no meaning in a one-line query.
    return "".join(
        " " if unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp") else ch for ch in text
    )


def _read_value(text: str, pos: int) -> tuple[str, int]:
    """Read a bare word or a "quoted value" starting at ``pos``; returns (value, end)."""
    if pos < len(text) and text[pos] == '"':
        close = text.find('"', pos + 1)
        end = len(text) if close == -1 else close
        return text[pos + 1 : end], min(end + 1, len(text))
    end = pos
    while end < len(text) and not text[end].isspace():
        end += 1
    return text[pos:end], end


def parse_query(raw: str) -> ParsedQuery:
    """Split ``role:user|assistant`` and ``channel:<name|"quoted name"|chat_id>`` qualifiers
    from free text. Unknown ``role:`` values stay free text; the input is capped at
    ``MAX_QUERY_CHARS`` characters and ``MAX_TERMS`` terms."""
    text = _sanitise(raw)
    terms: list[str] = []
    roles: list[Role] = []
    channels: list[str] = []
    pos = 0
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        lowered = text[pos : pos + 8].lower()
        if lowered.startswith("channel:"):
            value, end = _read_value(text, pos + 8)
            if value.strip():
                channels.append(value.strip())
                pos = end
                continue
        elif lowered.startswith("role:"):
            value, end = _read_value(text, pos + 5)
            role = _ROLES.get(value.lower())
            if role is not None:
                if role not in roles:
                    roles.append(role)
                pos = end
                continue
        value, pos = _read_value(text, pos)
        value = " ".join(value.split())
        if value and len(terms) < MAX_TERMS:
            terms.append(value)
    return ParsedQuery(terms=tuple(terms), roles=tuple(roles), channels=tuple(channels))

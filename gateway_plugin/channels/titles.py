"""Thread titles: an instant one from the user's own words, and cleanup of a model's one.

Hermes 0.19.0 has no deterministic ``derive_title``; this is ours. It must be pure and
stable (the same message always gives the same name on every device and every replay).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Final

from canonical.model import Lane
from gateway_plugin.channels.store import MAX_NAME_LEN

FALLBACK_TITLE: Final = "New thread"
# Far more auto threads than can have a first run going at once; only a run Hermes never
# reports the end of leaves one behind, and then the oldest goes first.
MAX_PENDING_TITLES: Final = 1024
MAX_GENERATED_LEN: Final = 60
ELLIPSIS: Final = "…"

_FENCE_LINE = re.compile(r"^[ \t]*(?:`{3,}|~{3,}).*$", re.MULTILINE)
_IMAGE_OR_LINK = re.compile(r"!?\[([^\]\n]*)\]\([^)\n]*\)")
_URL = re.compile(r"\b(?:https?|ftp)://(?:www\.)?([^/\s?#:]+)\S*", re.IGNORECASE)
_LEADING_MARKUP = re.compile(r"^(?:#{1,6}\s+|>\s*|[-*+•]\s+|\d{1,3}[.)]\s+|\[[ xX]\]\s+)")
_SLASH_COMMAND = re.compile(r"^/[\w@.-]+(?:\s+|$)")
_EMPHASIS = re.compile(r"\*\*|__|~~|[`*]")
# A sentence ends at ./!/?/… before whitespace, or at a CJK full stop anywhere.
_SENTENCE_END = re.compile(r"[.!?…]+(?=\s)|[。！？]+")
_CLAUSE_BREAK = re.compile(r"[,;:]\s|\s[-–—]\s|[，；：、]")
_TRAILING = ".,;:-–—·…，。；：、 "
_CJK_RANGES: Final = ((0x3040, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7AF))
_THINK_BLOCK = re.compile(
    r"<(think|thinking|reasoning|thought)>.*?(?:</\1>|$)", re.IGNORECASE | re.DOTALL
)
_TITLE_PREFIX = re.compile(r"^(?:#+\s*)?(?:\*\*)?\s*title\s*(?:\*\*)?\s*[:：]\s*(?:\*\*)?", re.I)
_QUOTES = "\"'`“”‘’«»「」『』"


def _has_word(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


def _is_cjk(ch: str) -> bool:
    return any(lo <= ord(ch) <= hi for lo, hi in _CJK_RANGES)


def _printable(text: str) -> str:
    # Control chars other than newlines become spaces so they can never reach a title.
    return "".join(
        " " if unicodedata.category(ch) in ("Cc", "Cs") and ch != "\n" else ch for ch in text
    )


def _clean_line(line: str) -> str:
    # Iterate to a fixpoint: stripping one layer can expose another ("> - /cmd **x**"),
    # and a fixpoint is what makes derive_title idempotent. Every step shortens the line.
    while True:
        before = line
        line = _IMAGE_OR_LINK.sub(r"\1", line)
        line = _URL.sub(r"\1", line)
        line = _EMPHASIS.sub("", line)
        line = " ".join(line.split())
        line = _LEADING_MARKUP.sub("", line)
        line = _SLASH_COMMAND.sub("", line)
        if line == before:
            return line


def _first_sentence(line: str) -> str | None:
    start = 0
    for match in _SENTENCE_END.finditer(line):
        sentence = line[start : match.end()].strip()
        if _has_word(sentence):
            return sentence
        start = match.end()
    rest = line[start:].strip()
    return rest if _has_word(rest) else None


def _shorten(text: str, max_len: int) -> str:
    if len(text) <= max_len:
        return text
    # Prefer a whole clause when one ends late enough to still say something.
    breaks = [m.start() for m in _CLAUSE_BREAK.finditer(text, 0, max_len + 1)]
    clause = text[: breaks[-1] + 1].rstrip(_TRAILING) if breaks else ""
    if len(clause) >= max(12, max_len // 2) and _has_word(clause):
        return clause
    budget = max_len - len(ELLIPSIS)
    cut = text.rfind(" ", 0, budget + 1)
    # CJK has no spaces: cut by characters there (and inside one over-long word).
    if cut < budget // 2 or _is_cjk(text[budget - 1]):
        cut = budget
    head = text[:cut].rstrip(_TRAILING)
    return (head or text[:budget]) + ELLIPSIS


def _capitalise(text: str) -> str:
    first = text[:1].upper()
    # "ß".upper() == "SS" would change the length; leave such letters alone.
    return first + text[1:] if len(first) == 1 else text


def derive_title(text: str, max_len: int = 48) -> str:
    """A short title from the user's opening message: its first sentence or clause, cut
    at a word boundary (characters for CJK) to ``max_len`` with "…". Never empty, and
    never longer than a channel name may be (the title names the thread)."""
    if max_len < len(FALLBACK_TITLE):
        raise ValueError(f"max_len must be at least {len(FALLBACK_TITLE)}")
    max_len = min(max_len, MAX_NAME_LEN)
    title = _derive_once(text, max_len)
    # Trimming can expose markup again ("/cmd… more" -> "/cmd"); settle on a fixpoint so
    # re-deriving a title (replays, renames) never changes it.
    for _ in range(3):
        if ELLIPSIS in title or (again := _derive_once(title, max_len)) == title:
            break
        title = again
    return title


def _derive_once(text: str, max_len: int) -> str:
    body = _FENCE_LINE.sub("", _printable(text))
    for raw_line in body.splitlines():
        sentence = _first_sentence(_clean_line(raw_line))
        if sentence is None:
            continue
        title = _shorten(sentence.rstrip(_TRAILING), max_len)
        if _has_word(title):
            return _capitalise(title)
    return FALLBACK_TITLE


def clean_generated_title(raw: str) -> str | None:
    """Sanitise a model-produced title, or None when nothing usable is left."""
    text = _THINK_BLOCK.sub("", _printable(raw or ""))
    for line in text.splitlines():
        line = " ".join(line.split())
        line = _TITLE_PREFIX.sub("", line).strip()
        line = _EMPHASIS.sub("", line).strip(_QUOTES + " ").strip()
        line = _LEADING_MARKUP.sub("", line).rstrip(_TRAILING + "!?！？").strip(_QUOTES + " ")
        if not _has_word(line):
            continue
        # Many times the budget means prose, not a title: keep the derived name instead.
        if len(line) > 3 * MAX_GENERATED_LEN:
            return None
        return _shorten(line, MAX_GENERATED_LEN)
    return None


class PendingTitles:
    """Auto threads waiting for the model's title once their first run ends: the user's
    opening words, by lane. An entry lives only as long as that run, and never more than
    ``limit`` of them at once."""

    def __init__(self, limit: int = MAX_PENDING_TITLES) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self._texts: dict[Lane, str] = {}  # oldest first

    def __len__(self) -> int:
        return len(self._texts)

    def __contains__(self, lane: object) -> bool:
        return lane in self._texts

    def add(self, lane: Lane, text: str) -> None:
        self._texts.pop(lane, None)
        self._texts[lane] = text
        while len(self._texts) > self.limit:
            del self._texts[next(iter(self._texts))]

    def take(self, lane: Lane) -> str | None:
        """The opening words, forgotten: the run ended (whether or not it gets a title)."""
        return self._texts.pop(lane, None)

    def prune(self, is_running: Callable[[Lane], bool]) -> int:
        """Forget threads whose run is gone without a word; how many there were."""
        gone = [lane for lane in self._texts if not is_running(lane)]
        for lane in gone:
            del self._texts[lane]
        return len(gone)

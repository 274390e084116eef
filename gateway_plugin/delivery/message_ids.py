"""One id per message across live frames, replay, history and search (pure, no I/O).

A message's id is given when the plugin accepts the send, before Hermes has stored
anything: the user's message is ``u-<client_id>`` (iris) and the reply ``draft-<run_id>``,
the id ``message.start`` announces and the final message keeps. Hermes' transcript
(state.db) numbers its rows itself and stores none of our ids, so each send is recorded
in outbox.db (`SentMessage`: its ids, when, its text's length and digest) and a page read
from the transcript is mapped back: a user row is the next recorded send of the lane whose
text it ends with (Hermes may store inlined files before it), the assistant message after
it is that send's run. Rows no send accounts for (turns from before the record existed,
Hermes' own resumes) keep their transcript id ``m<row>``.
"""

from __future__ import annotations

import hashlib
from array import array
from dataclasses import dataclass

from canonical.model import Json

# Hermes stores the user turn a moment after the send is recorded; a row older than a send
# by more than this (clocks of one machine) is not that send's.
CLOCK_SKEW_S = 5.0


@dataclass(frozen=True)
class SentMessage:
    message_id: str
    run_id: str | None
    created: float
    text_len: int
    text_sha: str


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def reply_id(run_id: str) -> str:
    """The id of a run's reply: its draft while streaming, the final message after."""
    return f"draft-{run_id}"


def _is_send(stored: str, sent: SentMessage) -> bool:
    if len(stored) < sent.text_len or text_digest(stored[len(stored) - sent.text_len :]) != (
        sent.text_sha
    ):
        return False
    prefix = stored[: len(stored) - sent.text_len]
    # Hermes' notes about inlined files come first, in brackets, then a blank line.
    return prefix == "" or (prefix.startswith("[") and prefix.endswith("\n\n"))


def assign(messages: list[Json], sends: list[SentMessage]) -> list[Json]:
    """`messages` (`Transcript.merged`: a lane's, chronological, with `at`) with the ids
    the devices saw live where a recorded send (oldest first) accounts for them."""
    out: list[Json] = []
    start = 0
    run_id: str | None = None  # the run of the user message just matched
    for message in messages:
        if message.get("role") == "user":
            at = float(message.get("at") or 0.0)
            run_id = None
            stored = str(message.get("text") or "")
            for index in range(start, len(sends)):
                sent = sends[index]
                if at < sent.created - CLOCK_SKEW_S:
                    break  # stored before this send (and so before every later one)
                if _is_send(stored, sent):
                    message = {**message, "message_id": sent.message_id}
                    run_id = sent.run_id
                    start = index + 1
                    break
        elif run_id is not None:
            message = {**message, "message_id": reply_id(run_id)}
            run_id = None
        out.append(message)
    return out


class Naming:
    """`assign`, one message at a time: the ids a lane's messages get, kept as they are
    added (by their first transcript row), so that a history page or a search names its
    messages without going over the whole lane again.

    A new list of sends (recorded later, or between others) changes only what looked at
    the sends it differs in: `resend` says from which message on to add them again."""

    def __init__(self, sends: list[SentMessage]) -> None:
        self.sends = list(sends)
        self.names: dict[int, str] = {}  # first row -> id, for the messages a send names
        self._start = 0  # `assign`'s `start` after the last message added
        self._run_id: str | None = None  # and its `run_id`
        # For each user message: its first row, `start` before it, and the last send it
        # looked at (len(sends): every one, and it would look at any added at the end).
        self._user_rows = array("q")
        self._user_starts = array("q")
        self._user_reach = array("q")

    def add(self, first_row: int, role: str, at: float, text: str) -> None:
        """The next message of the lane (as `assign` sees it: role, `at`, text)."""
        if role != "user":
            if self._run_id is not None:
                self.names[first_row] = reply_id(self._run_id)
                self._run_id = None
            return
        self._run_id = None
        sends = self.sends
        before = self._start
        reach = len(sends)
        for index in range(before, len(sends)):
            sent = sends[index]
            if at < sent.created - CLOCK_SKEW_S:
                reach = index
                break
            if _is_send(text, sent):
                self.names[first_row] = sent.message_id
                self._run_id = sent.run_id
                self._start = index + 1
                reach = index
                break
        self._user_rows.append(first_row)
        self._user_starts.append(before)
        self._user_reach.append(reach)

    def resend(self, sends: list[SentMessage]) -> int | None:
        """Take the lane's sends as they are now. The first row of the oldest message whose
        id may change (it looked at a send that differs): it and every message after it
        are forgotten, to be added again. None when no message's id can change."""
        sends = list(sends)
        common = 0
        for old, new in zip(self.sends, sends, strict=False):
            if old != new:
                break
            common += 1
        if common == len(self.sends) == len(sends):
            return None
        self.sends = sends
        for index, reach in enumerate(self._user_reach):
            if reach >= common:
                return self.forget_from(index)
        return None

    def forget_from(self, index: int) -> int:
        """Forget the user message `index` and every message after it; its first row."""
        first = self._user_rows[index]
        self._start = self._user_starts[index]
        self._run_id = None
        del self._user_rows[index:]
        del self._user_starts[index:]
        del self._user_reach[index:]
        self.names = {row: name for row, name in self.names.items() if row < first}
        return first


__all__ = ["CLOCK_SKEW_S", "Naming", "SentMessage", "assign", "reply_id", "text_digest"]

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


__all__ = ["CLOCK_SKEW_S", "SentMessage", "assign", "reply_id", "text_digest"]

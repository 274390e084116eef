"""The device client of the end-to-end tests: `canonical.client.DeviceClient` that checks
every frame it sends and receives against the committed schemas of its dialect.

A frame the server sends that does not match fails the test at the next `wait_for` (and
at `close`), naming the frame type and the field; a frame the test sends that does not
match is refused before it leaves. Tests that send malformed frames on purpose say so with
`off_schema()`, within which every frame sent must *not* match (the schema rejects what
the server rejects). `send_raw` is never checked: raw text is the test's own business.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from canonical.client import DeviceClient as PlainClient
from canonical.model import Json
from edge.dialects import detect
from tests.harness import frame_schemas


class FrameMismatch(AssertionError):
    """A frame on the wire does not match its dialect's schema."""


class DeviceClient(PlainClient):
    def __init__(self, url: str, *, ssl: Any = None) -> None:
        super().__init__(url, ssl=ssl)
        # Until a hello names it, the server answers in pheby's shape (an error).
        self.dialect: str | None = None
        self.mismatches: list[str] = []
        self.seen: dict[str, int] = {}  # server frame types received, with their counts
        self._off_schema = False

    def on_frame(self, frame: Json) -> None:
        kind = frame.get("type")
        if isinstance(kind, str):
            self.seen[kind] = self.seen.get(kind, 0) + 1
        problem = frame_schemas.problem(self.dialect or "pheby", "server", frame)
        if problem is not None:
            self.mismatches.append(problem)

    def raise_mismatches(self) -> None:
        if self.mismatches:
            raise FrameMismatch(
                f"{len(self.mismatches)} server frame(s) off the schema; first: "
                + self.mismatches[0]
            )

    async def send(self, frame: Json) -> None:
        dialect = self.dialect or (detect(frame) if isinstance(frame, dict) else None)
        problem = frame_schemas.problem(dialect or "pheby", "client", frame)
        if self._off_schema and problem is None:
            raise FrameMismatch(f"sent as off the schema, yet it matches: {str(frame)[:300]}")
        if not self._off_schema and problem is not None:
            raise FrameMismatch("a frame the test sends is off the schema: " + problem)
        if self.dialect is None and dialect is not None:
            self.dialect = dialect
        await super().send(frame)

    @contextlib.contextmanager
    def off_schema(self) -> Iterator[None]:
        """Frames sent within are malformed on purpose: each must fail the schema."""
        self._off_schema = True
        try:
            yield
        finally:
            self._off_schema = False

    async def wait_for(
        self, predicate: Callable[[Json], bool], timeout: float = 30.0, start: int = 0
    ) -> Json:
        self.raise_mismatches()
        try:
            return await super().wait_for(predicate, timeout, start)
        finally:
            self.raise_mismatches()

    async def close(self) -> None:
        await super().close()
        self.raise_mismatches()

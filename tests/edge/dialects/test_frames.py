"""The typed frames say what the codecs and the protocol pages say: the same frame types,
the same field sets, the same enumerations; and what the codecs build matches them."""

from __future__ import annotations

import re
from typing import Any, get_args, get_type_hints

import pytest

from canonical.model import Json
from canonical.protocol import PHEBY_ERROR_CODES
from edge.dialects import fields, frames, iris, iris_frames, pheby, pheby_frames
from edge.dialects.schema import UNIONS
from gateway_plugin.commands.interactive import (
    Interactive,
    Pending,
    approval_request,
    resolved_event,
)
from tests.edge import dialect_events as ev
from tests.harness.frame_schemas import frame_types, problem
from tests.harness.proc import REPO_ROOT


def members(dialect: str, direction: str) -> dict[str, Any]:
    """Frame type → its TypedDict."""
    union = get_args(get_args(UNIONS[(dialect, direction)])[0])
    return {get_args(get_type_hints(m)["type"])[0]: m for m in union}


def keys(typed: Any) -> set[str]:
    return set(typed.__required_keys__ | typed.__optional_keys__)


def test_a_client_frame_type_exists_for_every_frame_each_codec_decodes() -> None:
    for dialect, decoders in (("pheby", pheby._DECODERS), ("iris", iris._DECODERS)):
        assert frame_types(dialect, "client") == {"hello", "ping", *decoders}


def test_pheby_events_have_exactly_the_codec_field_sets_plus_an_echoed_request_id() -> None:
    typed = members("pheby", "server")
    for kind, wanted in pheby._FIELDS.items():
        assert set(wanted) <= keys(typed[kind]), kind
        assert keys(typed[kind]) - set(wanted) <= {"request_id"}, kind


def test_the_enumerations_are_the_codes_and_choices_the_server_uses() -> None:
    assert set(get_args(pheby_frames.PhebyErrorCode)) == PHEBY_ERROR_CODES
    assert get_args(frames.ApprovalChoice) == pheby.APPROVAL_CHOICES
    assert get_args(frames.ReasoningEffort) == pheby.REASONING_EFFORTS


def test_the_iris_error_codes_are_the_ones_its_page_and_the_media_page_list() -> None:
    page = (REPO_ROOT / "docs" / "protocol" / "iris.md").read_text(encoding="utf-8")
    table = page.split("### Errors", 1)[1].split("### Close codes", 1)[0]
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", table, re.MULTILINE))
    media = (REPO_ROOT / "docs" / "protocol" / "media.md").read_text(encoding="utf-8")
    assert "`checksum_mismatch`" in media
    assert set(get_args(iris_frames.IrisErrorCode)) == documented | {"checksum_mismatch"}


def encoded(dialect: str, events: list[Json]) -> list[Json]:
    codec = pheby.PhebyDialect() if dialect == "pheby" else iris.IrisDialect()
    return [f for f in (codec.encode_event(e) for e in events) if f is not None]


def sample_events() -> list[Json]:
    """Canonical events as the plugin's own code builds them."""
    desk = Interactive()
    base = {"lane": list(ev.LANE), "conversation_id": ev.CID, "run_id": "r" * 32}
    approval = Pending(
        "approval",
        "a1",
        ev.LANE,
        "key",
        {"session_key": "key", "command": "rm -rf x", "description": "d", "choices": ["once"]},
    )
    desk.add(approval)
    return ev.sequenced(
        [
            *ev.a_turn().values(),
            *ev.a_turn("failed", "it broke").values(),
            ev.a_notice(),
            ev.a_user_echo(),
            ev.a_tool_event("running"),
            ev.a_tool_event("completed"),
            ev.a_tool_event("failed"),
            ev.a_channel_event("channel.created", auto=False),
            ev.a_channel_event("channel.renamed"),
            ev.a_channel_event("channel.deleted"),
            approval_request(approval, base),
            resolved_event(approval, base, status="resolved", choice="once", request_id="q"),
            resolved_event(approval, base, status="expired", accepted=False),
        ]
    )


@pytest.mark.parametrize("dialect", ["pheby", "iris"])
def test_every_event_the_codec_encodes_matches_the_server_schema(dialect: str) -> None:
    out = encoded(dialect, [*sample_events(), ev.a_typing()])
    assert len(out) > 10
    for frame in out:
        assert problem(dialect, "server", frame) is None


@pytest.mark.parametrize("dialect", ["pheby", "iris"])
def test_error_frames_of_every_code_match_and_an_unknown_code_does_not(dialect: str) -> None:
    codes = get_args(
        pheby_frames.PhebyErrorCode if dialect == "pheby" else iris_frames.IrisErrorCode
    )
    for code in codes:
        assert problem(dialect, "server", fields.error_frame(code, "m", "r1")) is None
    wrong = problem(dialect, "server", fields.error_frame("no_such_code", "m"))
    assert wrong is not None and "'error' at error/code" in wrong


def test_a_mismatch_names_the_frame_type_and_the_field_at_fault() -> None:
    finished = ev.sequenced([ev.a_turn()["run.finished"]])[0]
    frame = {**encoded("pheby", [finished])[0], "status": "done"}
    said = problem("pheby", "server", frame)
    assert said is not None
    assert "pheby.server.json: frame 'run.finished' at status:" in said
    assert "'done' is not one of" in said
    extra = problem("iris", "client", {"type": "ping", "note": "x"})
    assert extra is not None and "Additional properties are not allowed" in extra
    unknown = problem("iris", "server", {"type": "no.such"})
    assert unknown is not None and "'no.such' is not in the schema" in unknown


def test_an_iris_send_needs_text_that_is_not_blank_unless_it_carries_files() -> None:
    send = {"type": "message.send", "chat_id": "android:default", "client_id": "c1"}
    assert problem("iris", "client", {**send, "text": "hi"}) is None
    assert problem("iris", "client", {**send, "media_refs": ["a" * 32]}) is None
    assert problem("iris", "client", {**send, "text": " ", "media_refs": ["a" * 32]}) is None
    assert problem("iris", "client", {**send, "text": "  "}) is not None
    assert problem("iris", "client", {**send, "media_refs": []}) is not None
    assert problem("iris", "client", send) is not None

"""What a device hears of a transcode's outcome (gateway_plugin.attachments.media_jobs)."""

from __future__ import annotations

import pytest

from gateway_plugin.attachments.media_jobs import outcome_event
from gateway_plugin.attachments.record import Attachment

RECORD = Attachment(
    "a" * 32, "inbound", "c" * 32, "android:default", None, "clip.mp4", "video/mp4", 10,
    "0" * 64, "video", False, 0.0, None, None, None, None,
)  # fmt: skip


@pytest.mark.parametrize("code", ["corrupt", "too_large", "unsupported"])
def test_a_failure_about_the_file_passes_the_workers_reason_on(code: str) -> None:
    event = outcome_event(RECORD, {"outcome": "failed", "code": code, "reason": "no video track"})
    assert (event["type"], event["code"], event["message"]) == (
        "media.failed",
        code,
        "no video track",
    )


@pytest.mark.parametrize("code", ["unsafe_path", "bad_payload", "not_configured"])
def test_a_failure_of_the_workers_set_up_names_no_server_path(code: str) -> None:
    reason = "/srv/hermes/attachments/t1/aaaa escapes the media root /data/media"
    event = outcome_event(RECORD, {"outcome": "failed", "code": code, "reason": reason})
    assert (
        event["code"] == code and "/srv" not in event["message"] and "/data" not in event["message"]
    )


def test_no_answer_from_the_worker_is_unavailable() -> None:
    assert outcome_event(RECORD, None)["code"] == "unavailable"

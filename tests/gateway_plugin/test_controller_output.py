"""Output Hermes sends that no device asked for (cron, background), through a real
controller on a real (memory) bus."""

from __future__ import annotations

from typing import Any

import pytest

from gateway_plugin.channel_store import ChannelError
from tests.gateway_plugin.test_hellos import _Rig, make_rig, rig

__all__ = ["make_rig", "rig"]  # the fixtures, shared with the hellos' tests

Json = dict[str, Any]
CRON_TEXT = "Cronjob Response: nightly\n(job_id: j1)\n-------------\n\nthe report"
HOME = ("android:default", None)


def _outbox(rig: _Rig) -> list[Json]:
    return rig.controller.outbox.since(0)[0]


async def test_cron_output_during_a_users_run_is_a_cron_run_of_its_own(rig: _Rig) -> None:
    controller = rig.controller
    run, accepted = controller.turns.accept(HOME, controller.conversation_id(HOME))
    controller.emit(accepted)
    controller.on_send(HOME, "Roses are red", None)
    controller.on_send(HOME, CRON_TEXT, {"job_id": "j1"})
    controller.on_send(HOME, ", violets are blue", None)
    assert controller.turns.active(HOME) is run and run.text() == "Roses are red, violets are blue"
    cron = [e for e in _outbox(rig) if e["type"] == "message.complete" and e["kind"] == "cron"]
    assert len(cron) == 1 and cron[0]["run_id"] != run.run_id
    assert cron[0]["text"] == CRON_TEXT and cron[0]["cron_job"]["id"] == "j1"


async def test_output_for_an_archived_or_unknown_lane_is_refused_and_stored_nowhere(
    rig: _Rig,
) -> None:
    controller = rig.controller
    channel = controller.channels.create_channel("Reports")
    controller.channels.delete(channel.chat_id)
    before = len(_outbox(rig))
    for lane in ((channel.chat_id, None), ("android:default", "t_999")):
        with pytest.raises(ChannelError):
            controller.on_send(lane, CRON_TEXT, {"job_id": "j1"})
    assert len(_outbox(rig)) == before

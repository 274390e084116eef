"""Pickers through a real controller on a real (memory) bus: a late answer is refused and
never reaches Hermes, and stale pickers are closed on every device."""

from __future__ import annotations

import asyncio

from canonical.model import Json
from gateway_plugin.commands.decisions import offered_models
from gateway_plugin.commands.interactive import PICKER_TTL_S
from tests.gateway_plugin.access.test_hellos import _Rig, make_rig, rig
from tests.gateway_plugin.commands.test_interactive import Clock
from tests.gateway_plugin.test_controller_output import _command, _outbox

__all__ = ["make_rig", "rig"]

LANE = ("android:default", None)
CHOICES = [{"value": "high", "label": "High", "is_current": False}]


class _Chosen:
    """Hermes' on_choice_selected: what the user picked, and Hermes' confirmation."""

    def __init__(self) -> None:
        self.values: list[str] = []

    def __call__(self, chat_id: str, value: str) -> str:
        self.values.append(value)
        return f"reasoning effort set to {value}"


async def _offer(rig: _Rig, chosen: _Chosen) -> str:
    rig.controller.desk.on_picker(
        LANE, "choice", "session-1", {"title": "Reasoning", "choices": CHOICES}, chosen
    )
    [offered] = [e for e in (await _outbox(rig)) if e["type"] == "picker.choice"][-1:]
    return str(offered["picker_id"])


def _select(picker_id: str, request_id: str) -> Json:
    return _command("picker.select", request_id, picker_id=picker_id, value="high")


async def _resolutions(rig: _Rig) -> list[tuple[str, str]]:
    return [
        (e["picker_id"], e["status"])
        for e in (await _outbox(rig))
        if e["type"] == "picker.resolved"
    ]


async def _resolved(rig: _Rig) -> list[tuple[str, str]]:
    """The resolutions once the controller has handled the answer (it broadcasts one)."""
    for _ in range(500):
        if await _resolutions(rig):
            break
        await asyncio.sleep(0.01)
    return await _resolutions(rig)


async def test_a_choice_reaches_hermes_until_its_expiry_and_is_refused_after_it(
    rig: _Rig,
) -> None:
    clock = rig.controller.desk.state.clock = Clock()
    chosen = _Chosen()
    in_time, late = await _offer(rig, chosen), await _offer(rig, chosen)
    clock.now += PICKER_TTL_S - 1
    await rig.submit(_select(in_time, "p1"))
    assert await _resolved(rig) == [(in_time, "resolved")] and chosen.values == ["high"]
    clock.now += 3 * 24 * 3600  # days later
    await rig.submit(_select(late, "p2"))
    [reply] = await rig.replies_for(1)
    assert reply["body"]["code"] == "not_found" and "expired" in reply["body"]["message"]
    assert chosen.values == ["high"]  # the late one never reached Hermes
    assert await _resolutions(rig) == [(in_time, "resolved"), (late, "expired")]  # on every device
    assert rig.controller.desk.state.pending == {}


async def test_stale_pickers_are_closed_on_every_device_and_forgotten(rig: _Rig) -> None:
    desk = rig.controller.desk
    clock = desk.state.clock = Clock()
    stale = [await _offer(rig, _Chosen()) for _ in range(3)]
    clock.now += PICKER_TTL_S
    fresh = await _offer(rig, _Chosen())  # offering a picker prunes the stale ones
    assert sorted(await _resolutions(rig)) == sorted((p, "expired") for p in stale)
    assert list(desk.state.pending) == [fresh]
    clock.now += PICKER_TTL_S
    assert desk.expire_due() == 1 and desk.state.pending == {}
    assert desk.snapshot(LANE)["pickers"] == []


def test_a_model_picker_accepts_exactly_the_provider_model_pairs_it_offered() -> None:
    request = {
        "providers": [
            {"slug": "custom", "models": ["scripted-model", "other-model"]},
            {"slug": "custom:proxy", "models": ["qwen3:8b"]},
            {"slug": "", "models": ["nameless"]},
        ]
    }
    assert offered_models(request) == {
        "custom:scripted-model": ("custom", "scripted-model"),
        "custom:other-model": ("custom", "other-model"),
        "custom:proxy:qwen3:8b": ("custom:proxy", "qwen3:8b"),
    }
    assert offered_models({}) == {}

"""The device registry (devices.db)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway_plugin.access.devices import DeviceRegistry, Hello


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[DeviceRegistry]:
    reg = DeviceRegistry(tmp_path / "android" / "devices.db")
    yield reg
    reg.close()


def test_a_hello_records_a_new_device_with_its_name_caps_and_push_token(
    registry: DeviceRegistry,
) -> None:
    device = registry.seen(
        "phone", name="Pixel", caps=["streaming", "push"], fcm_token="fcm-1", now=100.0
    )
    assert device.device_id == "phone"
    assert device.name == "Pixel"
    assert device.caps == ["streaming", "push"]
    assert device.fcm_token == "fcm-1"
    assert (device.created, device.last_seen) == (100.0, 100.0)
    assert device.revoked is False


def test_a_later_hello_refreshes_last_seen_but_keeps_created_name_and_push_token(
    registry: DeviceRegistry,
) -> None:
    registry.seen("phone", name="Pixel", fcm_token="fcm-1", now=100.0)
    again = registry.seen("phone", name="", caps=["streaming"], now=250.0)
    assert again.created == 100.0
    assert again.last_seen == 250.0
    assert again.name == "Pixel"
    assert again.fcm_token == "fcm-1"
    assert again.caps == ["streaming"]


def test_a_revoked_device_stays_revoked_when_it_says_hello_again(
    registry: DeviceRegistry,
) -> None:
    registry.seen("phone", now=1.0)
    revoked = registry.revoke("phone", now=5.0)
    assert revoked is not None and revoked.revoked and revoked.revoked_at == 5.0
    again = registry.seen("phone", name="Pixel", now=9.0)
    assert again.revoked is True
    assert registry.is_revoked("phone")


def test_revoking_twice_keeps_the_first_revocation_time(registry: DeviceRegistry) -> None:
    registry.seen("phone")
    registry.revoke("phone", now=5.0)
    again = registry.revoke("phone", now=50.0)
    assert again is not None and again.revoked_at == 5.0


def test_revoking_an_unknown_device_reports_none(registry: DeviceRegistry) -> None:
    assert registry.revoke("ghost") is None
    assert registry.is_revoked("ghost") is False


def test_devices_are_listed_most_recent_first_and_revoked_ones_can_be_left_out(
    registry: DeviceRegistry,
) -> None:
    registry.seen("old", now=1.0)
    registry.seen("new", now=3.0)
    registry.seen("gone", now=2.0)
    registry.revoke("gone")
    assert [d.device_id for d in registry.list()] == ["new", "gone", "old"]
    assert [d.device_id for d in registry.list(include_revoked=False)] == ["new", "old"]
    assert registry.counts() == {"active": 2, "revoked": 1}


def test_forgetting_a_revoked_device_lets_its_id_connect_again(registry: DeviceRegistry) -> None:
    registry.seen("phone")
    registry.revoke("phone")
    assert registry.forget("phone") is True
    assert registry.seen("phone").revoked is False


def test_push_addresses_can_be_set_later_and_the_wire_form_hides_them(
    registry: DeviceRegistry,
) -> None:
    registry.seen("phone")
    assert registry.set_push("phone", ntfy_topic="hermes-secret-topic") is True
    assert registry.set_push("ghost", fcm_token="x") is False
    wire = registry.get("phone")
    assert wire is not None
    assert wire.to_wire()["push"] == "ntfy"
    assert "hermes-secret-topic" not in str(wire.to_wire())


def test_the_registry_survives_a_restart_and_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "devices.db"
    first = DeviceRegistry(path)
    first.seen("phone", name="Pixel")
    first.revoke("phone")
    first.close()
    second = DeviceRegistry(path)
    try:
        device = second.get("phone")
        assert device is not None and device.revoked and device.name == "Pixel"
    finally:
        second.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


def test_a_batch_of_hellos_is_recorded_in_one_go_and_a_revoked_device_stays_revoked(
    registry: DeviceRegistry,
) -> None:
    registry.seen("old", name="Old phone", fcm_token="fcm-old", now=50.0)
    registry.revoke("old", now=60.0)
    seen = registry.seen_many(
        [
            Hello("phone", "Pixel", ["streaming"], "fcm-1"),
            Hello("old", "", [], None),
            Hello("desk", "Desk", [], None),
            Hello("phone", "", ["streaming", "push"], None),  # reconnected in the same batch
        ],
        now=100.0,
    )
    assert set(seen) == {"phone", "old", "desk"}
    assert seen["phone"].caps == ["streaming", "push"] and seen["phone"].name == "Pixel"
    assert seen["phone"].fcm_token == "fcm-1"
    assert seen["old"].revoked and seen["old"].name == "Old phone"
    assert seen["old"].fcm_token == "fcm-old" and seen["old"].last_seen == 100.0
    assert registry.get("desk") == seen["desk"]
    assert registry.seen_many([]) == {}


def test_recording_hellos_answers_which_of_them_are_revoked(registry: DeviceRegistry) -> None:
    registry.seen("old", name="Old phone", now=1.0)
    registry.revoke("old", now=2.0)
    # More devices than one statement may bind: every one recorded, the revoked one found.
    many = [Hello(f"dev{i:04d}", f"Dev {i}") for i in range(2000)]
    revoked = registry.record_hellos([*many, Hello("old"), Hello("dev0001", "Renamed")], now=5.0)
    assert revoked == {"old"}
    assert len(registry.list()) == 2001
    assert registry.get("dev0001") is not None and registry.get("dev0001").name == "Renamed"
    assert registry.get("old").revoked and registry.get("old").last_seen == 5.0
    assert registry.record_hellos([]) == set()


def test_dead_fcm_tokens_are_cleared_only_where_they_are_still_registered(
    registry: DeviceRegistry,
) -> None:
    registry.seen("phone", fcm_token="dead-1", now=1.0)
    registry.seen("tablet", fcm_token="live-2", now=2.0)
    registry.seen("old", fcm_token="dead-1", now=3.0)
    registry.set_push("old", fcm_token="new-3")  # registered a new token since
    assert registry.drop_fcm_tokens({"dead-1", "never-seen"}) == ["phone"]
    assert [(d.device_id, d.fcm_token) for d in registry.list()] == [
        ("old", "new-3"),
        ("tablet", "live-2"),
        ("phone", None),
    ]
    assert registry.drop_fcm_tokens(set()) == []

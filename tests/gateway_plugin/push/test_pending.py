"""gateway_plugin.push.pending: the embedded mode's record of deferred pushes."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from gateway_plugin.push.pending import PendingPush, PendingPushes, remaining_delay


def test_a_remembered_push_is_read_back_by_a_new_process(tmp_path: Path) -> None:
    store = PendingPushes(tmp_path / "pending_pushes.db")
    store.add("push:a", {"idempotency_key": "a", "cursor": "7"}, 1000.5)
    store.close()
    again = PendingPushes(tmp_path / "pending_pushes.db")
    assert again.all() == [PendingPush("push:a", {"idempotency_key": "a", "cursor": "7"}, 1000.5)]
    again.close()


def test_a_push_queued_again_keeps_its_first_due_time(tmp_path: Path) -> None:
    store = PendingPushes(tmp_path / "p.db")
    store.add("push:a", {"idempotency_key": "a"}, 10.0)
    store.add("push:a", {"idempotency_key": "a"}, 99.0)
    assert [push.not_before for push in store.all()] == [10.0]


def test_pushes_come_back_soonest_due_first_and_go_once_done(tmp_path: Path) -> None:
    store = PendingPushes(tmp_path / "p.db")
    store.add("push:late", {"idempotency_key": "late"}, 30.0)
    store.add("push:soon", {"idempotency_key": "soon"}, 20.0)
    assert [push.job_id for push in store.all()] == ["push:soon", "push:late"]
    store.remove("push:soon")
    assert [push.job_id for push in store.all()] == ["push:late"]
    assert store.clear() == 1
    assert store.all() == []


@given(st.floats(0, 1e10), st.floats(0, 1e10))
def test_the_remaining_delay_is_never_negative_and_never_later_than_due(
    not_before: float, now: float
) -> None:
    delay = remaining_delay(not_before, now)
    assert delay >= 0
    assert delay == (not_before - now if not_before > now else 0.0)

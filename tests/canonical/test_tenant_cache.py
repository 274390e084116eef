"""The edge's token-digest → tenant cache (canonical.tenant_cache), on its own."""

from __future__ import annotations

import time

import pytest

from canonical.tenant_cache import TTL_S, TenantCache


def test_nothing_is_kept_without_a_live_subscription() -> None:
    cache = TenantCache()
    cache.put("d1", "tenant-a", cache.generation)
    assert cache.get("d1") is None
    assert not cache.enabled


def test_a_lookup_is_kept_while_a_subscription_is_live() -> None:
    cache, sub = TenantCache(), object()
    cache.attach(sub)
    cache.put("d1", "tenant-a", cache.generation)
    assert cache.get("d1") == "tenant-a"
    assert cache.get("d2") is None


def test_entries_expire_after_the_ttl(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = TenantCache()
    cache.attach(object())
    now = time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: now)
    cache.put("d1", "tenant-a", cache.generation)
    monkeypatch.setattr(time, "monotonic", lambda: now + TTL_S - 0.01)
    assert cache.get("d1") == "tenant-a"
    monkeypatch.setattr(time, "monotonic", lambda: now + TTL_S)
    assert cache.get("d1") is None
    assert TTL_S <= 5.0


def test_an_invalidation_drops_the_digest_and_refuses_a_lookup_made_before_it() -> None:
    cache = TenantCache()
    cache.attach(object())
    cache.put("d1", "tenant-a", cache.generation)
    cache.put("d2", "tenant-b", cache.generation)
    in_flight = cache.generation  # a registry lookup started here...
    cache.forget("d1")  # ...and the token was retired before its answer came back
    assert cache.get("d1") is None and cache.get("d2") == "tenant-b"
    cache.put("d1", "tenant-a", in_flight)
    assert cache.get("d1") is None


def test_losing_or_regaining_a_subscription_clears_everything() -> None:
    cache, first, second = TenantCache(), object(), object()
    cache.attach(first)
    cache.put("d1", "tenant-a", cache.generation)
    cache.attach(second)  # it may have missed invalidations
    assert cache.get("d1") is None
    cache.put("d1", "tenant-a", cache.generation)
    cache.detach(second)
    assert cache.get("d1") is None and cache.enabled
    cache.detach(first)
    cache.put("d1", "tenant-a", cache.generation)
    assert cache.get("d1") is None and not cache.enabled

"""The cloud adapters' shared TTL cache: an entry is fresh only within its TTL after it was
stored, on our clock; a negative age (the clock stepped back) is not fresh either."""

from __future__ import annotations

from datetime import timedelta

from autoscaler.clouds.base import TtlCache
from tests.clouds.helpers import NOW, FakeClock


def test_an_entry_is_fresh_for_its_ttl_and_not_after_our_clock_steps_back() -> None:
    clock = FakeClock(NOW)
    cache: TtlCache[str, float] = TtlCache(timedelta(minutes=5), clock)
    cache.put("p3.2xlarge", 9.8)
    clock.advance(timedelta(minutes=4))
    assert cache.get("p3.2xlarge") == 9.8
    clock.advance(timedelta(seconds=61))
    assert cache.get("p3.2xlarge") is None
    cache.put("p3.2xlarge", 9.8)
    clock.advance(timedelta(hours=-3))  # an NTP step back: the entry reads 3 h in the future
    assert cache.get("p3.2xlarge") is None  # was served for the 3 h (audit 8, F3)


def test_stale_entries_go_as_new_keys_come_and_fresh_ones_stay() -> None:
    clock = FakeClock(NOW)
    cache: TtlCache[str, int] = TtlCache(timedelta(minutes=10), clock)
    for i in range(3000):  # a key that churns, an hour apart
        cache.put(f"hash-{i}", i)
        clock.advance(timedelta(hours=1))
    assert len(cache._items) == 1
    for i in range(500):  # 500 keys fresh together all stay, however many puts
        cache.put(f"type-{i}", i)
        cache.put(f"type-{i}", i)
    assert len(cache._items) == 500
    assert cache.missing(f"type-{i}" for i in range(500)) == []

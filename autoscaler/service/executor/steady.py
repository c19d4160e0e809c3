"""A drain's own "now", which a step of the wall clock does not move.

A drain's deadline and its checkpoint grace are stored as wall-clock times (they outlive
the process and are shown to operators), but how long a drain has waited is measured on
the monotonic clock once this process has seen it: a +1 h step of the wall clock (NTP, a
resumed VM) signalled and requeued jobs at once, an hour inside their wait, and a -1 h
step held a drain an hour past its deadline. A process that starts reads the wall clock
once per drain, which is all it can know.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable
from datetime import datetime, timedelta


class SteadyTimeline:
    """Per key: the wall time when this process first saw it, plus the monotonic clock
    since. Without a monotonic clock (a test or the simulator drives its own clock) it is
    the wall clock."""

    def __init__(self, monotonic: Callable[[], float] | None):
        self._monotonic = monotonic
        self._first: dict[Hashable, tuple[datetime, float]] = {}
        self._lock = threading.Lock()  # drain steps run on worker threads

    def now(self, key: Hashable, wall: datetime) -> datetime:
        if self._monotonic is None:
            return wall
        with self._lock:
            first = self._first.setdefault(key, (wall, self._monotonic()))
        return first[0] + timedelta(seconds=self._monotonic() - first[1])

    def keep_only(self, keys: Iterable[Hashable]) -> None:
        """Forget keys no longer live (drains that ended), so the map stays the fleet's size."""
        live = set(keys)
        with self._lock:
            self._first = {k: v for k, v in self._first.items() if k in live}

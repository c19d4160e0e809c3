"""Demand between ticks starts the next tick sooner (``tick.wake_after``, off by default).

A pending GPU pod seen by the Kubernetes watch, a spot notice or a new capacity request
would wait for the next tick, up to ``tick.interval``: the simulator put that wait at a
large share of the p95 gap to a 10 s scan on most windows, but waking raised it on the
busiest (docs/designs/benchmark-misses.md#wait), hence off by default. The next tick
starts ``wake_after`` after the last one began (bursts of arrivals share one tick, and a
tick is never run twice at once), unless the regular tick comes sooner. Demand seen while
a tick runs wakes one after it ends: that tick may have read the scheduler before it came.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

log = logging.getLogger(__name__)

# Moves the tick to ``at`` when it is due later; returns the time it was due, None if not moved.
Reschedule = Callable[[datetime], datetime | None]


# A woken tick starts at least this far ahead: the scheduler counts the ending tick as
# running until it has returned, and would skip (not delay) a run due before that.
LEAD = timedelta(seconds=1)


def wake_time(now: datetime, last_start: datetime | None, after: timedelta) -> datetime:
    """When a tick woken at ``now`` starts: ``after`` past the last tick's start, or now
    (plus ``LEAD``)."""
    soonest = now + LEAD
    return soonest if last_start is None else max(soonest, last_start + after)


class TickWaker:
    def __init__(self, after: timedelta | None, reschedule: Reschedule, now: Callable[[], datetime]):
        self.after, self._reschedule, self._now = after, reschedule, now
        self._lock = threading.Lock()
        self.last_start: datetime | None = None
        self.running = False
        self.waiting: str | None = None  # why a tick is wanted once the running one ends
        self.wakes = 0

    def started(self) -> None:
        with self._lock:
            self.last_start, self.running, self.waiting = self._now(), True, None

    def ended(self) -> None:
        with self._lock:
            self.running = False
            why, self.waiting = self.waiting, None
        if why is not None:
            self._wake(why)

    def wake(self, why: str) -> None:
        """Called from watch and notice threads; never raises into them."""
        if self.after is None:
            return
        with self._lock:
            if self.running:
                self.waiting = self.waiting or why
                return
        self._wake(why)

    def _wake(self, why: str) -> None:
        assert self.after is not None
        at = wake_time(self._now(), self.last_start, self.after)
        try:
            due = self._reschedule(at)
        except Exception:  # the regular tick still comes
            log.exception("could not start the next tick sooner (%s)", why)
            return
        if due is not None:
            self.wakes += 1
            log.info("%s: next tick at %s instead of %s (tick.wake_after %ss)", why,
                     f"{at:%H:%M:%S}", f"{due:%H:%M:%S}", f"{self.after.total_seconds():g}")

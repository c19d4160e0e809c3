"""Events between ticks start the next tick sooner.

* Demand (``tick.wake_after``, 10 s by default): a pending GPU pod seen by the Kubernetes
  watch, a spot notice, a new capacity request or a launch the cloud refused (in a pool
  decided alone; ``Service.work_finished``) would wait for the next tick, up to
  ``tick.interval``: the simulator put that wait at a large share of the p95 gap to a 10 s
  scan on most windows (waking raises it on some of the busiest, none past CA-like's but
  one already there: docs/designs/benchmark-misses.md#wait).
* Finished work (``tick.follow_up``, 10 s by default): a node whose apply created or
  started it, or whose bootstrap went through, in an executor worker moves on only at the
  next tick's advance (to its bootstrap, to READY). At a 30 s interval it waited up to a
  whole interval at each of those steps, with nothing left to do (the service decides
  which work follows up: ``Service.work_finished``).

The next tick starts that long after the last one began (bursts share one tick, and a tick
is never run twice at once), unless the regular tick comes sooner. An event seen while a
tick runs wakes one after it ends: that tick may have read the world before it came.
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
    def __init__(self, after: timedelta | None, reschedule: Reschedule, now: Callable[[], datetime],
                 follow_up: timedelta | None = None):
        self.after, self.follow_up_after = after, follow_up
        self._reschedule, self._now = reschedule, now
        self._lock = threading.Lock()
        self.last_start: datetime | None = None
        self.running = False
        # why a tick is wanted once the running one ends, how long after the last start, and
        # which setting says so
        self.waiting: tuple[str, timedelta, str] | None = None
        self.wakes = 0

    def started(self) -> None:
        with self._lock:
            self.last_start, self.running, self.waiting = self._now(), True, None

    def ended(self) -> None:
        with self._lock:
            self.running = False
            waiting, self.waiting = self.waiting, None
        if waiting is not None:
            self._wake(*waiting)

    def wake(self, why: str) -> None:
        """Demand (``tick.wake_after``). Called from watch and notice threads; never raises
        into them."""
        self._event(why, self.after, "tick.wake_after")

    def follow_up(self, why: str) -> None:
        """Finished work (``tick.follow_up``). Called from worker threads; never raises."""
        self._event(why, self.follow_up_after, "tick.follow_up")

    def _event(self, why: str, after: timedelta | None, setting: str) -> None:
        if after is None:
            return
        what = (why, after, setting)
        with self._lock:
            if self.running:
                if self.waiting is None or after < self.waiting[1]:
                    self.waiting = what
                return
        self._wake(*what)

    def _wake(self, why: str, after: timedelta, setting: str) -> None:
        at = wake_time(self._now(), self.last_start, after)
        try:
            due = self._reschedule(at)
        except Exception:  # the regular tick still comes
            log.exception("could not start the next tick sooner (%s)", why)
            return
        if due is not None:
            self.wakes += 1
            log.info("%s: next tick at %s instead of %s (%s %ss)", why, f"{at:%H:%M:%S}",
                     f"{due:%H:%M:%S}", setting, f"{after.total_seconds():g}")

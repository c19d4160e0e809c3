"""The launch backoff's rule, one for the service and the simulator.

Failures in a row into one (pool, type, zone, market) hold its launches for
``5 min x 2^(n-1)``, at most 30 min, counted from the n-th failure (docs/concepts/loop.md,
"Launch backoff"). The service reads the failures from the store
(``service/control/backoff.py``), the simulator as its launches are refused
(``sim/strategies/engine.py``); both count them with :class:`Streak` and ask
:func:`refusal_escalates` whether a spot refusal for want of stock counts at all.

Which spot refusals count (issue 33 item 2, docs/designs/benchmark-misses.md#wait):

=====================================================  ==========================================
pool                                                   a spot refusal for want of stock
=====================================================  ==========================================
``spot_fallback: on-demand`` and max_wait 0            counts: the jobs go on-demand at once, and
(the team's priority's default, or set)                each return to a dry zone is a refusal
                                                       that buys nothing
anything else (spot only, or jobs wait for spot)       does not count: only the pool's
                                                       ``capacity_error_backoff`` holds the
                                                       (type, zone), since the jobs can only wait
                                                       and a zone kept out after its outage
                                                       ended keeps them waiting
=====================================================  ==========================================
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from autoscaler.policy.models import Capacity, Priority

FIRST = timedelta(minutes=5)
CAP = timedelta(minutes=30)
# One apply or one bootstrap batch fails many nodes at once: same-cause failures this close
# together are one failure, so a failed 250-node apply counts 1, not 250 in a row.
SAME_FAILURE = timedelta(seconds=30)
# The codes of a spot launch refused for want of stock (AWS, Alibaba Cloud).
SPOT_NO_STOCK = frozenset({"InsufficientInstanceCapacity", "OperationDenied.NoStock"})
_DOUBLINGS = (CAP // FIRST).bit_length() + 1


def delay(count: int) -> timedelta:
    """How long the ``count``-th failure in a row holds launches."""
    if count > _DOUBLINGS:  # 5 min x 2^249 overflows timedelta; the cap came long before
        return CAP
    return min(FIRST * (1 << max(count - 1, 0)), CAP)


def refusal_escalates(capacity: Capacity, priority: Priority) -> bool:
    """Whether a spot refusal for want of stock counts towards the launch backoff: only
    where the pool goes on-demand at once (the table above)."""
    return (capacity.spot_fallback == "on-demand"
            and capacity.wait_limit(priority) == timedelta(0))


@dataclass(frozen=True, slots=True)
class Streak:
    """Failures in a row of one cause into one key; :meth:`then` is the next failure."""

    cause: str
    count: int
    last_at: datetime

    @property
    def next_try(self) -> datetime:
        return self.last_at + delay(self.count)

    def then(self, cause: str, at: datetime) -> Streak:
        """The streak after a failure of ``cause`` at ``at``: another cause starts a new
        count, the same batch's failure (within SAME_FAILURE) is not counted again."""
        if cause != self.cause:
            return Streak(cause, 1, at)
        if at - self.last_at < SAME_FAILURE:
            return Streak(cause, self.count, at)
        return Streak(cause, self.count + 1, at)


def first(cause: str, at: datetime) -> Streak:
    return Streak(cause, 1, at)

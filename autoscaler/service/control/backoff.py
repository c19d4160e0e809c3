"""Launch backoff: a pool (type, zone, market) whose launches keep failing for the same
cause is held, as Cluster Autoscaler backs off a node group.

The rule (documented in docs/concepts/loop.md, "Launch backoff"): the n-th failure in a row of the same
cause holds launches into that (pool, type, zone, market) for ``5 min x 2^(n-1)``, at most
30 min, counted from the failure. Failures are nodes that went to PROVISION_FAILED or
BOOTSTRAP_FAILED (those of one cause less than 30 s apart are one failure: one apply or
bootstrap batch fails its nodes together); the cause is the Ansible task that failed, the
cloud's error code, or the kind of failure (the schedule and the counting are
``model/backoff.py``'s, which the simulator replays). A spot launch refused for want of
stock counts only where the pool goes on-demand at once (``refusal_escalates``); elsewhere
the pool's ``capacity_error_backoff`` alone holds it. A node of the same key reaching READY resets
the count, and so does a change of the pool's policy (only nodes launched under the current policy count: each
node records its pool's policy fingerprint when it is created). A different cause starts
a new count at 1.

Outcomes are taken in the order they were written, so a READY written after a backward
step of the wall clock still resets the failures stamped before it. A failure stamped up to
``SKEW`` after ``now`` counts as at ``now``; one stamped later (written before the step) counts
toward the streak but holds nothing by itself: what is read afresh each tick cannot tell how
long ago it was, and holding it until its stamp would hold the key for as long as the step.

Nothing here is kept in memory: the state is read from the store's transitions every
tick, so a restart keeps the backoff. It reaches the engine (which stays pure) as a
:class:`CapacityError` with ``until`` in the snapshot: the engine then falls back to
another type or zone of the pool, like after a capacity error, or holds the launch with
a reason naming the cause, the count and the next try.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from autoscaler.actuators.terraform.errors import capacity_code
from autoscaler.fleet.queries import LaunchOutcome, launch_outcomes
from autoscaler.fleet.store import FleetStore
from autoscaler.model.backoff import CAP, SPOT_NO_STOCK, Streak, delay, first, refusal_escalates
from autoscaler.model.bounds import SKEW
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.snapshot import CapacityError
from autoscaler.policy.models import Market, Pool, TeamPolicy, find_pool

FAILED = {NodeState.PROVISION_FAILED: "provision", NodeState.BOOTSTRAP_FAILED: "bootstrap"}
LOOKBACK = timedelta(hours=6)  # older failures no longer hold anything (CAP << LOOKBACK)
__all__ = ["CAP", "delay", "fingerprint", "launch_backoffs"]  # delay: the rule's schedule, model/backoff.py
CODE = "launch-backoff"
_TASK = re.compile(r"at task '([^']{1,120})'")
_ERROR_CODE = re.compile(r"\b([A-Z][A-Za-z]{3,60}(?:Capacity|Exceeded|Limit|Error|Unavailable|"
                         r"NotFound|Unsupported))\b")


def fingerprint(pool: Pool) -> str:
    """The pool's policy, in a few characters: a node launched under another policy does
    not count towards the current backoff."""
    return hashlib.sha256(pool.model_dump_json().encode()).hexdigest()[:16]


def cause_of(kind: str, reason: str) -> str:
    """The failure's cause, from the reason the executor or the reconciler wrote."""
    if kind == "bootstrap" and (task := _TASK.search(reason)):
        return f"bootstrap failed at task '{task.group(1)}'"
    if "not ready after" in reason:
        return "bootstrap ok but the node never became ready"
    if (code := _ERROR_CODE.search(reason)) is not None:
        return f"{kind} failed: {code.group(1)}"
    if "timed out" in reason or "timeout" in reason:
        return f"{kind} timed out"
    return f"{kind} failed"


@dataclass(frozen=True)
class Backoff:
    pool: str
    cloud: str
    region: str
    instance_type: str
    zone: str | None
    market: Market
    cause: str
    count: int
    last_at: datetime
    next_try: datetime

    def describe(self) -> str:
        where = f"{self.instance_type} {self.market.value}" + (f" in {self.zone}" if self.zone else "")
        return (f"{self.pool} {where}: {self.cause}, {self.count} time(s) in a row; "
                f"next try {self.next_try:%H:%M:%S}")

    def as_capacity_error(self) -> CapacityError:
        return CapacityError(
            cloud=self.cloud, region=self.region, instance_type=self.instance_type,
            zone=self.zone, market=self.market, code=CODE, at=self.last_at, until=self.next_try,
            message=f"{self.cause}, {self.count} time(s) in a row; next try {self.next_try:%H:%M:%S}")


def launch_backoffs(store: FleetStore, policies: Mapping[str, TeamPolicy], now: datetime) -> list[Backoff]:
    """The backoffs in force at ``now`` (none once their next try has come)."""
    running: dict[tuple[str, str, str, str, str | None, Market], Backoff] = {}
    for event in launch_outcomes(store, since=now - LOOKBACK):
        pool = find_pool(policies, event.team, event.pool)
        if pool is None or event.policy != fingerprint(pool):
            continue  # no policy, or launched under another one: the policy was changed
        if (event.market is Market.SPOT and capacity_code(event.reason) in SPOT_NO_STOCK
                and not refusal_escalates(pool.capacity, policies[event.team].priority)):
            continue  # the pool's jobs wait for spot: capacity_error_backoff holds the zone
        key = _key(event)
        if event.state is NodeState.READY:
            running.pop(key, None)
            continue
        cause = cause_of(FAILED[event.state], event.reason)
        # Stamped after now: written before a backward step of our clock. A few seconds
        # (the tick's now is read before the executor writes) count as now; more, and its
        # true time is unknown: it counts toward the streak but holds nothing by itself,
        # or it would hold the key for as long as the step.
        at = (min(event.at, now) if event.at - now <= SKEW else now - CAP)
        seen = running.get(key)
        streak = (first(cause, at) if seen is None
                  else Streak(seen.cause, seen.count, seen.last_at).then(cause, at))
        running[key] = Backoff(pool=key[0], cloud=key[1], region=key[2], instance_type=key[3],
                               zone=key[4], market=key[5], cause=cause, count=streak.count,
                               last_at=at, next_try=streak.next_try)
    return sorted((b for b in running.values() if b.next_try > now),
                  key=lambda b: (b.pool, b.instance_type, b.zone or "", b.market.value))


def _key(event: LaunchOutcome) -> tuple[str, str, str, str, str | None, Market]:
    return (f"{event.team}/{event.pool}", event.cloud, event.region, event.instance_type,
            event.zone, event.market)

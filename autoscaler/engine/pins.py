"""Running jobs' pins: the pools of its node's placement group each running job may run in.

Both moves of a node's work to another pool of its group use them: consolidation
(scale_down/consolidate_group.py) and the return to spot (return_to_spot.py).

``RunningJob.pools`` comes from a snapshot, which is untrusted. What a list means here:

=====================  ===================================================================
``pools``              the job may be moved to
=====================  ===================================================================
None                   any pool the pool-level rules allow (no narrowing known)
pools of the group     those pools only
entries outside it     ignored: another team's pool, a pool of no group, a made-up name
only such entries      no pool of the group: its work stays in its own pool
=====================  ===================================================================

A job is never moved off a node for its pin: within its own pool the node's work moves as
before (the lists are per pool, not per instance type or zone).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from autoscaler.model.snapshot import RunningJob

Allowed = frozenset[str] | None  # the pools a job may be moved to; None: any


def allowed(jobs: Sequence[RunningJob], group: Collection[str]) -> list[Allowed]:
    """Per job, the pools of ``group`` (team/pool keys) it may run in; None: any."""
    return [None if j.pools is None else frozenset(p for p in j.pools if p in group) for j in jobs]


def admits(allowed: Sequence[Allowed], pool: str) -> bool:
    """Every job may run in ``pool``."""
    return all(a is None or pool in a for a in allowed)


def said(jobs: Sequence[RunningJob], allowed: Sequence[Allowed], refusing: str | None = None,
         shown: int = 3) -> str:
    """``job a may run only in vision/east; ...`` for the pinned jobs (those whose pin refuses
    the pool ``refusing``, if given), the first ``shown``."""
    said = [f"job {j.id} may run only in {', '.join(sorted(a)) or 'no pool of its group'}"
            for j, a in zip(jobs, allowed, strict=True)
            if a is not None and (refusing is None or refusing not in a)]
    more = f" (and {len(said) - shown} more)" if len(said) > shown else ""
    return "; ".join(said[:shown]) + more

"""When the reconciler may believe "the cloud no longer lists this instance".

A LOST node leaves its pool's Terraform map, and the next apply destroys whatever is
still behind its key: a wrong LOST destroys a live machine without a drain. So a missing
instance is evidence only when the rest of the world agrees (docs/concepts/decisions.md rule 1, "never remove
capacity on absence of evidence"):

* **mass disappearance freezes the pool.** Cluster Autoscaler stops scaling when more than
  ``--ok-total-unready-count`` (3) nodes *and* more than ``--max-total-unready-percentage``
  (45%) of the cluster are unready (``clusterstate.IsClusterHealthy``): a large share gone
  at once is more likely a broken answer than a broken fleet. We apply the same two-part
  rule per pool to one cloud answer, with a count of 1 instead of 3 (a wrong LOST here
  destroys an instance, where CA's halt only stops scaling): one vanished instance is
  believable (a spot reclaim), two or more that are also over 45% of the pool's known
  instances freeze LOST marking for that pool until the answer recovers;
* **a busy node is never LOST**: while the scheduler reports jobs (or allocated GPUs) on
  it, or cannot be read for its pool, or reported the impossible of it, the node is kept;
* **the same rule the other way round**: with ``unknown_instances: destroy``, when a
  pool's tagged instances the store does not know are more than 1 and more than 45% of
  that pool's instances, none is destroyed (a store that was emptied, restored from an
  old backup or pointed at the wrong database would otherwise destroy a live fleet);
* **a fleet-wide cap** bounds the LOST marks and unknown-instance destroys of one run
  (``executor.max_removals_per_tick``): the rest wait for the next run.

Pure functions of the nodes, the cloud answer and what the signals observed this tick
(no I/O).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from autoscaler.clouds.base import CloudInstance
from autoscaler.model.lifecycle import EXPLAINED
from autoscaler.model.node import Node
from autoscaler.model.snapshot_parts import Observed
from autoscaler.service.executor.settings import ExecutorSettings

_BUSY_STATES = frozenset({"allocated", "mixed"})


def counted(nodes: Iterable[Node]) -> list[Node]:
    """Nodes whose instance the cloud answer must list."""
    return [n for n in nodes if n.instance_id and n.state not in EXPLAINED]


def frozen_pools(nodes: Iterable[Node], live: set[str],
                 settings: ExecutorSettings) -> dict[str, str]:
    """Pool key -> why LOST marking is frozen for it in this answer."""
    known: dict[str, int] = defaultdict(int)
    gone: dict[str, int] = defaultdict(int)
    for node in counted(nodes):
        known[node.pool_key] += 1
        if node.instance_id not in live:
            gone[node.pool_key] += 1
    out = {}
    for pool, missing in gone.items():
        share = 100 * missing / known[pool]
        if missing > settings.lost_freeze_count and share > settings.lost_freeze_percent:
            out[pool] = (f"the cloud answer lacks {missing} of the {known[pool]} instances "
                         f"known for {pool} ({share:.0f}% > {settings.lost_freeze_percent}% "
                         f"and more than {settings.lost_freeze_count}): not believed, no node "
                         "of the pool is marked LOST until the answer recovers")
    return out


def strays_kept(nodes: Iterable[Node], strays: Iterable[CloudInstance],
                settings: ExecutorSettings) -> dict[str, str]:
    """Pool key -> why its unknown instances are not destroyed in this answer."""
    known: dict[str, int] = defaultdict(int)
    for node in counted(nodes):
        known[node.pool_key] += 1
    unknown: dict[str, int] = defaultdict(int)
    for inst in strays:
        if inst.team and inst.pool:
            unknown[f"{inst.team}/{inst.pool}"] += 1
    out = {}
    for pool, count in unknown.items():
        share = 100 * count / (count + known[pool])
        if count > settings.lost_freeze_count and share > settings.lost_freeze_percent:
            out[pool] = (f"{count} of the {count + known[pool]} instances of {pool} are unknown "
                         f"to the store ({share:.0f}% > {settings.lost_freeze_percent}%): the "
                         "store is more likely wrong than the cloud, nothing is destroyed")
    return out


def busy_reason(node: Node, snapshot: Observed | None) -> str | None:
    """Why the scheduler's view forbids calling ``node`` LOST, or None."""
    if snapshot is None:
        return None
    pool = snapshot.pools.get(node.pool_key)
    if pool is not None and pool.scheduler_missing:
        return f"the scheduler cannot be read ({pool.scheduler_missing}) to confirm it is idle"
    obs = snapshot.nodes.get(node.name)
    if obs is not None and obs.scheduler_missing:
        return f"its scheduler data is not believed ({obs.scheduler_missing}) to confirm it is idle"
    sched = obs.scheduler if obs is not None else None
    if sched is None:
        return None
    if sched.jobs:
        return f"the scheduler reports {len(sched.jobs)} job(s) running on it"
    if sched.gpus_allocated > 0 or sched.state in _BUSY_STATES:
        return f"the scheduler reports it {sched.state} with {sched.gpus_allocated:g} GPU(s) allocated"
    return None


__all__ = ["busy_reason", "counted", "frozen_pools", "strays_kept"]

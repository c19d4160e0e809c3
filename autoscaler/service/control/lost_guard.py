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
* **the whole answer is judged too** (:func:`frozen_answer`): one answer lists a whole
  (cloud, region), so a pool-by-pool count misses a truncated or empty answer spread over
  many small pools (twelve single-node pools each "lose" only one instance). An answer
  that lacks more than ``max(1, 10%)`` of the region's known live instances, or lists
  nothing at all while the store knows live instances there (the shape of a wrong filter,
  account or endpoint), is not believed for any node of the region in this run. Karpenter
  likewise never deletes a NodeClaim on the cloud's List alone (its garbage collection
  skips nodes whose kubelet is still Ready), and CA's cluster-wide health check halts on a
  mass change; 10% is stricter than CA's 45% because a wrong LOST destroys the instance.
  A real loss that large is left to the engine's budgeted replacement of nodes the
  scheduler reports down or unlisted. ``lost_freeze_percent: 100`` turns this off too;
* **a busy or unseen node is never LOST**: while the scheduler reports jobs (or allocated
  GPUs) on it, or cannot be read for its pool, or reported the impossible of it, or does
  not list it at all (no reading for it, or only the reader's "does not list it" marker
  with state unknown), the node is kept: only a scheduler that lists the node with no
  work confirms nothing runs there. Pools without a scheduler (``cluster: none``) have
  only the cloud's word, judged as above;
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
from typing import Literal

from autoscaler.clouds.base import CloudInstance
from autoscaler.model.lifecycle import EXPLAINED
from autoscaler.model.node import Node
from autoscaler.model.snapshot_parts import Observed
from autoscaler.service.executor.settings import ExecutorSettings

_BUSY_STATES = frozenset({"allocated", "mixed"})
Seen = Literal["empty", "busy", "unseen"]  # scheduler_view's verdict on a node's work
# One cloud answer may lack at most this share of its region's known live instances (and
# at least ANSWER_FREEZE_COUNT of them) before it is not believed for the whole region.
ANSWER_FREEZE_PERCENT = 10
ANSWER_FREEZE_COUNT = 1


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


def frozen_answer(nodes: Iterable[Node], live: set[str], where: str,
                  settings: ExecutorSettings) -> str | None:
    """Why this whole answer for ``where`` (cloud/region) is not believed, or None.

    ``nodes`` are the store's nodes of that region, ``live`` the instance ids it lists.
    ``lost_freeze_percent: 100`` (the documented way to accept a real mass loss) turns it
    off, as it does the per-pool freeze."""
    if settings.lost_freeze_percent >= 100:
        return None
    known = [n.instance_id for n in counted(nodes)]
    missing = sum(1 for i in known if i not in live)
    if not missing:
        return None
    allowed = max(ANSWER_FREEZE_COUNT, len(known) * ANSWER_FREEZE_PERCENT / 100)
    share = 100 * missing / len(known)
    if not live:
        why = f"lists no instance while the store knows {len(known)} live there"
    elif missing > allowed:
        why = (f"lacks {missing} of the {len(known)} instances known there ({share:.0f}%, more "
               f"than max({ANSWER_FREEZE_COUNT}, {ANSWER_FREEZE_PERCENT}%) = {allowed:g})")
    else:
        return None
    return (f"the cloud answer for {where} {why}: not believed, no node in {where} is marked "
            "LOST this run")


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


def scheduler_view(node: Node, snapshot: Observed | None) -> tuple[Seen, str]:
    """What this tick's scheduler view says of ``node``: listed with no work on it ("empty"),
    listed with work ("busy"), or nothing about its work ("unseen"); and the words.

    Only a positive report counts as empty: an unreadable scheduler, data not believed, a
    node it does not list (or lists with state unknown, the reader's marker for a READY
    node missing from its answer) say nothing about the node's work. The text completes
    "the scheduler ..."."""
    if snapshot is None:
        return "unseen", "was not read"
    pool = snapshot.pools.get(node.pool_key)
    if pool is not None and pool.scheduler_missing:
        return "unseen", f"cannot be read ({pool.scheduler_missing})"
    obs = snapshot.nodes.get(node.name)
    if obs is not None and obs.scheduler_missing:
        return "unseen", f"data is not believed ({obs.scheduler_missing})"
    sched = obs.scheduler if obs is not None else None
    if sched is None:
        unread = f" ({', '.join(snapshot.missing)} not read this tick)" if snapshot.missing else ""
        return "unseen", f"does not list it{unread}"
    if sched.state == "unknown":
        return "unseen", f"does not report its state ({sched.unusable or 'unknown'})"
    if sched.jobs:
        return "busy", f"reports {len(sched.jobs)} job(s) running on it"
    if sched.gpus_allocated > 0 or sched.state in _BUSY_STATES:
        return "busy", f"reports it {sched.state} with {sched.gpus_allocated:g} GPU(s) allocated"
    return "empty", f"reports it {sched.state} with no jobs"


def busy_reason(node: Node, snapshot: Observed | None) -> str | None:
    """Why the scheduler's view forbids calling ``node`` LOST, or None.

    ``snapshot`` None: the caller asks for no scheduler check (tests, tools; the service
    always passes the tick's view). A node of a pool without a scheduler
    (``cluster: none``) has no view to consult."""
    if snapshot is None:
        return None
    seen, says = scheduler_view(node, snapshot)
    if seen == "empty":
        return None
    if seen == "busy":
        return f"the scheduler {says}"
    if node.progress.cluster == "none":  # no scheduler to list it: its silence says nothing
        return None
    return f"the scheduler {says}: nothing confirms it is idle"


__all__ = ["ANSWER_FREEZE_COUNT", "ANSWER_FREEZE_PERCENT", "busy_reason", "counted", "frozen_answer",
           "frozen_pools", "scheduler_view", "strays_kept"]

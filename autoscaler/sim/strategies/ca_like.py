"""Requests-based scaling like the Kubernetes Cluster Autoscaler, with its default settings.

One node group per instance type of the pool. Every ``scan-interval`` (10 s):

* **Scale-up** for pods that cannot be scheduled: pods that fit on nodes already coming up
  are not counted (CA accounts for upcoming nodes); for each node group the binpacking
  estimator packs the rest first-fit-decreasing onto new nodes of that group; the
  ``least-waste`` expander picks the group that leaves the fewest GPUs idle; ties go to
  a random group (CA's fallback expander is ``random``), drawn from the replay's seed;
  that group grows by its estimate, within ``max_nodes`` and the team's GPU quota. A
  scale-up the cloud refuses in every zone (no on-demand fallback) backs that group off
  as CA's exponential node-group backoff does (:class:`GroupBackoff`): 5 min, doubled by
  each failure after the last back-off ran out, at most 30 min; a scale-up of the group
  whose nodes all came up resets it, and 3 h without failure forgets it. A backed-off
  group is no expansion option. The estimate packs pods of one shape at once
  (:mod:`.packing`): linear in the number of pod shapes and node profiles, not in pods x
  nodes.
* **Scale-down**: a ready node whose requested GPUs are below 50% of its GPUs
  (``scale-down-utilization-threshold``; CA looks only at GPUs on GPU nodes) and whose pods
  all fit elsewhere is "unneeded"; unneeded for 10 min (``scale-down-unneeded-time``)
  it is removed, never within 10 min of a scale-up (``scale-down-delay-after-add``;
  unneeded times keep counting meanwhile, as in CA). Empty nodes go up to 10 at a time
  (``max-empty-bulk-delete``), non-empty ones one at a time; their pods are evicted and
  restart elsewhere (they keep the work of their last checkpoint, like every kill here).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import asdict, dataclass

from autoscaler.model.lifecycle import IN_FLIGHT, NodeState
from autoscaler.sim.cluster import SimNode
from autoscaler.sim.placement import EPS, slots_for
from autoscaler.sim.replay import Replay
from autoscaler.sim.strategies.base import Strategy
from autoscaler.sim.strategies.common import Buyer, Limits, active_nodes, mix_for, reap
from autoscaler.sim.strategies.packing import Bins, fit

S = NodeState


@dataclass(frozen=True)
class CaSettings:
    scan_interval: float = 10.0
    utilization_threshold: float = 0.5
    unneeded_time: float = 600.0
    delay_after_add: float = 600.0
    max_empty_bulk_delete: int = 10
    max_nonempty_deletes: int = 1
    node_group_backoff: float = 300.0  # initial-node-group-backoff-duration
    max_node_group_backoff: float = 1800.0  # max-node-group-backoff-duration
    node_group_backoff_reset: float = 10800.0  # node-group-backoff-reset-timeout


class GroupBackoff:
    """The Cluster Autoscaler's exponential node-group backoff (utils/backoff).

    A failure backs the group off for the initial duration, or for twice the last one
    (at most ``maximum``) when the last back-off had run out; one still running restarts
    at the initial duration (CA's rule for concurrent failures). A group's refused
    nodes of one scan are one failure (CA registers a group's creation errors once per
    loop). ``succeeded`` (a scale-up whose nodes all came up) and ``reset_after`` without
    a failure clear the group."""

    def __init__(self, initial: float, maximum: float, reset_after: float):
        self.initial, self.maximum, self.reset_after = initial, maximum, reset_after
        self._info: dict[str, tuple[float, float, float]] = {}  # group -> duration, until, failed at

    def failed(self, group: str, now: float) -> None:
        info = self._info.get(group)
        if info is not None and info[2] == now:
            return
        duration = self.initial
        if info is not None and info[1] < now:
            duration = min(2 * info[0], self.maximum)
        self._info[group] = (duration, now + duration, now)

    def blocked(self, group: str, now: float) -> bool:
        info = self._info.get(group)
        if info is not None and info[2] + self.reset_after < now:
            del self._info[group]  # stale: forgotten
            return False
        return info is not None and info[1] > now

    def succeeded(self, group: str) -> None:
        self._info.pop(group, None)


def _pack(bins: list[list[float]], gpus: float) -> bool:
    for free in bins:
        slots = slots_for(free, gpus)
        if slots is not None:
            for i, amount in slots:
                free[i] -= amount
            return True
    return False


class ClusterAutoscalerLike(Strategy):
    name = "ca_like"
    description = "Kubernetes Cluster Autoscaler defaults (pending pods up, <50% requested down)"

    def __init__(self, quota_gpus: int | None = None, settings: CaSettings | None = None):
        self.settings = settings or CaSettings()
        self.interval = self.settings.scan_interval
        self.quota_gpus = quota_gpus
        self.buyer = Buyer(0.0)  # back-off per node group, below
        st = self.settings
        self.backoff: GroupBackoff | None = GroupBackoff(st.node_group_backoff, st.max_node_group_backoff,
                                                         st.node_group_backoff_reset)
        self._scaling: set[str] = set()  # groups with a scale-up whose nodes are not all up
        self.last_scale_up: float | None = None
        self.unneeded_since: dict[str, float] = {}
        self._seen_version = -1
        self._unneeded: list[SimNode] = []
        self._idle_check: tuple[int, float, tuple[str, ...]] | None = None
        self.rng = random.Random("ca_like:expander")

    def begin(self, replay: Replay, now: float) -> None:
        self.rng = random.Random(f"{replay.config.seed}:ca_like:expander")

    def capacity_error(self, replay: Replay, node: SimNode, now: float) -> None:
        if self.buyer.refused(replay, node, now) is None and self.backoff is not None:
            self.backoff.failed(node.itype.name, now)
            self._scaling.discard(node.itype.name)  # that scale-up failed: no reset from it

    def parameters(self) -> dict[str, object]:
        return {**asdict(self.settings), "expander": "least-waste",
                "node_group_backoff_rule": "exponential" if self.backoff else "none"}

    def tick(self, replay: Replay, now: float) -> None:
        reap(replay, now)
        self._finish_scale_ups(replay)
        self._scale_up(replay, now)
        self._scale_down(replay, now)

    # -- scale-up -------------------------------------------------------------------
    def _finish_scale_ups(self, replay: Replay) -> None:
        """A group whose scale-up has no node on its way any more succeeded: reset it."""
        if not self._scaling or self.backoff is None:
            return
        coming = {n.itype.name for n in replay.cluster.nodes.values() if n.state in IN_FLIGHT}
        for group in self._scaling - coming:
            self.backoff.succeeded(group)
            self._scaling.discard(group)

    def _scale_up(self, replay: Replay, now: float) -> None:
        pending = replay.cluster.pending_shapes()
        backoff = self.backoff
        groups = [g for g in replay.pool.instance_types if backoff is None or not backoff.blocked(g, now)]
        if not pending or not groups or now < self.buyer.blocked_until:
            return  # nothing to do, or the node groups are backed off
        check = (replay.cluster.version, self.buyer.blocked_until, tuple(groups))
        if check == self._idle_check:
            return  # same pods, nodes and back-off as a check that launched nothing: same answer
        upcoming = Bins()
        for gpus, n in Counter(n.gpus for n in replay.cluster.nodes.values() if n.state in IN_FLIGHT).items():
            upcoming.add([1.0] * gpus, n)
        rest = [(g, k - upcoming.place(g, k)) for g, k in pending]
        rest = [(g, k) for g, k in rest if k > 0]
        options = [o for name in groups if rest and (o := self._estimate(replay, name, rest)) is not None]
        if not options:
            self._idle_check = check
            return
        least = min(o[0] for o in options)
        _, name, count = self.rng.choice([o for o in options if o[0] <= least + EPS])
        limits = Limits.of(replay, self.quota_gpus)
        count = min(count, limits.room(active_nodes(replay), replay.itype(name).gpus))
        if count <= 0:
            self._idle_check = check  # at max_nodes or the quota: wait for the fleet to change
            return
        mix = mix_for(replay)
        if sum(1 for _ in range(count) if self.buyer.buy(replay, name, mix, now) is not None):
            self.last_scale_up = now
            self._scaling.add(name)

    @staticmethod
    def _estimate(replay: Replay, name: str, rest: list[tuple[float, int]]
                  ) -> tuple[float, str, int] | None:
        """(wasted share of the new GPUs, group, new nodes) packing ``rest`` onto new nodes."""
        gpus = replay.itype(name).gpus
        empty = [1.0] * gpus
        bins = Bins()
        used = 0.0
        for g, k in rest:
            if g > gpus + EPS:
                continue
            left = k - bins.place(g, k)
            if left:
                bins.add(empty, math.ceil(left / fit(tuple(empty), g)))
                bins.place(g, left)
            used += g * k
        if not bins.nodes:
            return None
        total = bins.nodes * gpus
        return (total - used) / total, name, bins.nodes

    # -- scale-down -----------------------------------------------------------------
    def _scale_down(self, replay: Replay, now: float) -> None:
        if replay.cluster.version != self._seen_version:  # nothing moved: same answer as before
            self._unneeded = self._find_unneeded(replay)
            self._seen_version = replay.cluster.version
        unneeded = self._unneeded
        names = {n.name for n in unneeded}
        self.unneeded_since = {k: v for k, v in self.unneeded_since.items() if k in names}
        for node in unneeded:
            self.unneeded_since.setdefault(node.name, now)
        if self.last_scale_up is not None and now - self.last_scale_up < self.settings.delay_after_add:
            return
        ripe = [n for n in unneeded if now - self.unneeded_since[n.name] >= self.settings.unneeded_time]
        empty = [n for n in ripe if not n.jobs][: self.settings.max_empty_bulk_delete]
        busy = [n for n in ripe if n.jobs][: self.settings.max_nonempty_deletes]
        for node in empty + busy:
            replay.terminate(node, now, "scale-down-eviction")
            self.unneeded_since.pop(node.name, None)

    def _find_unneeded(self, replay: Replay) -> list[SimNode]:
        ready = sorted(replay.cluster.serving(), key=lambda n: (n.allocated / n.gpus, n.created_at, n.name))
        free = {n.name: list(n.free) for n in ready}
        unneeded: list[SimNode] = []
        for node in ready:
            if node.allocated / node.gpus >= self.settings.utilization_threshold - EPS:
                continue
            others = [free[n.name] for n in ready if n is not node and n not in unneeded]
            trial = [list(f) for f in others]
            if all(_pack(trial, j.gpus) for j in sorted(node.jobs.values(), key=lambda j: -j.gpus)):
                for f, t in zip(others, trial, strict=True):
                    f[:] = t  # the moved pods take that room for the next candidates
                unneeded.append(node)
        return unneeded

""""ours" over a placement group: ``decide()`` with every pool of the group at once.

The pools (one per region, say) share one simulated cluster: a job runs on any pool's node,
as in a Slurm partition spanning the group, and the spot market is per zone (zone names are
unique across regions). What changes from :mod:`.engine` is only what the service would
observe and where a launch goes:

* each node carries its pool; each pool's Observer sees its own nodes, so the engine's
  per-pool rules (mix, max_nodes, idle, cooldowns) read what they read in production;
* pending jobs are reported one by one (``PendingJob``) under the first pool with every
  pool of the group as an option, as the Slurm and Kubernetes readers list them; the
  engine's placement (``engine/placement.py``) moves each to a pool before growth.
  ``PendingShape`` carries no options, so the by-shape fast path is not used here;
* a refused launch is reported with its pool's region, so the engine backs off that
  region's (type, zone) only, and the next decide comes ``follow_up`` after the last
  tick instead of at the next one, as the service's ``tick.follow_up`` does for a pool
  with placement-group mates (``Service.work_finished``): the work spills sooner;
* with ``wake_after`` (the service's ``tick.wake_after``), an arrival or a notice wakes a
  decide once any pool of the group has no launch attempt running (``Replay.demand``).
"""

from __future__ import annotations

from collections import Counter

from autoscaler.catalog import Catalog
from autoscaler.engine.settings import EngineSettings
from autoscaler.fleet.intents import NewNode
from autoscaler.model.node import FleetView, PoolHistory
from autoscaler.model.snapshot import PendingJob, PoolOption, Snapshot
from autoscaler.policy.models import Pool, TeamPolicy
from autoscaler.sim.cluster import Cluster, SimNode
from autoscaler.sim.observe import Observer, to_datetime
from autoscaler.sim.replay import Replay, SimError
from autoscaler.sim.strategies.engine import EngineStrategy, error_window


class GroupEngineStrategy(EngineStrategy):
    name = "group"
    description = "gpu-autoscaler's decide() with the team's pools of one placement group"

    def __init__(self, policy: TeamPolicy, pools: list[Pool], catalog: Catalog, interval: float = 30.0,
                 settings: EngineSettings | None = None, follow_up: float | None = 10.0,
                 wake_after: float | None = None):
        if not pools:
            raise SimError("a placement group needs at least one pool")
        super().__init__(policy, pools[0], catalog, interval, settings, wake_after=wake_after)
        team = policy.model_copy(update={"pools": pools})
        groups = {team.group_of(p.name) for p in pools}
        if len(groups) != 1 or None in groups:
            raise SimError(f"pools {', '.join(p.name for p in pools)} are not one placement group "
                           f"(groups: {sorted(str(g) for g in groups)})")
        self.policies = {policy.team: team}
        self.pools = {f"{policy.team}/{p.name}": p for p in pools}
        self.home = next(iter(self.pools))  # where signals list a pending job
        self.observers = {k: Observer(policy.team, p, p.cloud.value, p.region) for k, p in self.pools.items()}
        self.histories = {k: PoolHistory() for k in self.pools}
        self.options = [PoolOption.model_construct(pool=k, zones=None, instance_types=None)
                        for k in self.pools]
        self._pending: dict[str, tuple[float, PendingJob]] = {}
        self.launched: Counter[tuple[str, str]] = Counter()  # (pool, market) -> nodes launched
        self.follow_up = follow_up if len(pools) > 1 else None  # the service's default, 10 s
        self.pool_count = len(pools)

    def parameters(self) -> dict[str, object]:
        return {"tick_s": self.interval, "follow_up_s": self.follow_up, "wake_after_s": self.wake_after,
                "group": [p.model_dump(mode="json") for p in self.pools.values()]}

    def capacity_error(self, replay: Replay, node: SimNode, now: float) -> None:
        replay.wake(now, self.follow_up)
        super().capacity_error(replay, node, now)

    def pool_of(self, node: SimNode) -> Pool:
        return self.pools[node.pool or self.home]

    def observe(self, replay: Replay, now: float) -> tuple[FleetView, Snapshot]:
        by_pool: dict[str, list[SimNode]] = {k: [] for k in self.pools}
        for node in replay.cluster.nodes.values():
            by_pool[node.pool or self.home].append(node)
        self.forget_errors(replay, now, max(error_window(p) for p in self.pools.values()))
        pending = self._pending_jobs(replay.cluster)
        nodes, obs, pools = [], {}, {}
        for key, observer in self.observers.items():
            nodes += observer.fleet(by_pool[key], self.histories[key]).nodes
            snap = observer.snapshot(by_pool[key], replay.cluster, self.errors, now,
                                     pending if key == self.home else [])
            obs.update(snap.nodes)
            pools.update(snap.pools)
        fleet = FleetView.model_construct(nodes=nodes, history=dict(self.histories))
        return fleet, Snapshot.model_construct(
            taken_at=to_datetime(now), nodes=obs, pools=pools, capacity_errors=self.errors,
            offerings=[], spot_scores=replay.spot_scores(self.pools.values(), now), missing=[],
            unserved=[], cluster_quotas={}, held={}, forecasts={})

    def _pending_jobs(self, cluster: Cluster) -> list[PendingJob]:
        """Every waiting job with the group's pools as options; a job's record is kept
        while it waits (a requeued job is a new wait, so a new record)."""
        seen: dict[str, tuple[float, PendingJob]] = {}
        for job in cluster.pending:
            cached = self._pending.get(job.job.id)
            if cached is None or cached[0] != job.pending_since:
                cached = (job.pending_since, PendingJob.model_construct(
                    id=job.job.id, gpus=job.gpus, nodes=1, reason="Resources",
                    submitted_at=to_datetime(job.pending_since), gpu_model=None, priority=0,
                    zones=None, instance_types=None, options=self.options))
            seen[job.job.id] = cached
        self._pending = seen
        return [p for _, p in seen.values()]

    def launch(self, replay: Replay, intent: NewNode, now: float) -> SimNode:
        self.launched[intent.pool, intent.market.value] += 1
        return replay.launch(intent.instance_type, intent.market, intent.zone, now, pool=intent.pool)

    def scaled(self, up: set[str], down: set[str], now: float) -> None:
        at = to_datetime(now)
        for key in up | down:
            last = self.histories[key]
            self.histories[key] = PoolHistory(
                last_scale_up_at=at if key in up else last.last_scale_up_at,
                last_scale_down_at=at if key in down else last.last_scale_down_at)

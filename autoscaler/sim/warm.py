"""A pool's warm pool in the replay (policy ``warm_pool``), decided by engine/warm_pool.py.

A warm node is launched, bootstraps for the pool's cold (or baked) boot time at the
instance's full price, then stops: from then on it bills only its root volume
(catalog/volumes.py) until it is started or retired. It is never in ``Cluster.nodes``, so
it takes no jobs and no strategy counts it as capacity. A launch of the plan whose type and
market match starts a stopped warm node instead (``SimConfig.warm_boot_delay``); the
started node is an ordinary new node from then on, billed from its start. A started spot
node needs spot capacity in its zone like any launch: refused, the warm node stays stopped.

Simplifications, stated: a warm node has no zone until started (it starts in the zone the
engine chose for the launch; a real stopped instance is tied to its volume's zone), and a
started node's age counts from its start.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autoscaler.catalog import InstanceType
from autoscaler.catalog.volumes import stopped_hourly_usd
from autoscaler.engine.warm_pool import WarmNode, refresh, serve, target, warm_market
from autoscaler.model.lifecycle import IN_FLIGHT
from autoscaler.model.plan import Launch, Plan
from autoscaler.model.snapshot import ForecastFloor
from autoscaler.policy.models import Market, Pool
from autoscaler.sim.observe import to_datetime
from autoscaler.sim.strategies.common import active_nodes

if TYPE_CHECKING:
    from autoscaler.sim.cluster import Cluster, SimNode
    from autoscaler.sim.replay import Replay


@dataclass(eq=False)
class SimWarm:
    name: str
    itype: InstanceType
    market: Market
    hourly: float  # while it bootstraps
    stopped_hourly: float  # once stopped: its volume
    launched_at: float
    stopped_at: float  # bootstrap done
    image: str

    def cost(self, until: float) -> float:
        running = max(0.0, min(until, self.stopped_at) - self.launched_at)
        stopped = max(0.0, until - self.stopped_at)
        return (self.hourly * running + self.stopped_hourly * stopped) / 3600


class WarmPoolSim:
    """The warm nodes of one pool and what they cost; the engine's rules decide."""

    def __init__(self, pool: Pool, cluster: Cluster):
        self.pool, self.cluster = pool, cluster
        cluster.stopped_bills = self.open_cost  # the report's cost counts the open warm bills
        self.image = pool.bootstrap.image  # no bake happens during a replay: never stale
        self.nodes: list[SimWarm] = []
        self._seq = 0
        self._queued: defaultdict[tuple[str, Market], list[str]] = defaultdict(list)
        self._held: defaultdict[tuple[str, Market], int] = defaultdict(int)
        self.started: set[str] = set()  # fleet nodes started from warm ones, in flight
        self.cost_closed = 0.0
        self.counts = {"warm_launches": 0, "warm_starts": 0, "warm_start_refused": 0,
                       "warm_retired": 0, "cold_held": 0}
        self.last_reason = ""

    def records(self, now: float) -> list[WarmNode]:
        return [WarmNode(w.name, w.itype.name, w.market, to_datetime(w.launched_at), w.image,
                         ready=w.stopped_at <= now) for w in self.nodes]

    def plan(self, plan: Plan, now: float) -> None:
        """Which of the plan's launches start warm nodes (taken by :meth:`start`) and which
        cold ones wait for them (:meth:`holds`)."""
        self._queued.clear()
        self._held.clear()
        launches = [a for a in plan.actions if isinstance(a, Launch)]
        nodes = self.cluster.nodes
        self.started = {name for name in self.started
                        if (n := nodes.get(name)) is not None and n.state in IN_FLIGHT}
        starting = len(self.started)
        for launch, starts in zip(launches, serve(launches, self.records(now), starting), strict=True):
            key = (launch.instance_type, launch.market)
            self._queued[key].extend(starts.start)
            self._held[key] += starts.held
        self.counts["cold_held"] += sum(self._held.values())

    def holds(self, type_name: str, market: Market) -> bool:
        """A cold launch the plan asked for waits for the pool's warm nodes starting: the
        next plans see them, and launch what they did not cover once they are READY."""
        key = (type_name, market)
        if self._queued.get(key) or not self._held.get(key):
            return False
        self._held[key] -= 1
        return True

    def start(self, replay: Replay, type_name: str, market: Market, zone: str | None,
              now: float) -> SimNode | None:
        """Start a warm node the plan chose for this launch (None: launch it cold)."""
        queue = self._queued.get((type_name, market))
        if not queue:
            return None
        name = queue.pop(0)
        warm = next(w for w in self.nodes if w.name == name)
        node = replay.launch(type_name, market, zone, now, boot=replay.config.warm_boot_delay)
        if node.reason == "capacity-error":
            self.counts["warm_start_refused"] += 1
            return node  # refused like a launch; the warm node stays stopped
        self._close(warm, now)
        self.started.add(node.name)
        self.counts["warm_starts"] += 1
        return node

    def refill(self, replay: Replay, forecast: ForecastFloor | None, now: float) -> None:
        """Retire stale, old and surplus warm nodes; launch new ones up to the target."""
        pool = self.pool
        itype = smallest(replay, pool)
        running = sum(n.gpus for n in active_nodes(replay))
        goal = target(pool, forecast, running, itype.gpus)
        decision = refresh(pool, self.records(now), goal, self.image, to_datetime(now))
        self.last_reason = decision.reason
        gone = {name for name, _ in decision.retire}
        for warm in [w for w in self.nodes if w.name in gone]:
            self._close(warm, now)
            self.counts["warm_retired"] += 1
        market = warm_market(pool)
        for _ in range(decision.refill):
            self._seq += 1
            boot = replay.boot_delay() * replay.boot_draw(now)
            self.nodes.append(SimWarm(
                f"w{self._seq:05d}", itype, market, replay.hourly(itype, market),
                stopped_hourly_usd(), now, now + boot, self.image))
            self.counts["warm_launches"] += 1

    def open_cost(self, now: float) -> float:
        return sum(w.cost(now) for w in self.nodes)

    def _close(self, warm: SimWarm, now: float) -> None:
        cost = warm.cost(now)
        self.cost_closed += cost
        self.cluster.totals.cost_usd += cost
        self.nodes.remove(warm)


def smallest(replay: Replay, pool: Pool) -> InstanceType:
    """The pool's type with the fewest GPUs (what a floor launches): the warm nodes' type."""
    types = [replay.itype(name) for name in pool.instance_types]
    return min(types, key=lambda t: (t.gpus, pool.instance_types.index(t.name)))

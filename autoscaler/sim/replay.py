"""One strategy's replay of a workload: the event loop and what strategies may do.

The replay owns the clock, the simulated cluster, the spot market and the random streams.
Strategies only see it through :class:`Replay`'s methods (launch, drain, cancel_drain,
terminate, util samples), so every strategy pays the same boot delays, prices and spot
interruptions. Random streams are seeded from ``(seed, strategy)``; the job -> duty-cycle
assignment is seeded from ``seed`` alone, so all strategies replay the same work.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from autoscaler.catalog import Catalog, CatalogError, InstanceType
from autoscaler.model.lifecycle import REPORTING, NodeState
from autoscaler.model.snapshot import SpotScore
from autoscaler.policy.models import Market, Pool
from autoscaler.sim.boot import BAKED_BOOT_S, COLD_BOOT_S, WARM_BOOT_S
from autoscaler.sim.clock import Clock, Kind
from autoscaler.sim.cluster import Cluster, SimJob, SimNode
from autoscaler.sim.series import Series
from autoscaler.sim.spot import ALWAYS_AVAILABLE, SpotMarket
from autoscaler.traces import DutyCycles, Workload

if TYPE_CHECKING:
    from autoscaler.sim.strategies.base import Strategy

S = NodeState


class SimError(Exception):
    """The simulation cannot run as configured (unknown type, missing price, ...)."""


@dataclass(frozen=True)
class SimConfig:
    tick: float = 30.0  # the service's loop interval: how often decide() runs
    # The service's tick.wake_after (10 s by default): a tick this long after the last one
    # when demand appears between ticks (an arrival, a spot notice, a launch the cloud
    # refused), but not before the last launch's attempt has passed, as the service runs one
    # apply per pool at a time; None: only every tick.
    wake_after: float | None = 10.0
    boot_delay: float = COLD_BOOT_S  # provisioning + bootstrap until a node takes jobs (sim/boot.py)
    # A node of a pool with bootstrap.image: baked, and a warm node started (sim/boot.py).
    baked_boot_delay: float = BAKED_BOOT_S
    warm_boot_delay: float = WARM_BOOT_S
    boot_jitter: float = 0.25  # each boot takes boot_delay x U(1 - j, 1 + j)
    # Common random numbers: every strategy of a seed takes the same boot-time draws, keyed
    # by when a node is launched (the k-th launch in each minute of the replay), so two
    # strategies launching for the same job at about the same moment wait the same boot,
    # whatever each launched before. Off: a stream per strategy, as the recorded figures of
    # every benchmark but bench_wait were replayed. Why it matters on few jobs:
    # docs/designs/benchmark-misses.md#wait.
    shared_boot_draws: bool = False
    # One provisioning attempt (the executor's terraform plan + apply): a refused launch is
    # learned only when it has passed, and is in flight (counted against the pool) until
    # then. Default: bench_terraform on this machine, plan of one added node 17.6 s + apply
    # 18.1 s (2026-12-01).
    launch_attempt: float = 36.0
    spot_notice: float = 120.0  # spot interruption notice before the node is reclaimed
    checkpoint_interval: float = 1800.0  # a killed job keeps the work of its last checkpoint
    default_util: float = 100.0  # GPU util % of a job's share when no duty-cycle data is given
    sample_every: float = 300.0  # time-series resolution of the report and plots
    seed: int = 0
    # Static on-prem nodes in the partition (hybrid burst): this many of this catalog type,
    # free for every strategy; jobs go on them first, as Slurm's lower weight makes them.
    on_prem_nodes: int = 0
    on_prem_type: str = ""
    # A stand-in for AWS's Spot placement score, for what-if replays (the spot traces carry
    # none): "ours" sees each zone of its pools scored 9 when the trace had spot there this
    # many seconds before, else 2. None: no scores, as the service without them.
    spot_score_lag: float | None = None


_DRAIN_CAUSES = {"consolidate": "consolidation", "spot-returned": "return-to-spot"}


@dataclass
class RunStats:
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    ticks: int = 0
    interruptions: int = 0
    wakes: int = 0  # ticks woken by demand between regular ticks (SimConfig.wake_after)
    extra: dict[str, float] = field(default_factory=dict)


class Replay:
    def __init__(self, workload: Workload, pool: Pool, catalog: Catalog, config: SimConfig,
                 strategy: Strategy, spot: SpotMarket | None = None, duty: DutyCycles | None = None):
        self.workload, self.pool, self.catalog, self.config = workload, pool, catalog, config
        self.strategy, self.spot, self.duty = strategy, spot or ALWAYS_AVAILABLE, duty
        self.start, self.end = workload.start, workload.end
        self.clock = Clock(self.start)
        self._last_tick = self._next_tick = self.start
        self._wake_at: float | None = None
        self._last_launch: dict[str | None, float] = {}  # per pool ("team/pool"; None: the replay's)
        self.cluster = Cluster(self.clock, config.checkpoint_interval)
        if config.on_prem_nodes:
            self.cluster.add_static(self.itype(config.on_prem_type), config.on_prem_nodes, self.start)
        self.rng = random.Random(f"{config.seed}:{strategy.name}:boot")
        self._draws = (-1, 0)  # shared_boot_draws: the minute of the last draw, draws in it
        self._interrupt_rng = random.Random(f"{config.seed}:{strategy.name}:spot")
        self.jobs = _sim_jobs(workload, duty, config.seed)
        self.series = Series()
        self.stats = RunStats()

    # -- what strategies may do -----------------------------------------------------
    def itype(self, name: str) -> InstanceType:
        try:
            return self.catalog.get(self.pool.cloud.value, name)
        except CatalogError as exc:
            raise SimError(str(exc)) from exc

    def hourly(self, itype: InstanceType, market: Market) -> float:
        price = itype.spot_usd if market is Market.SPOT else itype.on_demand_usd
        if price is None:
            raise SimError(f"no price for {itype.cloud} {itype.name}: pass a price file (--prices)")
        return price

    def spot_available(self, zone: str | None, now: float) -> bool:
        return self.spot.available(zone, now - self.start)

    def spot_scores(self, pools: Iterable[Pool], now: float) -> list[SpotScore]:
        """The stand-in Spot placement scores of ``SimConfig.spot_score_lag`` for each zone
        of ``pools`` (none without it)."""
        lag = self.config.spot_score_lag
        if lag is None:
            return []
        return [SpotScore.model_construct(
            cloud=p.cloud.value, region=p.region, zone=zone, instance_types=list(p.instance_types),
            score=9 if self.spot.available(zone, now - lag - self.start) else 2)
            for p in pools for zone in p.zones]

    def launch(self, type_name: str, market: Market, zone: str | None, now: float,
               pool: str | None = None, boot: float | None = None) -> SimNode:
        """Request a node, for every strategy alike: a spot launch into a zone without
        capacity is refused ``launch_attempt`` seconds later (never billed); until then it is
        in flight like any launch. A launch that succeeds is ready after the boot delay
        (``boot``, e.g. a warm node's start, or the pool's cold or baked path).
        ``pool`` ("team/pool") is kept with the node where a strategy buys for a placement
        group; its region is the zone's (zone names are unique across regions), and jobs
        run on any pool's node, as in one Slurm partition spanning the group."""
        itype = self.itype(type_name)
        self._last_launch[pool] = now
        node = self.cluster.new_node(itype, market, zone, self.hourly(itype, market), now, pool)
        if market is Market.SPOT and not self.spot_available(zone, now):
            node.reason = "capacity-error"
            self.clock.at(now + self.config.launch_attempt, Kind.NODE, lambda t: self._fail(node, t))
            return node
        delay = (self.boot_delay() if boot is None else boot) * self.boot_draw(now)
        self.clock.at(now + 0.4 * delay, Kind.NODE, lambda t: self._step(node, S.PROVISIONING,
                                                                          S.BOOTSTRAPPING, t))
        self.clock.at(now + delay, Kind.NODE, lambda t: self._step(node, S.BOOTSTRAPPING, S.READY, t))
        return node

    def boot_draw(self, now: float) -> float:
        """A boot time's factor, U(1 - boot_jitter, 1 + boot_jitter): from the strategy's own
        stream, or with ``shared_boot_draws`` the k-th draw of the minute ``now`` falls in,
        the same for every strategy of the seed (a draw bound to the k-th node ever
        launched would pair nodes launched days apart once two fleets differ)."""
        jitter = self.config.boot_jitter
        if not self.config.shared_boot_draws:
            return self.rng.uniform(1 - jitter, 1 + jitter)
        minute = int((now - self.start) // 60)
        k = self._draws[1] + 1 if minute == self._draws[0] else 0
        self._draws = (minute, k)
        return random.Random(f"{self.config.seed}:boot:{minute}:{k}").uniform(1 - jitter, 1 + jitter)

    def boot_delay(self) -> float:
        """A new node's boot-to-READY time before jitter: the pool's cold or baked path."""
        baked = self.pool.bootstrap.image == "baked"
        return self.config.baked_boot_delay if baked else self.config.boot_delay

    def drain(self, node: SimNode, now: float, trigger: str, timeout: float) -> None:
        self.cluster.drain(node, now, trigger)
        if node.state is S.DRAINING:
            since = node.state_since
            self.clock.at(now + timeout, Kind.NODE, lambda t: self._drain_timeout(node, since, t))

    def cancel_drain(self, node: SimNode, now: float) -> None:
        self.cluster.cancel_drain(node, now)

    def terminate(self, node: SimNode, now: float, cause: str) -> None:
        self.cluster.terminate(node, now, cause)

    def sample_util(self, now: float) -> None:
        """Record each observable node's GPU util (what a scrape at ``now`` would see).
        Without duty cycles a node's util changes only when its jobs do: it is kept with
        the node's ``jobs_version`` until then."""
        steady = self.duty is None
        for node in self.cluster.nodes.values():
            if node.state not in REPORTING:  # what Prometheus scrapes
                continue
            if not node.jobs:
                node.add_sample(now, 0.0)
            elif not steady:
                node.add_sample(now, self.node_util(node, now))
            else:
                if node.steady_util[0] != node.jobs_version:
                    node.steady_util = (node.jobs_version, self.node_util(node, now))
                node.add_sample(now, node.steady_util[1])

    def node_util(self, node: SimNode, now: float) -> float:
        per_gpu = [0.0] * node.gpus
        for job in node.jobs.values():
            duty = self._duty(job, now)
            for i, amount in job.slots:
                per_gpu[i] += duty * amount
        return sum(min(100.0, u) for u in per_gpu) / node.gpus if node.gpus else 0.0

    def _duty(self, job: SimJob, now: float) -> float:
        if self.duty is None:
            return self.config.default_util
        series = self.duty.series[job.duty]
        return series[(int((now - job.run_start) / self.duty.step) + job.duty_offset) % len(series)]

    # -- events ---------------------------------------------------------------------
    def _step(self, node: SimNode, expect: NodeState, target: NodeState, now: float) -> None:
        if node.name in self.cluster.nodes and node.state is expect:
            self.cluster.move(node, target, now)

    def _fail(self, node: SimNode, now: float) -> None:
        if node.name in self.cluster.nodes and node.state is S.PROVISIONING:
            self.cluster.move(node, S.PROVISION_FAILED, now, reason="capacity-error")
            self.strategy.capacity_error(self, node, now)

    def _drain_timeout(self, node: SimNode, since: float, now: float) -> None:
        if node.name in self.cluster.nodes and node.state is S.DRAINING and node.state_since == since:
            cause = _DRAIN_CAUSES.get(node.drain_trigger or "", "drain-timeout")
            self.cluster.kill_jobs(node, now, cause)
            self.cluster.move(node, S.DRAINED, now)

    def _outage(self, zone: str, now: float) -> None:
        for node in list(self.cluster.nodes.values()):
            if node.market is not Market.SPOT or node.zone != zone:
                continue
            if self._interrupt_rng.random() >= self.spot.interrupt_share:
                continue
            if node.state in (S.READY, S.DRAINING, S.DRAINED, S.BOOTSTRAPPING):
                self.stats.interruptions += 1
                self.demand(now)
                self.cluster.move(node, S.INTERRUPTED, now, reason="spot interruption notice")
                self.clock.at(now + self.config.spot_notice, Kind.NODE, partial(self._reclaim, node))
            elif node.state in (S.REQUESTED, S.PROVISIONING) and node.reason != "capacity-error":
                node.reason = "capacity-error"
                self.cluster.move(node, S.PROVISION_FAILED, now)
                self.strategy.capacity_error(self, node, now)

    def _reclaim(self, node: SimNode, now: float) -> None:
        if node.name in self.cluster.nodes and node.state is S.INTERRUPTED:
            self.cluster.terminate(node, now, "spot")

    def _tick(self, now: float) -> None:
        self._decide(now)
        nxt = self._next_tick = now + self.strategy.interval
        if nxt < self.end:
            self.clock.at(nxt, Kind.TICK, self._tick)

    def _decide(self, now: float) -> None:
        self.cluster.schedule(now)
        self.strategy.tick(self, now)
        self.stats.ticks += 1
        self._last_tick = now
        self.cluster.schedule(now)

    def demand(self, now: float) -> None:
        """Demand appeared between ticks (an arrival, a spot notice, a refused launch):
        decide ``wake_after`` after the last tick, once some pool's last launch attempt has
        passed. The service applies a pool's launches one at a time, so a tick woken while
        every pool's runs only queues its own behind them, and an apply's end is what starts
        them (a placement group's woken tick may still choose a busy pool: launched at once
        here, queued in the service)."""
        if self.strategy.wake_after is None:  # every refusal and notice comes here
            return
        launching = self._last_launch
        free = len(launching) < self.strategy.pool_count
        not_before = -math.inf if free else min(launching.values()) + self.config.launch_attempt
        self.wake(now, self.strategy.wake_after, not_before)

    def wake(self, now: float, gap: float | None, not_before: float = -math.inf) -> None:
        """Decide ``gap`` after the last tick (at ``now`` if that has passed, and not before
        ``not_before``) instead of at the next regular tick, unless that or another wake
        comes first: the service's tick waker (``tick.wake_after`` on demand,
        ``tick.follow_up`` on finished work), which moves the tick only when that is
        sooner."""
        if gap is None:
            return
        at = max(now, self._last_tick + gap, not_before)
        if at < self._next_tick and (self._wake_at is None or at < self._wake_at):
            self._wake_at = at  # a later wake already queued finds itself stale and skips
            self.clock.at(at, Kind.TICK, self._woken)

    def _woken(self, now: float) -> None:
        if now != self._wake_at:
            return
        self._wake_at = None
        self.stats.wakes += 1
        self._decide(now)

    def _sample(self, now: float) -> None:
        self.series.record(self, now)
        nxt = now + self.config.sample_every
        if nxt < self.end:
            self.clock.at(nxt, Kind.SAMPLE, self._sample)

    # -- the loop -------------------------------------------------------------------
    def run(self, progress: Callable[[float], None] | None = None) -> Replay:
        began, began_cpu = time.perf_counter(), time.process_time()
        for job in self.jobs:
            self.clock.at(job.job.arrival, Kind.ARRIVAL, partial(self.cluster.arrive, job))
        for offset, zone in self.spot.outage_events(self.end - self.start):
            self.clock.at(self.start + offset, Kind.OUTAGE, partial(self._outage, zone))
        self.strategy.begin(self, self.start)
        self.clock.at(self.start, Kind.TICK, self._tick)
        self.clock.at(self.start, Kind.SAMPLE, self._sample)
        report_at = self.start
        while (t := self.clock.next_time()) is not None and t < self.end:
            event = self.clock.pop()
            event.run(event.at)
            if event.kind in (Kind.FINISH, Kind.NODE, Kind.ARRIVAL) and (
                    self.clock.next_time() != event.at):
                self.cluster.schedule(event.at)
                if (event.kind is Kind.ARRIVAL and self.strategy.wake_after is not None
                        and self.cluster.pending_count()):
                    self.demand(event.at)
            if progress is not None and event.at - report_at >= 3600:
                progress(event.at)
                report_at = event.at
        self.series.record(self, self.end)
        self.stats.wall_seconds = time.perf_counter() - began
        self.stats.cpu_seconds = time.process_time() - began_cpu
        return self


def _sim_jobs(workload: Workload, duty: DutyCycles | None, seed: int) -> list[SimJob]:
    rng = random.Random(f"{seed}:duty")
    jobs = []
    for i, job in enumerate(workload.jobs):
        which = rng.randrange(len(duty)) if duty is not None else 0
        offset = rng.randrange(len(duty.series[which])) if duty is not None else 0
        jobs.append(SimJob(job=job, index=i, remaining=job.duration, duty=which, duty_offset=offset))
    return jobs

"""Run every strategy on the same workload, prices and spot market, plus the oracle."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from multiprocessing import get_context
from typing import Any

from autoscaler.catalog import Catalog
from autoscaler.engine.settings import EngineSettings
from autoscaler.engine.warm_pool import forecast_quantile
from autoscaler.forecast.predictive import Forecaster
from autoscaler.policy.models import Pool, TeamPolicy, pool_key
from autoscaler.sim.replay import Replay, SimConfig, SimError
from autoscaler.sim.results import StrategyResult, summarize
from autoscaler.sim.spot import SpotMarket
from autoscaler.sim.strategies.base import Strategy
from autoscaler.sim.strategies.ca_like import ClusterAutoscalerLike
from autoscaler.sim.strategies.engine import EngineStrategy
from autoscaler.sim.strategies.karpenter_like import KarpenterLike
from autoscaler.sim.strategies.oracle import oracle
from autoscaler.sim.strategies.predictive import PredictiveStrategy, train
from autoscaler.sim.strategies.static import StaticFleet
from autoscaler.sim.strategies.target_tracking import TargetTracking, fitting_type
from autoscaler.traces import DAY, DutyCycles, TraceError, Workload

BASELINES = ("static", "ca_like", "target_tracking")
ALL = ("ours", *BASELINES)
# "Best baseline" compares cost per delivered GPU-hour, and only among baselines that
# delivered at least this share of the GPU-hours ours delivered: a fleet that never scales
# up is cheap and does not do the work. Others are flagged in the table, not ranked.
SERVED_SHARE = 0.95


@dataclass
class SimReport:
    pool: str
    window_days: tuple[float, float]
    config: SimConfig
    workload: dict[str, Any]
    results: list[StrategyResult]
    oracle: StrategyResult
    wall_seconds: float
    notes: list[str] = field(default_factory=list)
    spot: dict[str, object] = field(default_factory=dict)

    def result(self, name: str) -> StrategyResult:
        return next(r for r in self.results if r.name == name)

    def unranked(self, r: StrategyResult) -> str | None:
        """Why a baseline is left out of the ranking (None: it is ranked)."""
        if r.name not in BASELINES:
            return None
        ours = next((x for x in self.results if x.name == "ours"), self.oracle)
        if r.gpu_hours_delivered >= SERVED_SHARE * ours.gpu_hours_delivered:
            return None
        return (f"not ranked: delivered {r.delivered_share:.0%} of the demand, under "
                f"{SERVED_SHARE:.0%} of what {ours.name} delivered ({ours.delivered_share:.0%})")

    def best_baseline(self) -> StrategyResult | None:
        ranked = [r for r in self.results if r.name in BASELINES and self.unranked(r) is None
                  and r.cost_per_delivered is not None]
        return min(ranked, key=lambda r: r.cost_per_delivered or 0.0, default=None)

    def replay_speedup(self) -> float:
        simulated = (self.window_days[1] - self.window_days[0]) * DAY
        return simulated / self.wall_seconds if self.wall_seconds > 0 else float("inf")


def select_pool(policies: dict[str, TeamPolicy], key: str | None) -> tuple[TeamPolicy, Pool, list[str]]:
    """The pool to simulate: ``team/pool``, or the first pool in priority order."""
    ordered = sorted(policies.values(), key=lambda p: (p.priority.rank, p.team))
    keys = [pool_key(p.team, pool.name) for p in ordered for pool in p.pools]
    notes = []
    if key is None:
        if not keys:
            raise SimError("the policy directory defines no pool")
        key = keys[0]
        if len(keys) > 1:
            notes.append(f"simulating pool {key} (first in priority order); choose another with "
                         f"--pool ({', '.join(keys[1:])})")
    team, _, name = key.partition("/")
    if team not in policies or name not in {p.name for p in policies[team].pools}:
        raise SimError(f"no pool {key!r} in the policies (known: {', '.join(keys)})")
    return policies[team], policies[team].pool(name), notes


def build_strategies(names: Sequence[str], policy: TeamPolicy, pool: Pool, catalog: Catalog,
                     workload: Workload, config: SimConfig) -> list[Strategy]:
    quota = policy.quota.max_gpus
    make: dict[str, Callable[[], Strategy]] = {
        "ours": lambda: EngineStrategy(policy, pool, catalog, interval=config.tick,
                                       settings=EngineSettings(), wake_after=config.wake_after,
                                       forecaster=warm_forecaster(pool, workload, config)),
        "static": lambda: StaticFleet.for_workload(workload, pool, catalog, quota),
        "ca_like": lambda: ClusterAutoscalerLike(quota_gpus=quota),
        "karpenter_like": lambda: KarpenterLike(quota_gpus=quota),
        "target_tracking": lambda: TargetTracking(fitting_type(workload, pool, catalog), quota_gpus=quota),
        "predictive": lambda: PredictiveStrategy.for_workload(policy, pool, catalog, workload, config),
    }
    unknown = [n for n in names if n not in make]
    if unknown:
        raise SimError(f"unknown strategy {', '.join(unknown)} (known: {', '.join(make)})")
    return [make[n]() for n in names]


def warm_forecaster(pool: Pool, workload: Workload, config: SimConfig) -> Forecaster | None:
    """For warm_pool.size forecast: the pool's forecast (predictive settings), which the warm
    target follows; "ours" holds no floor from it (that is the "predictive" strategy)."""
    quantile = forecast_quantile(pool)
    if quantile is None:
        return None
    return train(pool.predictive, workload, config, quantile)


def _replay_one(name: str, *, workload: Workload, policy: TeamPolicy, pool: Pool, catalog: Catalog,
                config: SimConfig, spot: SpotMarket | None, duty: DutyCycles | None,
                progress: Callable[[str, float], None] | None = None) -> StrategyResult:
    strategy = build_strategies([name], policy, pool, catalog, workload, config)[0]
    replay = Replay(workload, pool, catalog, config, strategy, spot=spot, duty=duty)
    replay.run(progress=partial(progress, name) if progress else None)
    result = summarize(replay)
    if isinstance(strategy, EngineStrategy):
        result.extra.update(decide_calls=strategy.decisions,
                            decide_seconds=round(strategy.decide_seconds, 3),
                            actions=dict(sorted(strategy.actions.items())))
        if strategy.warm is not None:
            result.extra.update(strategy.warm.counts, warm_cost_usd=round(
                strategy.warm.cost_closed + strategy.warm.open_cost(workload.end), 2))
    if progress:
        progress(name, workload.end)
    return result


def run_all(workload: Workload, policy: TeamPolicy, pool: Pool, catalog: Catalog, config: SimConfig,
            *, spot: SpotMarket | None = None, duty: DutyCycles | None = None,
            strategies: Sequence[str] = ALL, workers: int = 1, assume_available: bool = False,
            progress: Callable[[str, float], None] | None = None) -> SimReport:
    """Replay each strategy (``workers`` > 1: in parallel processes) and add the oracle.

    A pool zone the spot trace lacks is an error unless ``assume_available``."""
    began = time.perf_counter()
    notes: list[str] = []
    if spot is not None:
        try:
            spot = spot.for_pool(list(pool.zones), assume_available)
        except TraceError as exc:
            raise SimError(str(exc)) from exc
        if spot.assumed:
            notes.append(f"--assume-available: zone(s) {', '.join(spot.assumed)} have no spot trace "
                         f"and are treated as always having spot capacity")
    build_strategies(strategies, policy, pool, catalog, workload, config)  # fail early on bad names
    job = partial(_replay_one, workload=workload, policy=policy, pool=pool, catalog=catalog, config=config,
                  spot=spot, duty=duty)
    if workers > 1 and len(strategies) > 1:
        # Strategies are independent replays: one process each, results gathered in order.
        with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("fork")) as executor:
            futures = [executor.submit(job, name) for name in strategies]
            results = []
            for name, future in zip(strategies, futures, strict=True):
                results.append(future.result())
                if progress:
                    progress(name, workload.end)
    else:
        results = [job(name, progress=progress) for name in strategies]
    stats = workload.stats
    return SimReport(
        pool=pool_key(policy.team, pool.name),
        window_days=(workload.start / DAY, workload.end / DAY), config=config,
        workload={"jobs": len(workload.jobs), "carried_in": stats.carried,
                  "demand_gpu_hours": round(workload.demand_gpu_hours(), 3),
                  "skipped_cpu_only": stats.cpu_only, "skipped_never_scheduled": stats.never_scheduled,
                  "skipped_zero_length": stats.zero_length, "outside_window": stats.outside_window,
                  "rows": stats.rows},
        results=results, oracle=oracle(workload, pool, catalog, config.sample_every),
        wall_seconds=time.perf_counter() - began, notes=notes,
        spot=spot.describe() if spot is not None else {"zones_traced": [], "note": "no spot trace: "
                                                        "spot always available"},
    )

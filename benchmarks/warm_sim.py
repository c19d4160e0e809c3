"""bench_warm.py --sim: warm pools in the simulator (no root needed).

Replays the benchmark trace (the Alibaba v2023 pod list from day 110, bench_sim.py's data,
policy, spot and duty-cycle traces) three times, boot times by path as sim/boot.py states
their sources (cold 240 s, warm 67 s, each jittered +-25%):

* d = p95_wait_cold_s: "ours" with the benchmark policy, every launch cold;
* "predictive": the same policy with ``predictive: {mode: scale}`` (bench_predictive.py's);
* e, f = p95/p50_wait_warm_forecast_s: predictive plus ``warm_pool: {size: forecast,
  max: M}``; g = cost_ratio_warm_over_predictive: its cost (warm nodes' bootstrap and
  volume included) over predictive's.

Targets (issue 37): e <= 0.5 x d, f == 0, g <= 1.03.

``--capacity`` sets the pool's market in all three. ``on-demand`` (the default) and
``fallback`` (spot first, on-demand when refused) give it the on-demand warm nodes the
service runs; ``bench`` keeps the benchmark pool spot-only, so its warm nodes are spot,
which the service refuses (EC2 stops a spot instance only as a persistent request). A warm
node serves only launches of its own market, so under ``fallback`` it serves the on-demand
launches alone.
"""

from __future__ import annotations

import argparse

from bench_sim import DUTY, POD_LIST, SPOT, START_DAY
from rich.console import Console

from autoscaler.catalog import default_catalog
from autoscaler.policy import load_policies
from autoscaler.policy.models import Pool, Predictive, WarmPool
from autoscaler.sim.replay import SimConfig
from autoscaler.sim.results import StrategyResult
from autoscaler.sim.run import run_all, select_pool
from autoscaler.sim.spot import load_spot_traces
from autoscaler.traces import load_duty_cycles, load_pod_list

# --capacity: the benchmark pool is spot-only, so its warm nodes are spot, which the service
# refuses (service/config/warm_pools.py); these give it on-demand warm nodes.
CAPACITY: dict[str, dict[str, object]] = {
    "fallback": {"spot_fallback": "on-demand"},  # spot first; warm nodes serve the fallback
    # every launch on-demand; warm nodes serve them all (no spot refusals: no spot_scarcity)
    "on-demand": {"spot_percent": 0, "spot_scarcity": None},
}


def describe(name: str, r: StrategyResult) -> str:
    warm = {k: v for k, v in r.extra.items() if k.startswith("warm_")}
    return (f"{name}: cost ${r.cost_usd:,.0f}, wait p50/p95 {r.wait_p50_s:.0f}/{r.wait_p95_s:.0f} s, "
            f"delivered {r.delivered_share:.1%}, launches {r.launches}"
            + (f", {warm}" if warm else ""))


def run(args: argparse.Namespace) -> int:
    console = Console(stderr=True, width=160)
    catalog = default_catalog()
    team, pool, _ = select_pool(load_policies(args.policies, catalog), None)
    workload = load_pod_list(args.data / POD_LIST, START_DAY, args.days)
    workload.before = load_pod_list(args.data / POD_LIST, 0, START_DAY).jobs
    spot = load_spot_traces(args.data / SPOT)
    duty = load_duty_cycles(args.data / DUTY)
    config = SimConfig(seed=args.seed)
    console.print(f"{len(workload.jobs)} jobs, days {START_DAY}-{START_DAY + args.days}; boot "
                  f"cold {config.boot_delay:g} s, warm {config.warm_boot_delay:g} s (sim/boot.py)")
    if args.capacity != "bench":  # on-demand warm nodes, the only ones the service runs
        pool = pool.model_copy(update={"capacity": pool.capacity.model_copy(
            update=CAPACITY[args.capacity])})
    predictive = pool.model_copy(update={"predictive": Predictive(mode="scale")})
    size = "forecast" if args.warm_size is None else args.warm_size
    warm = predictive.model_copy(update={"warm_pool": WarmPool(size=size, max=args.warm_max)})

    def replay(p: Pool, names: tuple[str, ...]) -> dict[str, StrategyResult]:
        pol = team.model_copy(update={"pools": [p]})
        report = run_all(workload, pol, pol.pools[0], catalog, config, spot=spot, duty=duty,
                         strategies=names, workers=args.workers)
        return {r.name: r for r in report.results}

    base = replay(predictive, ("ours", "predictive"))
    warmed = replay(warm, ("predictive",))["predictive"]
    cold, pred = base["ours"], base["predictive"]
    for name, r in (("cold (ours)", cold), ("predictive", pred), ("predictive + warm", warmed)):
        console.print(describe(name, r))
    print(f"p95_wait_cold_s={cold.wait_p95_s:.1f} p95_wait_warm_forecast_s={warmed.wait_p95_s:.1f} "
          f"p50_wait_warm_forecast_s={warmed.wait_p50_s:.1f} "
          f"cost_ratio_warm_over_predictive={warmed.cost_usd / pred.cost_usd:.3f}")
    return 0

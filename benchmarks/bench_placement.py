"""Benchmark (issue 35): a placement group of three regions' V100 pools, against each region
alone and a SkyPilot-like failover, on bench_sim's window and workload.

    python benchmarks/bench_placement.py [--data DIR] [--seed 0] [--start-day N --days M]
                                         [--spot-trace DIR] [--workers 2] [--follow-up 10]

The spot market is the SkyPilot V100 (p3.2xlarge) availability traces of February 2023, one
file per zone, of us-east-1 (a, c, d, f), us-east-2 (a, b) and us-west-2 (a, b, c); zones
are named per region, so one market serves all three. Five replays of the same jobs:

* group: decide() with the three region pools in one placement group
  (``sim/strategies/group.py``): each pending job is listed under us-east-1 with the three
  pools as options, and the engine's placement picks the pool for each launch; a refused
  launch is decided again 10 s after the last tick, as the service's ``tick.follow_up``
  does in a pool with placement-group mates;
* alone_<region>: decide() with that region's pool only (``sim/strategies/engine.py``);
  the best of the three is the cheapest, and its p95 wait is the one compared;
* failover: SkyPilot-like (``sim/strategies/failover.py``): CA-like scaling, regions tried
  in the fixed order us-east-1, us-east-2, us-west-2, on a refusal in every zone of a
  region the next region, never back.

Every pool is bench_spot's "ours" pool (the bench policy, ``spot_fallback: on-demand``)
moved to its region and zones. ``scale_up.headroom_gpus`` (one GPU) is set on the group's
first pool only: the single pools keep one free GPU for the whole partition, and so does
the group (three pools with one each would keep three).

Every replay takes the same boot-time draws (``SimConfig.shared_boot_draws``, common random
numbers keyed by the minute of the launch, as bench_wait's rows do): a node the group and a
region alone launch in the same minute boots in the same time, so c against d compares
where and when each launched, not two streams of draws (before 2026-12-06 each replay
drew from its own stream, in the order of its launches).

Prices: the catalog has one price per instance type (p3.2xlarge on-demand $3.06/h, spot
= on-demand x (1 - spot_discount)) and no per-region prices, so the three regions cost the
same here; the placement group can only gain by finding spot capacity (and by waiting less),
not by a cheaper region. No per-region figure is invented.

The last line is::

    cost_group=<a> cost_best_single_region=<b> p95_wait_group_s=<c>
    p95_wait_best_single_region_s=<d> cost_failover_baseline=<e> od_share_group=<f>

(one line); waits are bench_sim's p95 job wait; f is the on-demand share of the group's paid
GPU-hours. Targets (issue 35): a <= 0.9 b, c <= d, a <= e; the ratios are printed on stderr.

Why a <= 0.9 b is out of reach with these traces and one price per type (2026-12-03):
us-east-1 is the best region alone (every zone dry 12% of the 45-day trace; us-east-2 64%,
us-west-2 80%), and while all of us-east-1 is dry another region has spot only 21% of that
time (printed for the window run). At equal prices a group can only turn us-east-1's
fallback on-demand hours into spot during that 21%; bench_spot's "ours" (the same pool as
alone_us-east-1) pays $39.0k with 7.5% on-demand against $32.4k for spot-only on the full
window, so even all of the difference would be 0.83 b and a fifth of it about 0.97 b.
Measured (seed 0, 2026-12-03; the full window did not finish within the time at hand on
the shared 2-core machine): days 110-120 (``--days 10``, 402 s wall) ``cost_group=6990
cost_best_single_region=6827 p95_wait_group_s=175.5 p95_wait_best_single_region_s=180.4
cost_failover_baseline=16898 od_share_group=0.023`` (a/b 1.02, c <= d, a/e 0.41); days
110-115 a/b 1.06, p95 0 vs 331 s, a/e 0.66. In both the group launched only in us-east-1,
with more on-demand GPU-hours than us-east-1 alone (169 vs 96 on days 110-120, not
explained yet). With max_wait 0s
(high priority), one refused us-east-1 zone sends jobs past max_wait on-demand in us-east-1
(engine/scale_up.py) while the placement quote still counts us-east-1's other zones as spot
at the other regions' price, so the job stays listed under us-east-1 and the group never sees
us-east-1 dry; ``--max-wait 10m`` did not change where it launched on that window.
"""

from __future__ import annotations

import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_sim
import bench_spot

from autoscaler.catalog import default_catalog
from autoscaler.policy import load_policies
from autoscaler.policy.models import Pool, TeamPolicy
from autoscaler.sim.replay import Replay, SimConfig
from autoscaler.sim.results import StrategyResult, summarize
from autoscaler.sim.run import select_pool
from autoscaler.sim.spot import SpotMarket, load_spot_traces
from autoscaler.sim.strategies.base import Strategy
from autoscaler.sim.strategies.engine import EngineStrategy
from autoscaler.sim.strategies.failover import Region, SkyPilotFailover
from autoscaler.sim.strategies.group import GroupEngineStrategy
from autoscaler.traces import DutyCycles, Workload, load_duty_cycles, load_pod_list

# The zones the traces cover, per region; the order of regions is the failover's order.
REGIONS = {
    "us-east-1": ["us-east-1a", "us-east-1c", "us-east-1d", "us-east-1f"],
    "us-east-2": ["us-east-2a", "us-east-2b"],
    "us-west-2": ["us-west-2a", "us-west-2b", "us-west-2c"],
}
GROUP = "v100"
VARIANTS = ("group", *(f"alone_{r}" for r in REGIONS), "failover")


def region_pools(base: Pool, max_wait: str | None = None) -> list[Pool]:
    """bench_spot's "ours" pool in each region, one placement group, headroom on the first;
    ``max_wait``: the pools' ``capacity.max_wait`` (None: the team priority's default)."""
    ours = bench_spot.variant_pool(base, "on-demand").model_dump()
    capacity = {**ours["capacity"], "max_wait": max_wait} if max_wait else ours["capacity"]
    pools = []
    for i, (region, zones) in enumerate(REGIONS.items()):
        scale_up = {**ours["scale_up"], "headroom_gpus": bench_spot.HEADROOM_GPUS if i == 0 else 0}
        pool = bench_spot.in_zones(Pool.model_validate({**ours, "capacity": capacity}), zones)
        pools.append(Pool.model_validate({**pool.model_dump(), "name": f"{base.name}-{region}",
                                          "region": region, "placement_group": GROUP,
                                          "scale_up": scale_up}))
    return pools


def region_dry(spot: SpotMarket, zones: list[str], offset: float) -> bool:
    return not any(spot.available(z, offset) for z in zones)


def spill_room(spot: SpotMarket, seconds: float) -> tuple[float, float]:
    """(share of the window with every us-east-1 zone dry, share of that time another
    region has a zone with spot): the most a group can gain over us-east-1 alone at equal
    prices is spot instead of on-demand during the second."""
    first, *others = REGIONS.values()
    gap = min(t.gap for t in spot.zones.values())
    dry = spill = 0
    for i in range(int(seconds // gap)):
        if region_dry(spot, first, i * gap):
            dry += 1
            spill += not all(region_dry(spot, zones, i * gap) for zones in others)
    steps = max(1, int(seconds // gap))
    return dry / steps, spill / max(1, dry)


def strategy(name: str, team: TeamPolicy, pools: list[Pool], tick: float,
             follow_up: float | None, wake_after: float | None = None) -> tuple[Strategy, Pool]:
    """The variant's strategy and the pool its replay is set up with (the first it buys for)."""
    catalog = default_catalog()
    if name == "group":
        return GroupEngineStrategy(team, pools, catalog, interval=tick, follow_up=follow_up,
                                   wake_after=wake_after), pools[0]
    if name == "failover":
        regions = [Region(f"{team.team}/{p.name}", tuple(p.zones)) for p in pools]
        return SkyPilotFailover(regions, quota_gpus=team.quota.max_gpus), pools[0]
    pool = pools[list(REGIONS).index(name.removeprefix("alone_"))]
    alone = Pool.model_validate({**pool.model_dump(), "placement_group": None, "scale_up": {
        **pool.scale_up.model_dump(), "headroom_gpus": bench_spot.HEADROOM_GPUS}})
    return EngineStrategy(team, alone, catalog, interval=tick, wake_after=wake_after), alone


def replay(name: str, workload: Workload, team: TeamPolicy, pools: list[Pool], config: SimConfig,
           spot: SpotMarket, duty: DutyCycles,
           follow_up: float | None) -> tuple[StrategyResult, dict[str, Any]]:
    strat, pool = strategy(name, team, pools, config.tick, follow_up, config.wake_after)
    run = Replay(workload, pool, default_catalog(), config, strat, spot=spot, duty=duty)
    run.run()
    extra: dict[str, Any] = {}
    if isinstance(strat, GroupEngineStrategy):
        extra["launched"] = {f"{p} {m}": n for (p, m), n in sorted(strat.launched.items())}
    if isinstance(strat, SkyPilotFailover):
        extra["region_moves_at_day"] = [round(t / 86400, 2) for t in strat.buyer.moves]
    return summarize(run), extra


def main() -> int:
    parser = bench_sim.trace_parser(__doc__)
    parser.add_argument("--trace", type=Path, help="pod list CSV (default: bench_sim's)")
    parser.add_argument("--start-day", type=float, default=bench_sim.START_DAY)
    parser.add_argument("--days", type=float, default=bench_sim.DAYS)
    parser.add_argument("--spot-trace", type=Path, help="spot availability directory (default: bench_sim's)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--follow-up", type=float, default=10.0, help="seconds after the last "
                        "tick at which the group decides again after a refused launch (the "
                        "service's tick.follow_up; 0: at the next tick)")
    parser.add_argument("--max-wait", help="capacity.max_wait of every pool, e.g. 10m (default: the "
                        "team priority's, 0s for the bench team)")
    bench_sim.add_wake_after(parser, "the group and each region alone")
    parser.add_argument("--score-lag", type=float, default=None, metavar="SECONDS",
                        help="what if: the group and each region alone see a stand-in Spot "
                        "placement score per zone, 9 where the trace had spot this many seconds "
                        "before, else 2 (SimConfig.spot_score_lag; the traces carry no score)")
    args = parser.parse_args()
    console = Console(stderr=True, width=160)

    team, base, _ = select_pool(load_policies(args.policies, default_catalog()), None)
    pools = region_pools(base, args.max_wait)
    workload = load_pod_list(args.trace or args.data / bench_sim.POD_LIST, args.start_day, args.days)
    spot = load_spot_traces(args.spot_trace or args.data / bench_sim.SPOT).for_pool(
        [z for p in pools for z in p.zones], False)
    duty = load_duty_cycles(args.data / bench_sim.DUTY)
    config = SimConfig(seed=args.seed, wake_after=args.wake_after, shared_boot_draws=True,
                       spot_score_lag=args.score_lag)
    itype = default_catalog().get("aws", "p3.2xlarge")
    console.print(f"{len(workload.jobs)} jobs, days {args.start_day:g}+{args.days:g}; regions "
                  f"{', '.join(REGIONS)}; prices: one price for every region (p3.2xlarge "
                  f"on-demand ${itype.on_demand_usd}/h, spot ${itype.spot_usd}/h): the simulator "
                  f"prices a type alike in every region, and the catalog has no p3.2xlarge price "
                  f"of its own for us-east-2 or us-west-2; "
                  f"max_wait {pools[0].capacity.wait_limit(team.priority)}")
    dry, spill = spill_room(spot, workload.end - workload.start)
    console.print(f"spot trace over the window: every us-east-1 zone dry {dry:.1%} of the time; another "
                  f"region has spot during {spill:.1%} of that")
    with ProcessPoolExecutor(max_workers=args.workers, mp_context=get_context("fork")) as pool_exec:
        futures = {n: pool_exec.submit(replay, n, workload, team, pools, config, spot, duty,
                                       args.follow_up or None) for n in VARIANTS}
        out = {n: f.result() for n, f in futures.items()}
    res = {n: r for n, (r, _) in out.items()}
    for n, (r, extra) in out.items():
        console.print(f"{bench_sim.outcome(n, r)}, refused attempts {r.failed_launches}, "
                      f"replay {r.wall_seconds:.0f} s {extra or ''}")
    best = min((n for n in res if n.startswith("alone_")), key=lambda n: res[n].cost_usd)
    a, b, e = res["group"].cost_usd, res[best].cost_usd, res["failover"].cost_usd
    c, d = res["group"].wait_p95_s, res[best].wait_p95_s
    console.print(f"best single region: {best}; targets: a <= 0.9 b {a <= 0.9 * b} (a/b {a / b:.3f}); "
                  f"c <= d {c <= d} ({c:.1f} vs {d:.1f} s); a <= e {a <= e} (a/e {a / e:.3f})")
    print(f"cost_group={a:.0f} cost_best_single_region={b:.0f} p95_wait_group_s={c:.1f} "
          f"p95_wait_best_single_region_s={d:.1f} cost_failover_baseline={e:.0f} "
          f"od_share_group={res['group'].on_demand_share:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

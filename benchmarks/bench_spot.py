"""Benchmark: the spot strategy on bench_sim's window, pool and spot trace.

    python benchmarks/bench_spot.py [--data DIR] [--seed 0] [--trace PATH --start-day N --days M]
                                    [--spot-trace PATH] [--workers 2]

Four replays of the same workload and spot market (bench_sim's setup, reused):

* ours: decide() with the bench policy but ``spot_fallback: on-demand`` (the team is high
  priority, so ``capacity.max_wait`` is 0: during a spot outage pending jobs go on-demand at
  once, instead of walking the zones one refusal at a time);
* spot_only: the same with ``spot_fallback: none`` (bench_sim's policy);
* ca_like_fallback: the Cluster-Autoscaler-like baseline with the same fallback;
* karpenter_like: CA-like scaling, spot spread over zones, ICE cache, fallback, no return.

The last line is::

    cost_ours=<a> cost_spot_only=<b> cost_karpenter_like=<c> p95_wait_ours_s=<d>
    p95_wait_ca_like_fallback_s=<e> p95_wait_spot_only_s=<f> od_share_ours=<g> moves_to_spot=<h>

(one line); waits are bench_sim's p95 job wait; g is the on-demand share of ours' paid
GPU-hours; h counts ours' fallback on-demand nodes drained once their spot replacement was
READY (``capacity.return_to_spot``, on in the bench policy). Each variant's on-demand share,
moves and the work the moves redid (GPU-hours) are printed on stderr.
"""

from __future__ import annotations

import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_sim

from autoscaler.catalog import default_catalog
from autoscaler.policy import load_policies
from autoscaler.policy.models import Pool, TeamPolicy
from autoscaler.sim.replay import Replay, SimConfig
from autoscaler.sim.results import StrategyResult, summarize
from autoscaler.sim.run import select_pool
from autoscaler.sim.spot import SpotMarket, load_spot_traces
from autoscaler.sim.strategies.base import Strategy
from autoscaler.sim.strategies.ca_like import CaSettings, ClusterAutoscalerLike
from autoscaler.sim.strategies.engine import EngineStrategy
from autoscaler.sim.strategies.karpenter_like import KarpenterLike
from autoscaler.traces import DutyCycles, Workload, load_duty_cycles, load_pod_list

VARIANTS = ("ours", "spot_only", "ca_like_fallback", "karpenter_like")


# One whole GPU kept free (scale_up.headroom_gpus) for ours and spot_only: 98.8% of the
# window's jobs ask for at most one GPU, and a job arriving at a full pool waits a boot
# (240 s); 155 jobs arrive a day, 0.43 per boot on average, so one free GPU serves the next
# arrival while its own replacement boots. It costs one spot V100, ~$0.92/h.
HEADROOM_GPUS = 1


def variant_pool(pool: Pool, fallback: str) -> Pool:
    """The bench pool with a variant's ``spot_fallback`` and the headroom (which the
    baselines' own rules do not read)."""
    return pool.model_copy(update={
        "capacity": pool.capacity.model_copy(update={"spot_fallback": fallback}),
        "scale_up": pool.scale_up.model_copy(update={"headroom_gpus": HEADROOM_GPUS})})


def in_zones(pool: Pool, zones: list[str]) -> Pool:
    """The pool cut to ``zones``. Its ``capacity.spot_scarcity`` counts the bench pool's four
    us-east-1 zones; in fewer it asks for at most all of them (3 of 4 is more than a
    two-zone market has, which the service would refuse at load)."""
    scarce = pool.capacity.spot_scarcity
    capacity = pool.capacity if scarce is None or scarce.zones <= len(zones) else (
        pool.capacity.model_copy(update={"spot_scarcity": scarce.model_copy(update={"zones": len(zones)})}))
    return pool.model_copy(update={"zones": zones, "capacity": capacity})


def strategy(name: str, team: TeamPolicy, pool: Pool, tick: float,
             ca: CaSettings | None = None, wake_after: float | None = None) -> Strategy:
    quota = team.quota.max_gpus
    if name in ("ours", "spot_only"):
        return EngineStrategy(team, pool, default_catalog(), interval=tick, wake_after=wake_after)
    if name == "ca_like_fallback":
        return ClusterAutoscalerLike(quota_gpus=quota, settings=ca)
    return KarpenterLike(quota_gpus=quota)


def replay(name: str, workload: Workload, team: TeamPolicy, base: Pool, config: SimConfig,
           spot: SpotMarket, duty: DutyCycles, ca: CaSettings | None = None) -> StrategyResult:
    """One variant's replay (``ca``: the CA-like baseline's settings, its defaults if None)."""
    pool = variant_pool(base, "none" if name == "spot_only" else "on-demand")
    chosen = strategy(name, team, pool, config.tick, ca, config.wake_after)
    run = Replay(workload, pool, default_catalog(), config, chosen, spot=spot, duty=duty)
    run.run()
    return summarize(run)



def _ratio(x: float, y: float) -> str:
    """x / y for the targets line; a short window can leave y at 0 (no wait at all)."""
    return f"{x / y:.2f}" if y else ("1.00" if not x else "inf")

def main() -> int:
    parser = bench_sim.trace_parser(__doc__)
    parser.add_argument("--trace", type=Path, help="pod list CSV (default: bench_sim's)")
    parser.add_argument("--start-day", type=float, default=bench_sim.START_DAY)
    parser.add_argument("--days", type=float, default=bench_sim.DAYS)
    parser.add_argument("--spot-trace", type=Path, help="spot availability directory (default: bench_sim's)")
    parser.add_argument("--workers", type=int, default=2)
    bench_sim.add_wake_after(parser, "ours and spot-only")
    args = parser.parse_args()
    console = Console(stderr=True, width=160)

    team, pool, _ = select_pool(load_policies(args.policies, default_catalog()), None)
    workload = load_pod_list(args.trace or args.data / bench_sim.POD_LIST, args.start_day, args.days)
    spot = load_spot_traces(args.spot_trace or args.data / bench_sim.SPOT).for_pool(list(pool.zones), False)
    duty = load_duty_cycles(args.data / bench_sim.DUTY)
    config = SimConfig(seed=args.seed, wake_after=args.wake_after)
    with ProcessPoolExecutor(max_workers=args.workers, mp_context=get_context("fork")) as pool_exec:
        futures = {n: pool_exec.submit(replay, n, workload, team, pool, config, spot, duty) for n in VARIANTS}
        res = {n: f.result() for n, f in futures.items()}
    for n, r in res.items():
        console.print(f"{bench_sim.outcome(n, r)}, moves to spot {r.moves_to_spot} redoing "
                      f"{r.gpu_hours_lost_by_cause.get('return-to-spot', 0.0):,.1f} GPU-h")
    ours = res["ours"]
    a, b, c = (res[n].cost_usd for n in ("ours", "spot_only", "karpenter_like"))
    d, e, f = (res[n].wait_p95_s for n in ("ours", "ca_like_fallback", "spot_only"))
    console.print(f"targets: a <= 1.25 b {a <= 1.25 * b} ({_ratio(a, b)}); a <= 0.6 c {a <= 0.6 * c} "
                  f"({_ratio(a, c)}); d <= e {d <= e}; d <= 0.2 f {d <= 0.2 * f} ({_ratio(d, f)})")
    print(f"cost_ours={a:.0f} cost_spot_only={b:.0f} cost_karpenter_like={c:.0f} p95_wait_ours_s={d:.1f} "
          f"p95_wait_ca_like_fallback_s={e:.1f} p95_wait_spot_only_s={f:.1f} "
          f"od_share_ours={ours.on_demand_share:.3f} moves_to_spot={ours.moves_to_spot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

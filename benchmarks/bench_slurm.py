"""Benchmark: hybrid burst from an on-prem Slurm partition, in the simulator.

The benchmark job trace (days 110-149 of the Alibaba v2023 pod list, V100 spot outages,
GenAI duty cycles, as bench_sim) runs on a cluster with static on-prem nodes sized to the
trace's median demand (p3.8xlarge-like, 4 x V100 each; jobs go on them first, as Slurm's
node weights make them) plus the benchmark's cloud pool. Two ways of buying for it, both
through the same decide():

* ours: the pool declares the on-prem nodes (``cluster.on_prem``), so pending jobs that fit
  their free GPUs buy nothing and, burst-only, a job that does not fit is bought for only
  after ``--burst-after`` (default: 0s, 5m and 15m are run; the last line reports 0s);
* partition_only: today's behaviour before on_prem: demand counted by partition, on-prem
  free GPUs ignored, every pending job bought for at once.

    python benchmarks/bench_slurm.py [--data ../shared/data] [--seed 0] [--burst-after 0s,5m,15m]

``names_declared`` counts the NodeName lines of the slurm.conf the sandbox writes for the
benchmark policy in dynamic mode (what an operator must pre-declare). The last line is::

    cloud_gpu_hours_ours=<a> cloud_gpu_hours_partition_only=<b> p95_wait_ours_s=<c>
    p95_wait_partition_only_s=<d> names_declared=<n>

(one line). Targets: a <= 0.8 x b at c <= d, n == 0.
"""

from __future__ import annotations

import math
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from bench_sim import DAYS, DUTY, POD_LIST, SPOT, START_DAY, trace_parser
from rich.console import Console

from autoscaler.catalog import default_catalog
from autoscaler.engine.settings import EngineSettings
from autoscaler.policy import load_policies
from autoscaler.policy.duration import parse_duration
from autoscaler.policy.models import Pool, TeamPolicy
from autoscaler.sim.replay import Replay, SimConfig
from autoscaler.sim.results import StrategyResult, summarize
from autoscaler.sim.run import select_pool
from autoscaler.sim.spot import load_spot_traces
from autoscaler.sim.strategies.engine import EngineStrategy
from autoscaler.traces import Workload, load_duty_cycles, load_pod_list

ON_PREM_TYPE = "p3.8xlarge"  # 4 x V100: an on-prem server of the trace's GPU
SAMPLE_S = 300.0


def median_demand_gpus(workload: Workload) -> float:
    """GPUs the trace's jobs would hold at each 5-minute mark if each ran on arrival."""
    marks = np.arange(workload.start, workload.end, SAMPLE_S)
    held = np.zeros(len(marks))
    for job in workload.jobs:
        lo = np.searchsorted(marks, job.arrival)
        hi = np.searchsorted(marks, job.arrival + job.duration)
        held[lo:hi] += job.gpus
    return float(np.median(held))


def variant(policy: TeamPolicy, pool: Pool, nodes: int, burst_after: str | None
            ) -> tuple[TeamPolicy, Pool]:
    cluster: dict[str, object] = {"kind": "slurm", "partition": "gpu"}
    if burst_after is not None:
        cluster["on_prem"] = {"nodes": f"onprem[001-{nodes:03d}]", "burst_after": burst_after}
    changed = Pool.model_validate({**pool.model_dump(mode="json"), "cluster": cluster})
    team = TeamPolicy.model_validate({**policy.model_dump(mode="json"),
                                      "pools": [changed.model_dump(mode="json")]})
    return team, team.pools[0]


def replay(name: str, policy: TeamPolicy, pool: Pool, workload: Workload, config: SimConfig,
           data: Path) -> tuple[str, StrategyResult]:
    catalog = default_catalog()
    strategy = EngineStrategy(policy, pool, catalog, interval=config.tick, settings=EngineSettings(),
                              wake_after=config.wake_after)
    run = Replay(workload, pool, catalog, config, strategy, spot=load_spot_traces(data / SPOT),
                 duty=load_duty_cycles(data / DUTY)).run()
    return name, summarize(run)


def names_declared(policy: TeamPolicy) -> int:
    """NodeName lines of the slurm.conf the sandbox writes for this policy (dynamic mode)."""
    from autoscaler.sandbox.services.slurm import SlurmCluster
    from autoscaler.sandbox.stack.config import slurm_partitions

    with tempfile.TemporaryDirectory() as tmp:
        conf = SlurmCluster(Path(tmp), [], dynamic_partitions=slurm_partitions(
            {policy.team: policy})).render_conf()
    return sum(1 for line in conf.splitlines() if line.startswith("NodeName="))


def main() -> int:
    parser = trace_parser(__doc__)
    parser.add_argument("--burst-after", default="0s,5m,15m",
                        help="ours: how long a job that does not fit on-prem waits before a "
                        "cloud node is bought for it; a comma list runs each (the last line "
                        "reports the first)")
    args = parser.parse_args()
    waits = args.burst_after.split(",")
    for wait in waits:
        parse_duration(wait)  # refused here, not in a worker
    console = Console(stderr=True, width=160)
    catalog = default_catalog()
    team, pool, _ = select_pool(load_policies(args.policies, catalog), None)
    workload = load_pod_list(args.data / POD_LIST, START_DAY, DAYS)
    median = median_demand_gpus(workload)
    per_node = catalog.get(pool.cloud.value, ON_PREM_TYPE).gpus
    nodes = max(1, math.ceil(median / per_node))
    config = SimConfig(seed=args.seed, on_prem_nodes=nodes, on_prem_type=ON_PREM_TYPE)
    console.print(f"{len(workload.jobs)} jobs; median demand {median:.1f} GPUs -> {nodes} on-prem "
                  f"{ON_PREM_TYPE} ({nodes * per_node} GPUs); ours bursts after {', '.join(waits)}")
    runs = {"partition_only": variant(team, pool, nodes, None)}
    runs.update({f"ours {w}": variant(team, pool, nodes, w) for w in waits})
    with ProcessPoolExecutor(max_workers=2) as pool_exec:
        futures = [pool_exec.submit(replay, name, p, q, workload, config, args.data)
                   for name, (p, q) in runs.items()]
        results = dict(f.result() for f in futures)
    base = results["partition_only"]
    for name, r in results.items():
        console.print(f"{name}: cloud {r.gpu_hours_paid:,.0f} GPU-h "
                      f"({r.gpu_hours_paid / max(base.gpu_hours_paid, 1e-9):.3f} x partition_only), "
                      f"${r.cost_usd:,.0f}; wait p50/p95/p99 {r.wait_p50_s:.0f}/{r.wait_p95_s:.0f}/"
                      f"{r.wait_p99_s:.0f} s; delivered {r.delivered_share:.3f}; replay "
                      f"{r.wall_seconds:.0f} s")
    ours = results[f"ours {waits[0]}"]
    print(f"cloud_gpu_hours_ours={ours.gpu_hours_paid:.1f} "
          f"cloud_gpu_hours_partition_only={base.gpu_hours_paid:.1f} "
          f"p95_wait_ours_s={ours.wait_p95_s:.1f} p95_wait_partition_only_s={base.wait_p95_s:.1f} "
          f"names_declared={names_declared(runs[f'ours {waits[0]}'][0])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

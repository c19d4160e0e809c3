"""Benchmark: replay speed with thousands of jobs pending, and how it grows with the backlog.

    python benchmarks/bench_backlog.py [--data DIR] [--copies 1,2,4] [--strategies ours,ca_like]

bench_sim's backlog scenario (the 40 days of arrivals compressed into 2 hours, 6 hours
replayed), with every arrival repeated K times (same run time and size, the copy number
appended to the id), so about K times as many jobs wait at once. Per K and strategy it
prints the peak of pending jobs, wall and CPU seconds, and simulated seconds per second of
each. The last line is::

    backlog_pending_peak_k<K>=<p> backlog_speedup_cpu_k<K>=<s> ... (one pair per K)

with s the slowest strategy's simulated seconds / CPU seconds (CPU, because the machine
is shared: wall time counts the other processes too; both are printed).
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

from autoscaler.catalog import default_catalog
from autoscaler.policy import load_policies
from autoscaler.sim.replay import SimConfig
from autoscaler.sim.run import run_all, select_pool
from autoscaler.sim.spot import load_spot_traces
from autoscaler.traces import Workload, load_duty_cycles, load_pod_list

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sim import DAYS, DUTY, POD_LIST, SPOT, START_DAY, backlog, trace_parser


def copies(workload: Workload, k: int) -> Workload:
    """Every job ``k`` times (ids ``<id>~<copy>``), arrivals unchanged."""
    if k == 1:
        return workload
    jobs = sorted((replace(j, id=f"{j.id}~{c}") for j in workload.jobs for c in range(k)),
                  key=lambda j: j.arrival)
    return replace(workload, jobs=jobs)


def main() -> int:
    parser = trace_parser(__doc__)
    parser.add_argument("--copies", default="1,2,4", help="comma-separated K values")
    parser.add_argument("--strategies", default="ours,ca_like,static,target_tracking")
    args = parser.parse_args()

    catalog = default_catalog()
    team, pool, _ = select_pool(load_policies(args.policies, catalog), None)
    base = backlog(load_pod_list(args.data / POD_LIST, START_DAY, DAYS))
    spot = load_spot_traces(args.data / SPOT)
    duty = load_duty_cycles(args.data / DUTY)
    span = base.end - base.start
    keys: list[str] = []
    for k in (int(x) for x in args.copies.split(",")):
        workload = copies(base, k)
        peaks, speeds = [], []
        for name in args.strategies.split(","):
            began = time.perf_counter()
            report = run_all(workload, team, pool, catalog, SimConfig(seed=args.seed), spot=spot, duty=duty,
                             strategies=(name,))
            r = report.result(name)
            cpu = max(r.cpu_seconds, 1e-9)
            print(f"K={k} {name}: {len(workload.jobs)} jobs, peak {r.pending_jobs_peak} pending; "
                  f"{r.wall_seconds:.1f} s wall ({span / r.wall_seconds:,.0f}x), {cpu:.1f} s CPU "
                  f"({span / cpu:,.0f}x); run_all {time.perf_counter() - began:.1f} s", file=sys.stderr)
            peaks.append(r.pending_jobs_peak)
            speeds.append(span / cpu)
        keys += [f"backlog_pending_peak_k{k}={min(peaks)}", f"backlog_speedup_cpu_k{k}={min(speeds):.1f}"]
    print(" ".join(keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: reactive decide() vs decide() with the predictive floor (docs/concepts/predictive.md).

    python benchmarks/bench_predictive.py [--data ../shared/data] [--seed 0] [--quantile 0.8]
                                          [--trace pod-list|synthetic-week|both]

pod-list: the Alibaba v2023 pod list; the forecaster is chosen and first trained on the
days before day 110 only, days 110-149 are replayed with the benchmark policy
(benchmarks/policies, the same spot and duty-cycle data as bench_sim.py) as "ours"
(reactive) and "predictive" (the same policy with ``predictive: {mode: scale}``).
mape_* are the rolling-origin backtest over days 110-149 (origins every 6 h, 6 h ahead).

synthetic-week: a trace with a clear weekly pattern built from the pod list's own jobs
(see ``synthetic_week``): trained on weeks 1-3, weeks 4-5 replayed.

The last line (of the pod-list run when both are run) is::

    mape_model=<a> mape_seasonal_naive=<b> p50_wait_s_reactive=<c> p50_wait_s_predictive=<d>
    p95_wait_s_reactive=<e> p95_wait_s_predictive=<f> cost_ratio_predictive_over_reactive=<g>
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from autoscaler.catalog import default_catalog
from autoscaler.forecast.backtest import backtest
from autoscaler.forecast.series import DAY_BINS
from autoscaler.policy import load_policies
from autoscaler.policy.models import Predictive
from autoscaler.sim.replay import SimConfig
from autoscaler.sim.run import run_all, select_pool
from autoscaler.sim.spot import load_spot_traces
from autoscaler.sim.strategies.predictive import demand_series
from autoscaler.traces import DAY, Job, Workload, load_duty_cycles, load_pod_list

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the same window and data
from bench_sim import DAYS, DUTY, POD_LIST, SPOT, START_DAY, add_wake_after, trace_parser

WEEKS, TRAIN_WEEKS = 5, 3
WEEKEND_SHARE = 0.25  # share of a weekday's jobs kept on Saturdays and Sundays
MAX_RUN = 8 * 3600.0  # synthetic jobs end within their working day


def synthetic_week(jobs: list[Job], seed: int) -> list[Job]:
    """Five weeks from the pod list's days 110-149 (jobs that arrived in the window).

    Synthetic day d takes the jobs of real day 110 + d (times of day, GPU shares and GPU
    models kept), with run times capped at 8 h so that a day's demand ends with the day;
    on Saturdays and Sundays (day % 7 in 5, 6: trace day 0 is a Monday) only a seeded 25%
    of them are kept. The daily shape is the trace's own; the weekly one is the
    construction's (the real trace has no weekly pattern to learn, see docs/designs/predictive.md)."""
    rng = random.Random(f"{seed}:synthetic-week")
    out = []
    for job in jobs:
        real_day = int(job.arrival // DAY)
        d = real_day - START_DAY
        if job.carried or not 0 <= d < 7 * WEEKS:
            continue
        if d % 7 >= 5 and rng.random() >= WEEKEND_SHARE:
            continue
        out.append(replace(job, arrival=job.arrival - START_DAY * DAY, duration=min(job.duration, MAX_RUN)))
    return out


def window(jobs: list[Job], start: float, end: float) -> Workload:
    """Jobs of [start, end) plus the ones running at start (carried), like load_pod_list."""
    inside, before = [], []
    for j in jobs:
        if j.arrival >= start:
            if j.arrival < end:
                inside.append(j)
        else:
            before.append(j)
            if j.arrival + j.duration > start:
                left = j.arrival + j.duration - start
                inside.append(replace(j, arrival=start, duration=left, carried=True))
    inside.sort(key=lambda j: (j.arrival, j.id))
    return Workload(jobs=inside, start=start, end=end, trace_end=end, before=before)


def compare(name: str, workload: Workload, train_bins: int, args: argparse.Namespace,
            console: Console) -> str:
    catalog = default_catalog()
    team, pool, _ = select_pool(load_policies(args.policies, catalog), None)
    pool = pool.model_copy(update={"predictive": Predictive(mode="scale", quantile=args.quantile)})
    team = team.model_copy(update={"pools": [pool]})
    series = demand_series(workload.before, workload)
    # The series keeps only the weeks of history the forecaster reads (forecast/series.py
    # clip), from bin ``first``: the window starts that many bins into it.
    train_bins -= series.first
    bt = backtest(series.values, train_bins)
    spot = load_spot_traces(args.data / SPOT)
    duty = load_duty_cycles(args.data / DUTY)
    config = SimConfig(seed=args.seed, wake_after=args.wake_after)
    report = run_all(workload, team, pool, catalog, config, spot=spot, duty=duty,
                     strategies=("ours", "predictive"), workers=args.workers)
    ours, pred = report.result("ours"), report.result("predictive")
    console.print(f"{name}: {len(workload.jobs)} jobs, days {workload.start / DAY:g}-"
                  f"{workload.end / DAY:.2f}, history {train_bins / DAY_BINS:.0f} d; predictive "
                  f"model {pred.parameters.get('model')} (backtest MAPE before the window "
                  f"{pred.parameters.get('backtest_mape')}), lead {pred.parameters.get('lead_s')} s")
    for s in bt.scores.values():
        console.print(f"  backtest over the replay window: {s.model}: MAPE {s.mape}, pinball {s.pinball}")
    for r in (ours, pred):
        console.print(f"  {r.name}: cost ${r.cost_usd:,.0f}, paid {r.gpu_hours_paid:,.0f} GPU-h, "
                      f"wait p50/p95 {r.wait_p50_s:.0f}/{r.wait_p95_s:.0f} s, "
                      f"delivered {r.delivered_share:.1%}, actions {r.extra.get('actions')}")
    chosen = bt.scores[pred.parameters["model"]] if pred.parameters.get("model") in bt.scores else bt.chosen()
    return (f"mape_model={chosen.mape:.2f} mape_seasonal_naive={bt.scores['seasonal-naive'].mape:.2f} "
            f"p50_wait_s_reactive={ours.wait_p50_s:.1f} p50_wait_s_predictive={pred.wait_p50_s:.1f} "
            f"p95_wait_s_reactive={ours.wait_p95_s:.1f} p95_wait_s_predictive={pred.wait_p95_s:.1f} "
            f"cost_ratio_predictive_over_reactive={pred.cost_usd / ours.cost_usd:.3f}")


def main() -> int:
    parser = trace_parser(__doc__)
    parser.add_argument("--quantile", type=float, default=0.8, help="predictive.quantile (default 0.8)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--trace", choices=("pod-list", "synthetic-week", "both"), default="both")
    add_wake_after(parser, "both sides")
    args = parser.parse_args()
    console = Console(stderr=True, width=160)
    lines = []
    if args.trace in ("synthetic-week", "both"):
        jobs = synthetic_week(load_pod_list(args.data / POD_LIST, START_DAY, DAYS).jobs, args.seed)
        w = window(jobs, TRAIN_WEEKS * 7 * DAY, WEEKS * 7 * DAY)
        line = compare("synthetic-week", w, TRAIN_WEEKS * 7 * DAY_BINS, args, console)
        console.print(f"synthetic-week: {line}")
        lines.append(line)
    if args.trace in ("pod-list", "both"):
        w = load_pod_list(args.data / POD_LIST, START_DAY, DAYS)
        w.before = load_pod_list(args.data / POD_LIST, 0, START_DAY).jobs
        lines.append(compare("pod-list", w, START_DAY * DAY_BINS, args, console))
    print(lines[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())

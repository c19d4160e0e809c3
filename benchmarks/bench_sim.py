"""Benchmark: replay the Alibaba GPU v2023 pod list, days 110-149, through decide() and the
baselines, with V100 spot interruptions from the SkyPilot traces and job GPU use from the
GenAI duty-cycle trace.

    python benchmarks/bench_sim.py [--data ../shared/data] [--out DIR] [--seed 0]

Data is read from ``--data`` (default: $GPU_AUTOSCALER_DATA or ../shared/data next to the
repository). The last line is::

    cost_vs_oracle=<r> cost_vs_best_baseline=<s> p95_wait_s=<w> p95_wait_ca_like_s=<x> replay_speedup=<k>
    cost_per_delivered_vs_oracle=<r2> delivered_share=<d> refused_attempts_ours=<n1>
    refused_attempts_ca_like=<n2> replay_speedup_backlog=<k2>

(one line). r: ours / oracle cost; r2: ours' cost per GPU-hour delivered inside the window /
the oracle's price; d: share of the window's demand ours delivered; s: ours / the best
ranked baseline, both per delivered GPU-hour (ranked: delivered >= 95% of what ours
delivered); w, x: p95 job wait of ours and of the Cluster-Autoscaler-like baseline; n1, n2:
launch attempts the cloud refused; k: simulated seconds / wall seconds of the whole run;
k2: the slowest strategy's simulated / wall seconds on the backlog scenario: the same 40
days of arrivals compressed into 2 hours (``compress_arrivals``, run times unchanged) and
replayed for 6 hours, so thousands of jobs wait at once (the peak is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rich.console import Console

from autoscaler.catalog import default_catalog
from autoscaler.policy import load_policies
from autoscaler.sim.replay import SimConfig
from autoscaler.sim.report import ratios, summary_line, table, to_json
from autoscaler.sim.results import StrategyResult
from autoscaler.sim.run import run_all, select_pool
from autoscaler.sim.spot import load_spot_traces
from autoscaler.traces import DAY, Workload, compress_arrivals, load_duty_cycles, load_pod_list

ROOT = Path(__file__).resolve().parent.parent
START_DAY, DAYS = 110, 40  # days 110-149; the trace ends during day 149
POD_LIST = "alibaba-gpu-v2023/openb_pod_list_default.csv"
SPOT = "spot-traces-skypilot/availability/1-node/aws-02-15-2023"  # p3.2xlarge, 45 days
DUTY = "alibaba-genai-2026/pod_gpu_duty_cycle_anon.csv.gz"
BACKLOG_HOURS, BACKLOG_WINDOW_HOURS = 2.0, 6.0  # arrivals of the 40 days within 2 h; replay 6 h


def backlog(workload: Workload) -> Workload:
    squeezed = compress_arrivals(workload, workload.seconds / (BACKLOG_HOURS * 3600))
    end = squeezed.start + BACKLOG_WINDOW_HOURS * 3600
    return Workload(jobs=squeezed.jobs, start=squeezed.start, end=end, trace_end=squeezed.trace_end,
                    stats=squeezed.stats)


def outcome(name: str, r: StrategyResult) -> str:
    """One variant's money, wait and disruption, as bench_spot and bench_placement print it."""
    return (f"{name}: cost ${r.cost_usd:,.0f}, paid GPU-h by market {r.gpu_hours_paid_by_market}, "
            f"wait p50/p95 {r.wait_p50_s:.0f}/{r.wait_p95_s:.0f} s, delivered "
            f"{r.delivered_share:.1%}, kills {r.kills_by_cause}; on-demand share "
            f"{r.on_demand_share:.1%}")


def trace_parser(doc: str | None) -> argparse.ArgumentParser:
    """What every trace benchmark takes: the shared data, the benchmark policies, the seed."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path,
                        default=Path(os.environ.get("GPU_AUTOSCALER_DATA", ROOT.parent / "shared" / "data")))
    parser.add_argument("--policies", type=Path, default=ROOT / "benchmarks" / "policies")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def add_wake_after(parser: argparse.ArgumentParser, replays: str) -> None:
    """``--wake-after SECONDS`` for a benchmark whose ``SimConfig`` takes it; ``replays``
    names what it applies to ("ours", "both sides", ...)."""
    parser.add_argument("--wake-after", type=wake_seconds, default=SimConfig().wake_after,
                        metavar="SECONDS|off",
                        help=f"the service's tick.wake_after for {replays}: a tick this long "
                        "after the last when a job arrives, a spot notice comes or a launch is "
                        "refused (default %(default)s s, as in the service); off: only every tick")


def wake_seconds(value: str) -> float | None:
    """A wake_after in seconds from the command line, or None for "off"."""
    if value == "off":
        return None
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds or off") from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError("must be greater than 0, or off")
    return seconds


def main() -> int:
    parser = trace_parser(__doc__)
    parser.add_argument("--out", type=Path, help="also write report.json and plots here")
    parser.add_argument("--workers", type=int, default=2, help="processes replaying strategies at once")
    add_wake_after(parser, "ours")
    args = parser.parse_args()
    console = Console(stderr=True, width=160)

    catalog = default_catalog()
    team, pool, _ = select_pool(load_policies(args.policies, catalog), None)
    workload = load_pod_list(args.data / POD_LIST, START_DAY, DAYS)
    spot = load_spot_traces(args.data / SPOT)
    duty = load_duty_cycles(args.data / DUTY)
    config = SimConfig(seed=args.seed, wake_after=args.wake_after)
    console.print(f"{len(workload.jobs)} jobs, days {workload.start / DAY:g}-{workload.end / DAY:.2f}, "
                  f"demand {workload.demand_gpu_hours():,.0f} GPU-h; spot zones {sorted(spot.zones)}; "
                  f"{len(duty)} duty-cycle series (mean {duty.mean():.1f}%)")

    def progress(name: str, t: float) -> None:
        if t >= workload.end:
            console.print(f"  {name}: done")

    report = run_all(workload, team, pool, catalog, config, spot=spot, duty=duty, workers=args.workers,
                     progress=progress)
    console.print(table(report))
    simulated = workload.end - workload.start
    for r in report.results:
        extra = ""
        if r.name == "ours":
            calls, secs = r.extra["decide_calls"], r.extra["decide_seconds"]
            extra = (f"; decide(): {calls} calls, {1000 * secs / calls:.2f} ms each, "
                     f"{secs / r.wall_seconds:.0%} of the replay")
        speed, cpu_speed = simulated / r.wall_seconds, simulated / max(r.cpu_seconds, 1e-9)
        console.print(f"{r.name}: replay {r.wall_seconds:.1f} s wall ({speed:,.0f}x real time), "
                      f"{r.cpu_seconds:.1f} s CPU ({cpu_speed:,.0f}x); paid by market "
                      f"{r.gpu_hours_paid_by_market}; kills {r.kills_by_cause}; waits incl. requeues "
                      f"p50/p95/p99 {r.wait_total_p50_s:.0f}/{r.wait_total_p95_s:.0f}/"
                      f"{r.wait_total_p99_s:.0f} s{extra}")
    measured = ratios(report)
    console.print(f"best baseline (the cheapest per delivered GPU-hour that delivered >= 95% of what ours "
                  f"delivered): "
                  f"{measured['best_baseline']}")
    if args.out:
        from autoscaler.sim.plots import write_plots

        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "report.json").write_text(json.dumps(to_json(report, with_series=True), indent=1))
        write_plots(report, args.out)
    squeezed = backlog(workload)
    slow = run_all(squeezed, team, pool, catalog, config, spot=spot, duty=duty, workers=args.workers)
    span = squeezed.end - squeezed.start
    for r in slow.results:
        console.print(f"backlog {r.name}: peak {r.pending_jobs_peak} jobs pending, "
                      f"{r.wall_seconds:.1f} s wall for {span / 3600:g} h "
                      f"({span / r.wall_seconds:,.0f}x real time), {r.cpu_seconds:.1f} s CPU "
                      f"({span / max(r.cpu_seconds, 1e-9):,.0f}x)")
    k2 = min(span / max(r.wall_seconds, 1e-9) for r in slow.results)
    measured["replay_speedup_backlog"] = round(k2, 1)
    measured["backlog_pending_peak"] = min(r.pending_jobs_peak for r in slow.results)
    print(json.dumps(measured))
    print(f"{summary_line(report)} replay_speedup_backlog={k2:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

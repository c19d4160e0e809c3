"""Benchmark (issue 33): p95 job wait and cost of ours against the Cluster-Autoscaler-like
baseline on every window, seed, spot market and policy variant, not only on bench_sim's.

    python benchmarks/bench_wait.py [--data DIR] [--windows all] [--seeds 0,1,2] [--spot all]
                                    [--variants base,fallback,predictive] [--cross] [--workers 2]
                                    [--ablate KEY=VALUE] [--periods 1]

Each row replays one case twice over the same jobs, spot market and seed: ours (decide()
with benchmarks/policies) and the CA-like baseline (``ca_like``) under the same market
rules. Cases (``--windows``, ``--seeds``, ``--spot``, ``--variants`` select subsets):

* windows: ``pod:A-B``, the default pod list (bench_sim's file) in 20-day windows from
  day 0 (0-20, 20-40, ..., 140-149; the trace ends during day 149), jobs of ``load_pod_list``;
  ``genai:K``, the GenAI duty-cycle data. It is **not a job trace**: 143 containers, each a
  60 s duty-cycle series over the same ~22.8 h, none arriving or leaving as jobs do. The
  replay uses it as the jobs' GPU use (as bench_sim does: each job draws a series and an
  offset from the seed), which is what the idle and utilization rules read. So its windows
  are its 6-hour slices (K = 0..3: samples [360K, 360K + 360) of every series; the last is
  4.8 h), each replayed as the duty cycles of the reference pod window (``REF_WINDOW``,
  pod:120-140, the busiest). Pod windows use the whole duty-cycle data.
* seeds: ``SimConfig.seed`` (job-to-duty-series draw, boot times, interruption draws).
  Both sides of a row take the same boot-time draws (``SimConfig.shared_boot_draws``,
  common random numbers, keyed by the minute of the launch): a node that ours and CA-like
  launch for the same job in the same minute boots in the same time, so a row compares
  decisions, not two draws.
* spot markets: every SkyPilot trace under ``spot-traces-skypilot``, one market per
  (folder, region, file suffix), e.g. ``availability/1-node/aws-10-26-2022:us-west-2:v100_1``
  (17 markets; a folder with several instance kinds per zone gives one market each). The
  trace's zones, in name order, stand for the bench pool's first zones (us-east-1a, c, d,
  f; the pool keeps only that many), prices stay the pool's (us-east-1 list, the same as
  us-east-2 and us-west-2 for p3);
  any non-zero value is "no spot capacity" (sim/spot.py's reading, also for the preemption
  and 16-node traces, whose values count instances). The default market is bench_sim's
  (``availability/1-node/aws-02-15-2023:us-east-1:v100_1``).
* variants: ``base``, the bench policy as is (``spot_fallback: none``) against ``ca_like``
  with the same rule; ``fallback``, bench_spot's variant (``spot_fallback: on-demand``,
  ``return_to_spot`` as in the policy file, ``headroom_gpus: 1``) against CA-like with
  the same on-demand fallback (bench_spot's ``ca_like_fallback``); ``predictive``, the
  bench policy with ``predictive: {mode: scale}`` (bench_predictive's strategy, trained on
  the pod list before the window) against the base CA-like.

The default matrix is a star around the reference case, not the full product (which
``--cross`` replays: 8+4 windows x 3 seeds x 17 markets x 3 variants, GenAI windows without
predictive: ~1,600 cases, ~14 h here; one case takes ~30 s of wall time with 2 workers):
every window x every seed on the default market, variant base; every market on the
reference window, seed 0, variant fallback (a spot-only policy never runs a job on a
market that is always dry, e.g. the GCP preemption trace); every non-base variant on
every pod window, seed 0, default market: 68 cases, ~35 min on the shared 2-core machine,
so under the issue's 30 minutes only in parts (benchmarks/README.md#bench_wait gives
three commands whose cases add up to the default's). With ``--variants base`` alone the
market axis replays ``base`` instead of ``fallback``: pass ``--spot`` to restrict it.
(``--seed`` comes with bench_sim's shared parser and is not read here: use ``--seeds``.)

``--ablate KEY=VALUE`` (repeatable) changes ours' side only, to find which cause explains
which share of the gap (issue 33 item 2; CA-like is replayed unchanged): ``tick=SECONDS``
(how often decide() runs; CA-like scans every 10 s), ``wake=SECONDS`` or ``wake=off`` (a
tick this long after the last when a job arrives, a spot notice comes or a launch is
refused between ticks: the service's ``tick.wake_after``, 10 s by default),
``backoff=DURATION`` (the pool's ``capacity_error_backoff``), ``types=A,B`` (the pool's
instance types: node size against interruption exposure), ``max_step=N``, ``headroom=N``
(``scale_up.headroom_gpus``), ``idle_below=PERCENT`` (``scale_down.gpu_utilization_below``:
the idle window is of utilization, so with the duty cycles' low use a node whose jobs ran
below it is idle as soon as they end, where CA waits ``idle_for`` from emptiness),
``scarce=ZONES,WITHIN[,HEADROOM]`` (``capacity.spot_scarcity``: while that many of the
pool's zones refused spot within that long, idle nodes are kept and, with HEADROOM, that
many spare GPUs held; e.g. ``scarce=3,30m,2``). One key
changes CA-like's side instead, for the noise floor of a row: ``ca_scan=SECONDS`` (its
``scan_interval``, 10 s; base and predictive rows). The ablation is printed before the rows.

``--periods K`` (odd; 1 by default) replays each side K times, its period one second
apart around its own (K = 3: ours' tick 29, 30 and 31 s, CA-like's scan 9, 10 and 11 s),
and a row compares each side's median replay by p95 (its cost and delivered share are
that replay's), with every replay's p95 in a last column. On the busy window a single
replay's p95 is mostly where an all-zone spot outage ends between the probes of each
side: one second of period moves a row by up to 4x (docs/designs/benchmark-misses.md,
How much of a row is the tick's phase), so one replay per side compares the phase of two
clocks more than two strategies. K = 3 takes three times as long.
Rows are printed as they finish (stderr), then the table in order, then the last line::

    windows=<n> p95_le_ca_windows=<m> cost_le_ca_windows=<k> worst_p95_ratio=<r>
    worst_cost_ratio=<c> spot_cost_per_delivered_vs_ca_fallback=<s> windows_under_20_waits=<f>

(one line). n: rows; m: rows where ours' p95 job wait (bench_sim's: arrival to first
start, jobs arriving in the window) <= CA-like's; k: rows where ours' total cost (USD,
every node billed from launch request to termination) <= CA-like's; r, c: the largest
ours / CA-like ratio of p95 wait and of cost over the rows (0 / 0 counts as 1.0, x / 0 as
inf); s: over the ``fallback`` rows, the largest ratio of ours' cost per delivered
GPU-hour to CA-like-with-fallback's (``StrategyResult.cost_per_delivered``, bench_sim's:
the whole bill, spot plus fallback on-demand, over the GPU-hours of job progress made in
the window), nan without fallback rows. Targets (issue 33): m == n, k == n, r <= 1.0,
c <= 1.0, s <= 0.6. f: rows whose p95 is taken over fewer than 20 waits (the table's
``waits`` column: jobs that arrived in the window). Days 0-100 of the default pod list
hold 2-4 a 20-day window (the rest run through it, carried), so there a row's "p95" is
about its largest wait: one boot-time draw and one tick's phase decide it, and m counts
those rows alike; judge them over many seeds (``--seeds 0,1,...``), not one.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_sim
import bench_spot

from autoscaler.catalog import default_catalog
from autoscaler.policy import load_policies
from autoscaler.policy.duration import parse_duration
from autoscaler.policy.models import Pool, Predictive, TeamPolicy
from autoscaler.sim.replay import Replay, SimConfig
from autoscaler.sim.results import StrategyResult, summarize
from autoscaler.sim.run import build_strategies, select_pool
from autoscaler.sim.spot import SpotMarket, ZoneTrace, load_spot_traces
from autoscaler.sim.strategies.base import Strategy
from autoscaler.sim.strategies.ca_like import CaSettings, ClusterAutoscalerLike
from autoscaler.traces import DAY, DutyCycles, Workload, load_duty_cycles, load_pod_list

WINDOW_DAYS = 20
DUTY_WINDOW_SAMPLES = 360  # 6 h of 60 s samples
REF_WINDOW = "pod:120-140"
REF_MARKET = "availability/1-node/aws-02-15-2023:us-east-1:v100_1"
# Below this many waits a p95 is one of the few largest waits, i.e. a draw of boot times and
# of the tick's phase, not a statistic (days 0-100 of the pod list: 2-4 jobs a window).
MIN_WAITS = 20
VARIANTS = ("base", "fallback", "predictive")
SPOT_ROOT = "spot-traces-skypilot"


@dataclass(frozen=True)
class Case:
    window: str
    seed: int
    market: str
    variant: str


@dataclass(frozen=True)
class Row:
    """A case's figures: each side's median replay by p95 wait over its periods (one replay
    without ``--periods``); ``ours_p95s``/``ca_p95s``: every replay's p95, shortest period
    first."""

    case: Case
    ours: StrategyResult
    ca: StrategyResult
    ours_p95s: tuple[float, ...] = ()
    ca_p95s: tuple[float, ...] = ()

    @classmethod
    def of(cls, case: Case, ours: Sequence[StrategyResult], ca: Sequence[StrategyResult]) -> Row:
        def median(side: Sequence[StrategyResult]) -> StrategyResult:
            return sorted(side, key=lambda r: r.wait_p95_s)[(len(side) - 1) // 2]
        return cls(case, median(ours), median(ca), tuple(r.wait_p95_s for r in ours),
                   tuple(r.wait_p95_s for r in ca))

    def ratio(self, what: str) -> float:
        x, y = getattr(self.ours, what), getattr(self.ca, what)
        if x is None or y is None:
            return math.inf
        return x / y if y else (1.0 if not x else math.inf)


@dataclass
class Inputs:
    """Everything a replay reads, loaded once before the workers fork."""

    data: Path
    team: TeamPolicy
    pool: Pool
    duty: DutyCycles
    markets: dict[str, list[Path]]
    ablate: dict[str, str] = field(default_factory=dict)


ABLATIONS = ("tick", "wake", "backoff", "types", "max_step", "headroom", "idle_below", "scarce",
             "ca_scan")


def ablated(ablate: dict[str, str], config: SimConfig, team: TeamPolicy, pool: Pool,
            ) -> tuple[SimConfig, TeamPolicy, Pool]:
    """Ours' replay settings with ``--ablate``'s changes, the pool validated again."""
    if "tick" in ablate:
        config = replace(config, tick=float(ablate["tick"]))
    if "wake" in ablate:
        config = replace(config, wake_after=bench_sim.wake_seconds(ablate["wake"]))
    raw = pool.model_dump(mode="json", exclude_unset=True)
    if "backoff" in ablate:
        parse_duration(ablate["backoff"])
        raw.setdefault("capacity", {})["capacity_error_backoff"] = ablate["backoff"]
    if "types" in ablate:
        raw["instance_types"] = ablate["types"].split(",")
    if "max_step" in ablate:
        raw.setdefault("scale_up", {})["max_step"] = int(ablate["max_step"])
    if "headroom" in ablate:
        raw.setdefault("scale_up", {})["headroom_gpus"] = int(ablate["headroom"])
    if "idle_below" in ablate:
        raw.setdefault("scale_down", {})["gpu_utilization_below"] = float(ablate["idle_below"])
    if "scarce" in ablate:
        parts = ablate["scarce"].split(",")
        raw.setdefault("capacity", {})["spot_scarcity"] = {
            "zones": int(parts[0]), "within": parts[1] if len(parts) > 1 else "30m",
            "headroom_gpus": int(parts[2]) if len(parts) > 2 else 0}
    if raw != pool.model_dump(mode="json", exclude_unset=True):
        pool = Pool.model_validate(raw)
        team = team.model_copy(update={"pools": [pool]})
    return config, team, pool


INPUTS: Inputs | None = None  # set in main() before the process pool forks


def pod_windows(data: Path) -> list[str]:
    end = load_pod_list(data / bench_sim.POD_LIST).trace_end / DAY
    return [f"pod:{d}-{min(d + WINDOW_DAYS, math.floor(end))}" for d in range(0, math.ceil(end), WINDOW_DAYS)]


def duty_window(duty: DutyCycles, k: int) -> DutyCycles:
    lo = k * DUTY_WINDOW_SAMPLES
    cut = [s[lo:lo + DUTY_WINDOW_SAMPLES] for s in duty.series]
    return DutyCycles(series=tuple(s for s in cut if len(s) >= 10), step=duty.step)


def duty_windows(duty: DutyCycles) -> list[str]:
    longest = max(len(s) for s in duty.series)
    return [f"genai:{k}" for k in range(math.ceil(longest / DUTY_WINDOW_SAMPLES))
            if any(len(s) >= k * DUTY_WINDOW_SAMPLES + 10 for s in duty.series)]


def spot_markets(root: Path) -> dict[str, list[Path]]:
    """(folder, region, suffix) -> its zone files; the zone is the name up to the first ``_``."""
    out: dict[str, list[Path]] = {}
    for f in sorted(root.rglob("*.json")):
        zone, _, suffix = f.stem.partition("_")
        region = zone[:-1].rstrip("-")
        out.setdefault(f"{f.parent.relative_to(root)}:{region}:{suffix}", []).append(f)
    return out


def market_for(files: list[Path], pool: Pool) -> tuple[SpotMarket, Pool]:
    """The market with its zones renamed to the pool's first zones, and the pool cut to them."""
    traces = [t for f in files for t in load_spot_traces(f).zones.values()]
    zones = list(pool.zones)[:len(traces)]
    renamed = {z: ZoneTrace(zone=z, gap=t.gap, unavailable=t.unavailable)
               for z, t in zip(zones, traces, strict=False)}
    return SpotMarket(zones=renamed), bench_spot.in_zones(pool, zones)


def workload_for(inputs: Inputs, window: str, variant: str) -> tuple[Workload, DutyCycles]:
    kind, _, name = window.partition(":")
    if kind == "genai":
        window, duty = REF_WINDOW, duty_window(inputs.duty, int(name))
    else:
        duty = inputs.duty
    lo, hi = (float(x) for x in window.partition(":")[2].split("-"))
    workload = load_pod_list(inputs.data / bench_sim.POD_LIST, lo, hi - lo)
    if variant == "predictive":
        workload.before = load_pod_list(inputs.data / bench_sim.POD_LIST, 0, lo).jobs if lo > 0 else []
    return workload, duty


def ca_settings(ablate: dict[str, str], shift: float = 0.0) -> CaSettings:
    """CA-like's settings: its scan interval as ``--ablate ca_scan`` sets it (10 s by
    default), ``shift`` seconds longer."""
    return CaSettings(scan_interval=float(ablate.get("ca_scan", CaSettings.scan_interval)) + shift)


def replay(case: Case, side: str, shift: float = 0.0) -> StrategyResult:
    """One side of a case: ``ours`` (the variant) or ``ca`` (CA-like under the same rules),
    its period (ours' tick, CA-like's scan interval) ``shift`` seconds longer."""
    if INPUTS is None:
        raise RuntimeError("bench_wait: inputs not loaded")
    workload, duty = workload_for(INPUTS, case.window, case.variant)
    spot, pool = market_for(INPUTS.markets[case.market], INPUTS.pool)
    team, catalog = INPUTS.team, default_catalog()
    config = SimConfig(seed=case.seed, shared_boot_draws=True)
    ca = ca_settings(INPUTS.ablate, shift)
    if side == "ours":
        config, team, pool = ablated(INPUTS.ablate, config, team, pool)
        config = replace(config, tick=config.tick + shift)
    if case.variant == "fallback":
        name = "ours" if side == "ours" else "ca_like_fallback"
        return bench_spot.replay(name, workload, team, pool, config, spot, duty, ca)
    if side == "ca":  # the base CA-like, for the predictive variant too
        strategy: Strategy = ClusterAutoscalerLike(quota_gpus=team.quota.max_gpus, settings=ca)
    else:
        if case.variant == "predictive":
            pool = pool.model_copy(update={"predictive": Predictive(mode="scale")})
            team = team.model_copy(update={"pools": [pool]})
        name = "predictive" if case.variant == "predictive" else "ours"
        strategy = build_strategies([name], team, pool, catalog, workload, config)[0]
    run = Replay(workload, pool, catalog, config, strategy, spot=spot, duty=duty)
    run.run()
    return summarize(run)


def cases(windows: Sequence[str], seeds: Sequence[int], markets: Sequence[str], variants: Sequence[str],
          cross: bool) -> list[Case]:
    if cross:
        out = [Case(w, s, m, v) for v in variants for m in markets for w in windows for s in seeds
               if not (v == "predictive" and w.startswith("genai:"))]
        return out
    ref_seed = seeds[0]
    out = []
    if "base" in variants:
        out += [Case(w, s, REF_MARKET, "base") for w in windows for s in seeds]
    spot_variant = "fallback" if "fallback" in variants else variants[0]
    out += [Case(REF_WINDOW, ref_seed, m, spot_variant) for m in markets
            if m != REF_MARKET or spot_variant != "base"]
    out += [Case(w, ref_seed, REF_MARKET, v) for v in variants if v != "base" for w in windows
            if w.startswith("pod:") and not (v == spot_variant and w == REF_WINDOW)]
    return list(dict.fromkeys(out))


def _fmt_ratio(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.3f}"


def row_line(r: Row) -> str:
    c = r.case
    return (f"| {c.window} | {c.seed} | {c.market} | {c.variant} | {r.ours.jobs_waited:,} | "
            f"{r.ours.wait_p95_s:,.0f} / "
            f"{r.ca.wait_p95_s:,.0f} s ({_fmt_ratio(r.ratio('wait_p95_s'))}) | ${r.ours.cost_usd:,.0f} / "
            f"${r.ca.cost_usd:,.0f} ({_fmt_ratio(r.ratio('cost_usd'))}) | "
            f"{r.ours.delivered_share:.1%} / {r.ca.delivered_share:.1%} |"
            + (f" {_p95s(r.ours_p95s)} / {_p95s(r.ca_p95s)} s |" if len(r.ours_p95s) > 1 else ""))


def _p95s(values: Sequence[float]) -> str:
    return ", ".join(f"{v:,.0f}" for v in values)


def few_waits(rows: list[Row]) -> list[Row]:
    """Rows whose p95 is taken over fewer than ``MIN_WAITS`` waits."""
    return [r for r in rows if r.ours.jobs_waited < MIN_WAITS]


def summary(rows: list[Row]) -> str:
    p95 = [r.ratio("wait_p95_s") for r in rows]
    cost = [r.ratio("cost_usd") for r in rows]
    spot = [r.ratio("cost_per_delivered") for r in rows if r.case.variant == "fallback"]
    s = _fmt_ratio(max(spot)) if spot else "nan"
    return (f"windows={len(rows)} p95_le_ca_windows={sum(x <= 1.0 for x in p95)} "
            f"cost_le_ca_windows={sum(x <= 1.0 for x in cost)} "
            f"worst_p95_ratio={_fmt_ratio(max(p95, default=1.0))} "
            f"worst_cost_ratio={_fmt_ratio(max(cost, default=1.0))} "
            f"spot_cost_per_delivered_vs_ca_fallback={s} "
            f"windows_under_{MIN_WAITS}_waits={len(few_waits(rows))}")


def _pick(arg: str, known: list[str], what: str) -> list[str]:
    if arg == "all":
        return known
    picked = [k for a in arg.split(",") for k in known if k == a or k.startswith(a)]
    if not picked:
        raise SystemExit(f"--{what} {arg!r} matches none of: {', '.join(known)}")
    return list(dict.fromkeys(picked))


def main() -> int:
    global INPUTS
    parser = bench_sim.trace_parser(__doc__)
    parser.add_argument("--windows", default="all",
                        help="comma-separated prefixes (pod:120-140, genai, pod) or all")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--spot", default="all",
                        help="comma-separated market prefixes (see the docstring) or all")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--cross", action="store_true", help="the full product of the selected axes")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ablate", action="append", default=[], metavar="KEY=VALUE",
                        help=f"change one side's settings: {', '.join(ABLATIONS)} (ca_scan: "
                        "CA-like's; the rest: ours'; see the docstring)")
    parser.add_argument("--periods", type=int, default=1, metavar="K",
                        help="replay each side at K periods one second apart around its own "
                        "(K odd; 3: ours' tick 29, 30, 31 s, CA-like's scan 9, 10, 11 s) and "
                        "compare each side's median replay by p95 (see the docstring)")
    args = parser.parse_args()
    if args.periods < 1 or args.periods % 2 == 0:
        parser.error("--periods: an odd number >= 1")
    shifts = [float(k - args.periods // 2) for k in range(args.periods)]
    ablate = dict(a.partition("=")[::2] for a in args.ablate)
    if unknown := sorted(set(ablate) - set(ABLATIONS)):
        parser.error(f"--ablate: unknown key(s) {', '.join(unknown)}; known: {', '.join(ABLATIONS)}")
    console = Console(stderr=True, width=200)
    began = time.perf_counter()
    catalog = default_catalog()
    team, pool, _ = select_pool(load_policies(args.policies, catalog), None)
    duty = load_duty_cycles(args.data / bench_sim.DUTY)
    INPUTS = Inputs(data=args.data, team=team, pool=pool, duty=duty,
                    markets=spot_markets(args.data / SPOT_ROOT), ablate=ablate)
    ablated(ablate, SimConfig(), team, pool)  # a bad value fails here, not in a worker
    ca_settings(ablate)
    windows = _pick(args.windows, pod_windows(args.data) + duty_windows(duty), "windows")
    markets = _pick(args.spot, list(INPUTS.markets), "spot")
    variants = _pick(args.variants, list(VARIANTS), "variants")
    todo = cases(windows, [int(s) for s in args.seeds.split(",")], markets, variants, args.cross)
    console.print(f"{len(todo)} cases, {2 * len(todo) * len(shifts)} replays, {args.workers} workers"
                  + (f", periods shifted by {shifts} s" if len(shifts) > 1 else "")
                  + (f"; ablated: {ablate}" if ablate else ""))
    results: dict[tuple[Case, str, float], StrategyResult] = {}

    def row(c: Case) -> Row | None:
        if any((c, side, d) not in results for side in ("ours", "ca") for d in shifts):
            return None
        return Row.of(c, [results[(c, "ours", d)] for d in shifts],
                      [results[(c, "ca", d)] for d in shifts])

    with ProcessPoolExecutor(max_workers=args.workers, mp_context=get_context("fork")) as ex:
        futures = {ex.submit(replay, c, side, d): (c, side, d)
                   for c in todo for side in ("ours", "ca") for d in shifts}
        for fut in as_completed(futures):
            c, side, d = futures[fut]
            results[(c, side, d)] = fut.result()
            if (done := row(c)) is not None:
                console.print(f"[{time.perf_counter() - began:,.0f} s] {row_line(done)}")
    rows = [r for c in todo if (r := row(c)) is not None]
    head = ("| window | seed | spot market | variant | waits | p95 wait ours / CA-like | "
            "cost ours / CA-like | delivered ours / CA-like |")
    if len(shifts) > 1:
        head += " p95 at each period, ours / CA-like |"
    print(head)
    print("| --- " * head.count(" | ") + "| --- |")
    for r in rows:
        print(row_line(r))
    console.print(f"wall {time.perf_counter() - began:,.0f} s")
    if few := few_waits(rows):
        console.print(f"{len(few)} of {len(rows)} rows take their p95 over fewer than {MIN_WAITS} "
                      f"waits ({', '.join(sorted({r.case.window for r in few}))}): there it is "
                      "about the largest wait, which one boot draw or one tick's phase decides")
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

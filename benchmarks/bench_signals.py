"""Prometheus read cost per tick for 100 and 1,000 nodes x 8 GPUs, raw and recording-rule modes.

For each fleet size a real Prometheus (the Debian package) starts on a TSDB backfilled with
22 minutes of synthetic DCGM series (30 s apart: util, memory, temperature, power, XID,
throttle reasons) for the nodes of the three example policies: about 10% of the nodes idle,
a few with an XID error, a hot GPU or thermal throttling, the rest busy. The gpu-autoscaler
recording rules derived from those policies (``signals --print-rules``) are then evaluated
at the read time (``autoscaler/sandbox/services/rule_eval.py``; the newest-sample rule that another
rule reads, every 30 s over its 20 m span).

Both Prometheus servers stay up, and the signals reader runs several ticks in each mode,
alternating between the two fleet sizes (a burst of load on a shared machine then falls on
both sides of the ratio): ``raw`` (the default: two queries over every GPU's raw series)
and ``rules`` (``prometheus.recording_rules: true``: one query over the recorded per-node
windows). Each tick's HTTP queries are counted on the wire (a requests response hook).
The two modes must agree on every engine input (per-node mean utilization, idle and
unhealthy verdicts, freshness) or the benchmark stops. What the rules cost
Prometheus is printed too: each rule's expression is timed as an instant query, which is
the work Prometheus does per evaluation, every ``rules_interval``, outside the tick. So is
Prometheus' own part of a rules-mode read: the same query sent with a bare HTTP client and
its body not decoded, gzip-encoded (as requests asks) and not; the rest is the reader's.

    python benchmarks/bench_signals.py [--sizes 100 1000] [--ticks 7] [--mode raw|rules]

Last line (the ``--mode`` one, ``rules`` by default): queries_per_tick_100=<a>
queries_per_tick_1000=<b> read_ms_1000=<c> ratio_1000_over_100=<d>
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import tempfile
import time
import urllib.parse
import zlib
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from autoscaler.catalog import load_catalog
from autoscaler.model.snapshot import NodeObservation
from autoscaler.policy import load_policies
from autoscaler.policy.models import Pool, TeamPolicy, pool_key
from autoscaler.sandbox.services import rule_eval
from autoscaler.sandbox.services.prometheus import PrometheusServer, backfill
from autoscaler.signals.config import PrometheusConfig
from autoscaler.signals.prometheus import PrometheusReader
from autoscaler.signals.rules import MARKER, RecordedQuery, RuleSet, recording_rules

ROOT = Path(__file__).resolve().parent.parent
GPUS = 8
STEP_S = 30
HISTORY = timedelta(minutes=22)  # covers the longest window of the example policies (20m)
STALE_AFTER = timedelta(minutes=2)
METRICS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
           "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_XID_ERRORS",
           "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
MODES = ("raw", "rules")
ENCODINGS = ("gzip, deflate", "identity")  # what requests asks for, and none


def fleet(policies: dict[str, TeamPolicy], size: int) -> dict[str, Pool]:
    """``size`` node names spread over the pools, named ``<team>-<pool>-<n>``."""
    pools = [(pool_key(t.team, p.name), p) for t in policies.values() for p in t.pools]
    return {f"{key.replace('/', '-')}-{i}": pool
            for i in range(size) for key, pool in [pools[i % len(pools)]]}


def value(metric: str, node_seed: int, gpu: int, k: int) -> float:
    """Sample k (k = 0 is the newest) of one GPU: node_seed % 100 < 10 is an idle node,
    == 10 has an XID error 2 minutes ago, == 11 a hot GPU, == 12 thermal throttling."""
    kind = node_seed % 100
    util = (node_seed + 13 * gpu + 7 * k) % 101 if kind >= 10 else (node_seed + k) % 3
    return {
        "DCGM_FI_DEV_GPU_UTIL": util, "DCGM_FI_DEV_FB_USED": 300 + 150 * util,
        "DCGM_FI_DEV_FB_FREE": 16000 - 150 * util,
        "DCGM_FI_DEV_GPU_TEMP": 92 if kind == 11 and gpu == 0 else 35 + util // 3,
        "DCGM_FI_DEV_POWER_USAGE": 40 + 2 * util,
        "DCGM_FI_DEV_XID_ERRORS": 79 if kind == 10 and gpu == 1 and k == 4 else 0,
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 64 if kind == 12 else 0,
    }[metric]


def openmetrics(nodes: list[str], end: datetime) -> Iterator[str]:
    samples = int(HISTORY.total_seconds()) // STEP_S
    t_end = end.timestamp()
    for metric in METRICS:
        yield f"# TYPE {metric} gauge\n"
        for node in nodes:
            seed = zlib.crc32(node.encode()) % 1000
            for gpu in range(GPUS):
                labels = (f'{{DCGM_FI_DRIVER_VERSION="550.54.15",Hostname="{node}",'
                          f'UUID="GPU-{seed:08d}-{gpu}",device="nvidia{gpu}",gpu="{gpu}",'
                          'modelName="Tesla V100-SXM2-16GB"}')
                for k in range(samples - 1, -1, -1):
                    ts = t_end - 5 - STEP_S * k
                    yield f"{metric}{labels} {value(metric, seed, gpu, k)} {ts:.3f}\n"
    yield "# EOF\n"


def prepare(size: int, node_pools: dict[str, Pool], rules: dict[str, Any], end: datetime,
            work: Path) -> tuple[Path, float]:
    """Raw history backfilled, then the recording rules evaluated at the read time."""
    started = time.monotonic()
    data = work / f"data-{size}"
    source = work / f"history-{size}.om"
    with source.open("w") as fh:
        fh.writelines(openmetrics(list(node_pools), end))
    backfill(source, data)
    source.unlink()
    rule_eval.record_all(rules, data, work / f"rules-{size}", end.timestamp(),
                         (end - HISTORY).timestamp(), STEP_S)
    return data, time.monotonic() - started


class Reads:
    """One fleet size's Prometheus and a reader per mode, its read ticks timed one by one."""

    def __init__(self, prom: PrometheusServer, node_pools: dict[str, Pool]):
        self.prom, self.node_pools = prom, node_pools
        self.sent: list[str] = []
        self.readers = {mode: PrometheusReader(
            PrometheusConfig(url=prom.url, timeout="60s", stale_after=STALE_AFTER,
                             recording_rules=mode == "rules"),
            session_hook=lambda s: s.hooks["response"].append(
                lambda r, *a, **k: self.sent.append(r.url)))
            for mode in MODES}
        self.timings: dict[str, list[float]] = {mode: [] for mode in MODES}
        self.queries: dict[str, set[int]] = {mode: set() for mode in MODES}
        self.seen: dict[str, dict[str, NodeObservation]] = {}

    def tick(self, mode: str, pools: list[Pool], end: datetime, timed: bool) -> None:
        size = len(self.node_pools)
        before = len(self.sent)
        t0 = time.perf_counter()
        result = self.readers[mode].read(self.node_pools, pools, end)
        elapsed = (time.perf_counter() - t0) * 1000
        self.queries[mode].add(len(self.sent) - before)
        if result.error is not None:
            raise SystemExit(f"{size} nodes, {mode}: {result.error}")
        fresh = sum(1 for o in result.nodes.values() if o.metrics and not o.metrics_missing)
        if fresh != size:
            raise SystemExit(f"{size} nodes, {mode}: only {fresh} have fresh metrics")
        if timed:
            self.timings[mode].append(elapsed)
        self.seen[mode] = result.nodes

    def stats(self, mode: str) -> dict[str, float]:
        if len(self.queries[mode]) != 1:
            raise SystemExit(f"{len(self.node_pools)} nodes: queries per tick varied: "
                             f"{sorted(self.queries[mode])}")
        timings = self.timings[mode]
        return {"queries": next(iter(self.queries[mode])), "read_ms": statistics.median(timings),
                "min_ms": min(timings)}

    def close(self) -> None:
        for reader in self.readers.values():
            reader.close()


def interleaved(reads: dict[int, Reads], mode: str, pools: list[Pool], end: datetime,
                count: int) -> None:
    """Ticks alternate between the fleet sizes, so a burst of load on this shared machine
    falls on both sides of the ratio; the first tick of each warms Prometheus' caches."""
    for tick in range(count + 1):
        for r in reads.values():
            r.tick(mode, pools, end, timed=tick > 0)


def bare_get_ms(url: str, query: str, end: datetime, encoding: str) -> float:
    """One GET of ``query`` with a bare HTTP client, the body read but not decoded: what
    Prometheus itself takes (evaluating, encoding, sending), without any client code."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    path = "/api/v1/query?" + urllib.parse.urlencode(
        {"query": query, "time": f"{end.timestamp():.3f}"})
    try:
        conn.request("GET", path)  # connect first: the reader keeps its connection open
        conn.getresponse().read()
        t0 = time.perf_counter()
        conn.request("GET", path, headers={"Accept-Encoding": encoding})
        resp = conn.getresponse()
        resp.read()
        elapsed = (time.perf_counter() - t0) * 1000
    finally:
        conn.close()
    if resp.status != 200:
        raise SystemExit(f"prometheus answered {resp.status} to the rules query")
    return elapsed


def prometheus_alone(reads: dict[int, Reads], query: str, end: datetime,
                     count: int) -> dict[str, dict[int, float]]:
    """Median bare-GET time per size, interleaved, with the encoding the reader asks for
    (requests: gzip) and without compression."""
    out: dict[str, dict[int, list[float]]] = {enc: {n: [] for n in reads} for enc in ENCODINGS}
    for _ in range(count):
        for enc in ENCODINGS:
            for n, r in reads.items():
                out[enc][n].append(bare_get_ms(r.prom.url, query, end, enc))
    return {enc: {n: statistics.median(t) for n, t in by.items()} for enc, by in out.items()}


def verdicts(pool: Pool, obs: NodeObservation) -> tuple[object, ...]:
    """What the engine takes from one node's metrics."""
    m = obs.metrics
    if m is None or obs.metrics_missing:
        return ("missing",)
    peak = m.util_max_idle_window
    idle = peak is not None and peak < pool.scale_down.gpu_utilization_below
    hot = m.temperature_max_c is not None and m.temperature_max_c > pool.health.max_gpu_temperature
    return (m.util_mean, idle, m.xid_errors, hot, m.thermal_throttle)


def rules_cost_ms(url: str, rules: dict[str, Any], end: datetime) -> float:
    """Prometheus time for one evaluation of every rule (median of 3 runs per rule)."""
    runs = [rule_eval.evaluate(url, rules, [end.timestamp()])[1] for _ in range(3)]
    return sum(statistics.median(run[name] for run in runs) for name in runs[0] if name != MARKER)


def line(results: dict[int, dict[str, float]], small_n: int, big_n: int) -> str:
    small, big = results[small_n], results[big_n]
    return (f"queries_per_tick_{small_n}={small['queries']:.0f} "
            f"queries_per_tick_{big_n}={big['queries']:.0f} "
            f"read_ms_{big_n}={big['read_ms']:.1f} "
            f"ratio_{big_n}_over_{small_n}={big['read_ms'] / small['read_ms']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs=2, default=[100, 1000], metavar=("SMALL", "BIG"))
    parser.add_argument("--ticks", type=int, default=7)
    parser.add_argument("--mode", choices=MODES, default="rules",
                        help="Which reader mode the last line reports (both are printed).")
    args = parser.parse_args()
    catalog = load_catalog(ROOT / "examples" / "prices-alicloud.yaml")
    policies = load_policies(ROOT / "policies", catalog)
    pools = [p for t in policies.values() for p in t.pools]
    rule_set = RuleSet.of(pools, "Hostname", STALE_AFTER)
    rules = recording_rules(rule_set, f"{STEP_S}s")
    now = int(time.time()) - 60
    end = datetime.fromtimestamp(now - now % STEP_S, UTC)  # on the rules' evaluation grid
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    with tempfile.TemporaryDirectory(prefix="bench-signals-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        reads: dict[int, Reads] = {}
        for size in args.sizes:
            node_pools = fleet(policies, size)
            data, prepare_s = prepare(size, node_pools, rules, end, work)
            print(f"{size:>5} nodes x {GPUS} GPUs: history and rules backfilled in "
                  f"{prepare_s:.1f} s", flush=True)
            prom = stack.enter_context(PrometheusServer(work / f"prom-{size}", data_dir=data))
            reads[size] = Reads(prom, node_pools)
            stack.callback(reads[size].close)
        results: dict[str, dict[int, dict[str, float]]] = {}
        for mode in MODES:
            interleaved(reads, mode, pools, end, args.ticks)
            results[mode] = {size: r.stats(mode) for size, r in reads.items()}
            for size, st in results[mode].items():
                print(f"{size:>5} nodes, {mode:>5}: {st['queries']:.0f} HTTP queries/tick, read "
                      f"median {st['read_ms']:.1f} ms (min {st['min_ms']:.1f}) over "
                      f"{args.ticks} ticks", flush=True)
        for size, r in reads.items():
            agree(size, r, rules, end)
        alone = prometheus_alone(reads, RecordedQuery(rule_set).query(), end, args.ticks)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    small_n, big_n = args.sizes
    for enc, by in alone.items():
        print(f"prometheus alone, rules query, Accept-Encoding {enc}: {small_n} nodes "
              f"{by[small_n]:.1f} ms, {big_n} nodes {by[big_n]:.1f} ms, ratio "
              f"{by[big_n] / by[small_n]:.2f}")
    rules_ms = {n: results["rules"][n]["read_ms"] for n in args.sizes}
    gz = alone[ENCODINGS[0]]
    print(f"the reader's own part (read minus prometheus alone, gzip): {small_n} nodes "
          f"{rules_ms[small_n] - gz[small_n]:.1f} ms, {big_n} nodes "
          f"{rules_ms[big_n] - gz[big_n]:.1f} ms")
    for mode in MODES:
        print(f"{mode:>5}: {line(results[mode], small_n, big_n)}")
    print(line(results[args.mode], small_n, big_n))


def agree(size: int, r: Reads, rules: dict[str, Any], end: datetime) -> None:
    """Both modes must give the engine the same inputs; prints what the rules cost."""
    differ = [n for n, pool in r.node_pools.items()
              if verdicts(pool, r.seen["raw"][n]) != verdicts(pool, r.seen["rules"][n])]
    if differ:
        raise SystemExit(f"{size} nodes: raw and rules disagree on {len(differ)} nodes, "
                         f"e.g. {differ[0]}")
    idle = sum(1 for n, pool in r.node_pools.items() if verdicts(pool, r.seen["rules"][n])[1])
    cost = rules_cost_ms(r.prom.url, rules, end)
    rule_count = sum(len(g["rules"]) - 1 for g in rules["groups"])
    print(f"{size:>5} nodes: both modes agree on every node ({idle} idle); Prometheus "
          f"spends {cost:.0f} ms per evaluation of the {rule_count} rules "
          f"(every rules_interval, outside the tick)", flush=True)


if __name__ == "__main__":
    main()

"""Prometheus query cost per tick for 100 and 1,000 nodes x 8 GPUs.

For each fleet size a real Prometheus (the Debian package) starts on a TSDB backfilled with
22 minutes of synthetic DCGM series (30 s apart: util, memory, temperature, power, XID,
throttle reasons) for the nodes of the three example policies, plus the gpu-autoscaler
recording rules evaluated over that history (``promtool tsdb create-blocks-from rules``).
The signals reader runs several ticks against it in both modes: raw per-GPU series (the
default) and recorded per-node series (``prometheus.recording_rules: true``). HTTP
queries are counted on the wire (a requests response hook), not taken from the reader.

    python benchmarks/bench_signals.py [--sizes 100 1000] [--ticks 5] [--mode raw|recorded]

Last line: queries_per_tick_100=<a> queries_per_tick_1000=<b> read_ms_1000=<c>
ratio_1000_over_100=<d>
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from autoscaler.catalog import load_catalog
from autoscaler.policy import load_policies
from autoscaler.policy.models import Pool, TeamPolicy, pool_key
from autoscaler.sandbox.prometheus import PrometheusServer, backfill, backfill_rules
from autoscaler.signals.config import PrometheusConfig
from autoscaler.signals.prometheus import PrometheusReader
from autoscaler.signals.rules import recording_rules

ROOT = Path(__file__).resolve().parent.parent
GPUS = 8
STEP_S = 30
HISTORY = timedelta(minutes=22)  # covers the longest window of the example policies (20m)
METRICS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
           "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_XID_ERRORS",
           "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")


def fleet(policies: dict[str, TeamPolicy], size: int) -> dict[str, Pool]:
    """``size`` node names spread over the pools, named ``<team>-<pool>-<n>``."""
    pools = [(pool_key(t.team, p.name), p) for t in policies.values() for p in t.pools]
    return {f"{key.replace('/', '-')}-{i}": pool
            for i in range(size) for key, pool in [pools[i % len(pools)]]}


def value(metric: str, seed: int, k: int) -> float:
    util = (seed + 7 * k) % 101
    return {
        "DCGM_FI_DEV_GPU_UTIL": util, "DCGM_FI_DEV_FB_USED": 300 + 150 * util,
        "DCGM_FI_DEV_FB_FREE": 16000 - 150 * util, "DCGM_FI_DEV_GPU_TEMP": 35 + util // 3,
        "DCGM_FI_DEV_POWER_USAGE": 40 + 2 * util, "DCGM_FI_DEV_XID_ERRORS": 79 if seed == k else 0,
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 64 if util > 97 else 0,
    }[metric]


def openmetrics(nodes: list[str], end: datetime) -> Iterator[str]:
    samples = int(HISTORY.total_seconds()) // STEP_S
    t_end = end.timestamp()
    for metric in METRICS:
        yield f"# TYPE {metric} gauge\n"
        for node in nodes:
            for gpu in range(GPUS):
                seed = zlib.crc32(f"{node}/{gpu}".encode()) % 1000
                labels = (f'{{DCGM_FI_DRIVER_VERSION="550.54.15",Hostname="{node}",'
                          f'UUID="GPU-{seed:08d}-{gpu}",device="nvidia{gpu}",gpu="{gpu}",'
                          'modelName="Tesla V100-SXM2-16GB"}')
                for k in range(samples - 1, -1, -1):
                    ts = t_end - 5 - STEP_S * k
                    yield f"{metric}{labels} {value(metric, seed, k)} {ts:.3f}\n"
    yield "# EOF\n"


def prepare(size: int, node_pools: dict[str, Pool], end: datetime, work: Path) -> tuple[Path, float]:
    """Raw history backfilled, then the recording rules evaluated over it (30 s)."""
    started = time.monotonic()
    data = work / f"data-{size}"
    source = work / f"history-{size}.om"
    with source.open("w") as fh:
        fh.writelines(openmetrics(list(node_pools), end))
    backfill(source, data)
    source.unlink()
    with PrometheusServer(work / f"prom-raw-{size}", data_dir=data) as prom:
        backfill_rules(prom.url, recording_rules("Hostname", f"{STEP_S}s"),
                       (end - HISTORY).timestamp(), end.timestamp() + 1, data)
    return data, time.monotonic() - started


def ticks(prom: PrometheusServer, recorded: bool, node_pools: dict[str, Pool],
          pools: list[Pool], end: datetime, count: int) -> dict[str, float]:
    sent: list[str] = []
    reader = PrometheusReader(
        PrometheusConfig(url=prom.url, timeout="60s", stale_after="2m", recording_rules=recorded),
        session_hook=lambda s: s.hooks["response"].append(lambda r, *a, **k: sent.append(r.url)))
    timings, per_tick = [], []
    for tick in range(count + 1):  # the first tick warms Prometheus' caches
        before = len(sent)
        t0 = time.perf_counter()
        result = reader.read(node_pools, pools, end)
        elapsed = (time.perf_counter() - t0) * 1000
        per_tick.append(len(sent) - before)
        if result.error is not None:
            raise SystemExit(f"{len(node_pools)} nodes: {result.error}")
        fresh = sum(1 for o in result.nodes.values() if o.metrics and not o.metrics_missing)
        if fresh != len(node_pools):
            raise SystemExit(f"{len(node_pools)} nodes: only {fresh} have fresh metrics")
        if tick:
            timings.append(elapsed)
    reader.close()
    if len(set(per_tick)) != 1:
        raise SystemExit(f"{len(node_pools)} nodes: queries per tick varied: {per_tick}")
    return {"queries": per_tick[0], "read_ms": statistics.median(timings), "min_ms": min(timings)}


def measure(size: int, policies: dict[str, TeamPolicy], count: int,
            work: Path) -> dict[str, dict[str, float]]:
    end = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=60)
    node_pools = fleet(policies, size)
    pools = [p for t in policies.values() for p in t.pools]
    data, prepare_s = prepare(size, node_pools, end, work)
    print(f"{size:>5} nodes x {GPUS} GPUs: history and rules backfilled in {prepare_s:.1f} s",
          flush=True)
    out = {}
    with PrometheusServer(work / f"prom-{size}", data_dir=data) as prom:
        for mode, recorded in (("raw", False), ("recorded", True)):
            r = out[mode] = ticks(prom, recorded, node_pools, pools, end, count)
            print(f"{size:>5} nodes, {mode:>8} series: {r['queries']:.0f} queries/tick, read "
                  f"median {r['read_ms']:.1f} ms (min {r['min_ms']:.1f}) over {count} ticks",
                  flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs=2, default=[100, 1000], metavar=("SMALL", "BIG"))
    parser.add_argument("--ticks", type=int, default=5)
    parser.add_argument("--mode", choices=["raw", "recorded"], default="raw",
                        help="Which reader mode the last line reports (both are printed).")
    args = parser.parse_args()
    catalog = load_catalog(ROOT / "examples" / "prices-alicloud.yaml")
    policies = load_policies(ROOT / "policies", catalog)
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-signals-") as tmp:
        for size in args.sizes:
            results[size] = measure(size, policies, args.ticks, Path(tmp))
    small_n, big_n = args.sizes
    for mode in ("raw", "recorded"):
        small, big = results[small_n][mode], results[big_n][mode]
        print(f"{mode}: ratio_{big_n}_over_{small_n}={big['read_ms'] / small['read_ms']:.2f}")
    small, big = results[small_n][args.mode], results[big_n][args.mode]
    print(f"queries_per_tick_{small_n}={small['queries']:.0f} "
          f"queries_per_tick_{big_n}={big['queries']:.0f} "
          f"read_ms_{big_n}={big['read_ms']:.1f} "
          f"ratio_{big_n}_over_{small_n}={big['read_ms'] / small['read_ms']:.2f}")


if __name__ == "__main__":
    main()

"""Benchmark: what predictive capacity costs the service's tick (service/observe/forecasts.py).

    python benchmarks/bench_forecast_service.py [--pools 20] [--weeks 5] [--ticks 60]

A SQLite fleet store (a temporary file) holds ``--weeks`` of a daily demand wave for each
of ``--pools`` pools in mode forecast-only. Measured: the first tick (every pool records,
one pool is fitted: ``MAX_FITS_PER_TICK``), the ticks until every pool has been fitted,
then ``--ticks`` steady ticks 30 s apart (record + forecast; the history is re-read from
the store when a bin completes). The ratio says how much one fit costs against a steady
tick. The last line::

    pools=<n> weeks=<w> fit_tick_ms=<a> steady_tick_ms_median=<b> steady_tick_ms_p95=<c>
    ms_per_pool_steady=<d> fit_over_steady=<e>
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from autoscaler.fleet.demand_history import STEP, DemandHistory, bin_start
from autoscaler.fleet.store import FleetStore
from autoscaler.model.node import FleetView
from autoscaler.model.snapshot import PendingJob, PoolObservation
from autoscaler.model.snapshot_parts import Observed
from autoscaler.policy.models import TeamPolicy
from autoscaler.service.observe.forecasts import PoolForecasts

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def wave(at: datetime) -> float:
    return 8.0 if 8 <= at.hour < 18 else 1.0


def policies(pools: int) -> dict[str, TeamPolicy]:
    return {"bench": TeamPolicy.model_validate({"team": "bench", "pools": [
        {"name": f"p{i}", "cloud": "aws", "region": "us-east-1", "instance_types": ["p3.2xlarge"],
         "max_nodes": 10, "predictive": {"mode": "forecast-only"}} for i in range(pools)]})}


def observed(pools: int, at: datetime) -> Observed:
    job = [PendingJob(id="j", gpus=wave(at))]
    return Observed(taken_at=at, pools={f"bench/p{i}": PoolObservation(pending=job)
                                        for i in range(pools)})


def timed(fc: PoolForecasts, pols: dict[str, TeamPolicy], pools: int, at: datetime) -> float:
    t = time.perf_counter()
    fc.update(pols, FleetView(), observed(pools, at), at)
    return (time.perf_counter() - t) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pools", type=int, default=20)
    ap.add_argument("--weeks", type=int, default=5)
    ap.add_argument("--ticks", type=int, default=60)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = FleetStore(f"sqlite:///{Path(tmp) / 'fleet.db'}")
        history = DemandHistory(store)
        start = bin_start(NOW) - timedelta(weeks=args.weeks)
        bins = [(start + i * STEP, wave(start + i * STEP)) for i in range(args.weeks * 7 * 288)]
        for i in range(args.pools):
            history.fill(f"bench/p{i}", bins)
        pols, fc, at = policies(args.pools), PoolForecasts(store), NOW
        fits = []
        for _ in range(args.pools):  # one fit per tick
            fits.append(timed(fc, pols, args.pools, at))
            at += timedelta(seconds=30)
        steady = []
        for _ in range(args.ticks):
            steady.append(timed(fc, pols, args.pools, at))
            at += timedelta(seconds=30)
        store.close()
    fit, med = statistics.median(fits), statistics.median(steady)
    p95 = sorted(steady)[int(0.95 * (len(steady) - 1))]
    print(f"fit ticks: median {fit:.1f} ms ({len(fits)} ticks, one pool fitted in each); "
          f"steady ticks: median {med:.1f} ms, p95 {p95:.1f} ms over {len(steady)}")
    print(f"pools={args.pools} weeks={args.weeks} fit_tick_ms={fit:.1f} "
          f"steady_tick_ms_median={med:.1f} steady_tick_ms_p95={p95:.1f} "
          f"ms_per_pool_steady={med / args.pools:.2f} fit_over_steady={fit / med:.1f}")


if __name__ == "__main__":
    main()

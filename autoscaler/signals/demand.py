"""Demand history from Prometheus at start, so a new controller (or a fresh store) does
not forecast from nothing.

The service exports each pool's demand as ``gpu_autoscaler_demand_gpus{pool}`` (GPUs
requested by pending and running jobs, the value the store's history holds); Prometheus
scraping an earlier controller has kept it. One range query over every pool reads the
largest value of each 5-minute bin: ``max by (pool) (max_over_time(...[5m]))`` evaluated
at the end of every bin, for at most ``MAX_RANGE`` (14 days at a 5-minute step is 4,032
points per pool, under Prometheus' 11,000-point limit). The pool names go into the query
as escaped regex literals, never as PromQL.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from autoscaler.fleet.demand_history import STEP, bin_start
from autoscaler.signals.prometheus import PrometheusReader
from autoscaler.signals.promql import regex_literal, sample_value

DEMAND_METRIC = "gpu_autoscaler_demand_gpus"
MAX_RANGE = timedelta(days=14)

Bins = dict[str, list[tuple[datetime, float]]]  # pool -> (bin start, GPUs), oldest first


def demand_query(pools: Iterable[str]) -> str:
    alts = "|".join(regex_literal(p) for p in sorted(pools))
    step = int(STEP.total_seconds())
    return f'max by (pool) (max_over_time({DEMAND_METRIC}{{pool=~"{alts}"}}[{step}s]))'


def load_demand(reader: PrometheusReader, pools: Iterable[str], now: datetime,
                span: timedelta = MAX_RANGE) -> Bins:
    """The complete bins of the last ``span`` (at most MAX_RANGE) that Prometheus holds.

    Raises ``PrometheusReadError`` when Prometheus cannot answer (the caller starts
    from the store alone)."""
    wanted = sorted(set(pools))
    if not wanted:
        return {}
    end = bin_start(now)  # a value evaluated at a bin's end covers that bin
    start = end - min(span, MAX_RANGE) + STEP
    result = reader.query_range(demand_query(wanted), start, end, STEP)
    # Junk is skipped point by point: one bad value must not cost every pool its history.
    first, last = start.timestamp(), end.timestamp()
    out: Bins = {}
    for series in result:
        labels = series.get("metric") if isinstance(series, dict) else None
        pool = labels.get("pool") if isinstance(labels, dict) else None
        values = series.get("values") if isinstance(series, dict) else None
        if not isinstance(pool, str) or pool not in wanted or not isinstance(values, list):
            continue
        points = out.setdefault(pool, [])
        for point in values:
            v = sample_value(point)
            if v is None or not math.isfinite(v) or v < 0:
                continue
            ts = point[0]  # a JSON number; NaN and inf fall outside the range
            if isinstance(ts, int | float) and first <= ts <= last:
                points.append((datetime.fromtimestamp(ts, UTC) - STEP, v))
    return out

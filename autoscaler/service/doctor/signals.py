"""The signal sources as a tick reads them: Prometheus (with the DCGM series of the
store's ready and draining nodes), Slurm and Kubernetes (with what the drainers run)."""

from __future__ import annotations

from autoscaler.model.clock import utc_now
from autoscaler.model.lifecycle import METERED
from autoscaler.policy.models import Pool
from autoscaler.service.doctor.context import Context
from autoscaler.service.doctor.report import Result, fail, ok, skip
from autoscaler.signals.prometheus import PrometheusReader, PrometheusReadError
from autoscaler.signals.promql import UTIL_METRICS

SHOWN = 5  # node names listed in a reason


def prometheus(ctx: Context) -> list[Result]:
    """The tick's own read (``PrometheusReader.read``) for every ready or draining node
    of the store: each must have a recent sample of its pool's utilization series. With
    no such node, Prometheus must answer a query for the DCGM utilization series."""
    name = "prometheus"
    config = ctx.config.signals.prometheus
    if config is None:
        if ctx.pools():
            return [fail(name, "no signals.prometheus: every pool's metrics would be missing, "
                               "so nothing is ever scaled down")]
        return [skip(name, "no signals.prometheus and no pool")]
    reader = PrometheusReader(config)
    try:
        return [_read(ctx, reader)]
    finally:
        reader.close()


def _read(ctx: Context, reader: PrometheusReader) -> Result:
    name, now = "prometheus", utc_now()
    pools = {(team, pool.name): pool for team, pool in ctx.pools()}
    metered: dict[str, Pool] = {}
    for node in ctx.nodes or []:
        pool = pools.get((node.team, node.pool))
        if node.state in METERED and pool is not None:
            metered[node.name] = pool
    if not metered:
        names = "|".join(sorted(metric for metric, _ in UTIL_METRICS.values()))
        try:
            series = reader.query(f'count by (__name__) ({{__name__=~"{names}"}})', now)
        except PrometheusReadError as exc:
            return fail(name, str(exc))
        counts = {s.get("metric", {}).get("__name__", "?"): s.get("value", [0, "0"])[1]
                  for s in series if isinstance(s, dict)}
        seen = ", ".join(f"{n} x{c}" for n, c in sorted(counts.items())) or "no DCGM series yet"
        where = "no ready node in the store" if ctx.nodes is not None else "store unread"
        return ok(name, f"{reader.config.url} answers; {where}; {seen}")
    reading = reader.read(metered, list(pools.values()), now)
    if reading.error is not None:
        return fail(name, reading.error)
    missing = {n: o.metrics_missing for n, o in reading.nodes.items() if o.metrics_missing}
    if missing:
        first = sorted(missing)[0]
        shown = ", ".join(sorted(missing)[:SHOWN]) + (" ..." if len(missing) > SHOWN else "")
        return fail(name, f"{len(missing)} of {len(metered)} ready node(s) without DCGM "
                          f"series: {shown} ({first}: {missing[first]})")
    return ok(name, f"{reader.config.url}: all {len(metered)} ready node(s) have recent DCGM "
                    "series")

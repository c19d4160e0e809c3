"""The signal sources as a tick reads them: Prometheus (with the DCGM series of the
store's ready and draining nodes), Slurm and Kubernetes (with what the drainers run)."""

from __future__ import annotations

from datetime import timedelta

from autoscaler.model.clock import utc_now
from autoscaler.model.lifecycle import METERED
from autoscaler.policy.duration import format_duration, parse_duration
from autoscaler.policy.models import Pool
from autoscaler.service.doctor.context import Context
from autoscaler.service.doctor.report import Result, fail, ok, skip
from autoscaler.signals.prometheus import PrometheusReader, PrometheusReadError, public_url
from autoscaler.signals.promql import UTIL_METRICS

SHOWN = 5  # node names listed in a reason
MAX_SCRAPE = timedelta(hours=1)  # an answer above is not a scrape interval
# Every utilization series a pool may scale on (DCGM_FI_DEV_GPU_UTIL, ...PROF_GR_ENGINE_ACTIVE).
_NAMES = "|".join(sorted(m for m, _ in UTIL_METRICS.values()))
DCGM_UTIL = f'{{__name__=~"{_NAMES}"}}'


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
        return [_read(ctx, reader), _windows(ctx, reader)]
    finally:
        reader.close()


def _windows(ctx: Context, reader: PrometheusReader) -> Result:
    """Each pool's windows hold two scrapes of its DCGM series. A shorter window often
    holds no sample: the pool's mean is missing, and its nodes are never taken as idle."""
    name = "prometheus windows"
    try:
        jobs = dcgm_jobs(reader.query(f"count by (job) ({DCGM_UTIL})", utc_now()))
        targets = reader.active_targets() if jobs else []
    except PrometheusReadError as exc:
        return skip(name, f"scrape interval not known: {exc}")
    if not jobs:
        return ok(name, "no DCGM series yet: no scrape interval to compare the windows with")
    found = scrape_interval(targets, jobs)
    if found is None:
        return skip(name, f"scrape interval of job(s) {', '.join(sorted(jobs))} not known (a "
                          "server without Prometheus' targets API)")
    job, scrape = found
    short = short_windows(ctx.pools(), scrape)
    if short:
        shown = ", ".join(short[:SHOWN]) + (" ..." if len(short) > SHOWN else "")
        return fail(name, f"{len(short)} window(s) shorter than two scrapes of job {job} "
                          f"(every {format_duration(scrape)}): {shown}. Such a window often "
                          "holds no sample: the pool's mean is missing and its nodes are never "
                          f"taken as idle. Make it at least {format_duration(2 * scrape)}, "
                          "or scrape more often")
    return ok(name, f"every pool's windows hold two scrapes or more (job {job}, every "
                    f"{format_duration(scrape)})")


def dcgm_jobs(series: object) -> set[str]:
    """The ``job`` labels of a ``count by (job)`` answer (anything else is left out)."""
    if not isinstance(series, list):
        return set()
    return {s["metric"]["job"] for s in series
            if isinstance(s, dict) and isinstance(s.get("metric"), dict)
            and isinstance(s["metric"].get("job"), str)}


def scrape_interval(targets: object, jobs: set[str]) -> tuple[str, timedelta] | None:
    """The longest scrape interval among the active targets of ``jobs`` and its job, from
    ``/api/v1/targets``; intervals that are not durations, or not possible, are left out."""
    every: dict[str, timedelta] = {}
    for target in targets if isinstance(targets, list) else []:
        if not isinstance(target, dict):
            continue
        labels = target.get("labels")
        job = labels.get("job") if isinstance(labels, dict) else None
        try:
            interval = parse_duration(target.get("scrapeInterval"))
        except ValueError:
            continue
        if isinstance(job, str) and job in jobs and timedelta(0) < interval <= MAX_SCRAPE:
            every[job] = max(every.get(job, interval), interval)
    return max(every.items(), key=lambda kv: (kv[1], kv[0])) if every else None


def short_windows(pools: list[tuple[str, Pool]], scrape: timedelta) -> list[str]:
    """``team/pool field duration`` of every window shorter than two scrapes."""
    return [f"{team}/{pool.name} {what} {format_duration(value)}"
            for team, pool in pools
            for what, value in (("scale_up.window", pool.scale_up.window),
                                ("scale_down.idle_for", pool.scale_down.idle_for))
            if value < 2 * scrape]


def _read(ctx: Context, reader: PrometheusReader) -> Result:
    name, now = "prometheus", utc_now()
    pools = {(team, pool.name): pool for team, pool in ctx.pools()}
    metered: dict[str, Pool] = {}
    for node in ctx.nodes or []:
        pool = pools.get((node.team, node.pool))
        if node.state in METERED and pool is not None:
            metered[node.name] = pool
    if not metered:
        try:
            series = reader.query(f"count by (__name__) ({DCGM_UTIL})", now)
        except PrometheusReadError as exc:
            return fail(name, str(exc))
        counts = {s.get("metric", {}).get("__name__", "?"): s.get("value", [0, "0"])[1]
                  for s in series if isinstance(s, dict)}
        seen = ", ".join(f"{n} x{c}" for n, c in sorted(counts.items())) or "no DCGM series yet"
        where = "no ready node in the store" if ctx.nodes is not None else "store unread"
        return ok(name, f"{public_url(reader.config.url)} answers; {where}; {seen}")
    reading = reader.read(metered, list(pools.values()), now)
    if reading.error is not None:
        return fail(name, reading.error)
    missing = {n: o.metrics_missing for n, o in reading.nodes.items() if o.metrics_missing}
    if missing:
        first = sorted(missing)[0]
        shown = ", ".join(sorted(missing)[:SHOWN]) + (" ..." if len(missing) > SHOWN else "")
        return fail(name, f"{len(missing)} of {len(metered)} ready node(s) without DCGM "
                          f"series: {shown} ({first}: {missing[first]})")
    return ok(name, f"{public_url(reader.config.url)}: all {len(metered)} ready node(s) have recent DCGM "
                    "series")

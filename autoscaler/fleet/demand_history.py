"""Each pool's demand history in the fleet store, one row per pool and 5-minute bin.

A bin holds the largest value any tick in it saw (capacity must be there for the whole
bin, as ``forecast.series.from_intervals`` counts a trace), so several ticks per bin and
a restart in the middle of one are both fine. ``forecast_gpus`` is the p50 forecast made
for the bin before it started (kept once written): the rolling MAPE compares it with what
the bin then held. Rows older than the retention (5 weeks by default: the forecaster
looks back 4 weeks, plus a week of slack) are deleted: a predictive pool's by ``prune``
when it is refitted, every pool's (pools gone from the policies and pools that forecast
nothing too) by ``prune_stale``, a bounded batch at a time, in the leader's hourly prune.

Bins loaded from Prometheus at start (``fill``) never overwrite a bin the service wrote.
Every write is fenced by the leader lease, like every other store write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select

from autoscaler.fleet.store import FleetStore
from autoscaler.fleet.tables import DemandBinRow

STEP = timedelta(minutes=5)
RETENTION = timedelta(weeks=5)


def bin_start(at: datetime) -> datetime:
    """The start of the 5-minute bin holding ``at`` (bins are aligned to the Unix epoch,
    so every Monday 00:00 UTC starts a bin)."""
    secs = int(at.timestamp())
    step = int(STEP.total_seconds())
    return datetime.fromtimestamp(secs - secs % step, UTC)


@dataclass(frozen=True)
class DemandSample:
    """What one tick saw of a pool: GPUs requested by its pending and running jobs, GPUs
    busy (DCGM utilization x GPUs reporting; None without metrics) and READY nodes."""

    requested_gpus: float
    in_use_gpus: float | None = None
    nodes_serving: int | None = None


@dataclass(frozen=True)
class DemandBin:
    start: datetime
    requested_gpus: float
    in_use_gpus: float | None = None
    nodes_serving: int | None = None
    forecast_gpus: float | None = None
    source: str = "service"


def _bigger(old: float | None, new: float | None) -> float | None:
    if old is None:
        return new
    return old if new is None else max(old, new)


class DemandHistory:
    def __init__(self, store: FleetStore, retention: timedelta = RETENTION):
        self.store, self.retention = store, retention

    def record(self, pool: str, at: datetime, sample: DemandSample,
               forecast_gpus: float | None = None) -> None:
        """Fold one tick's sample into its bin (the bin keeps the largest values)."""
        self.record_all(at, {pool: (sample, forecast_gpus)})

    def record_all(self, at: datetime,
                   samples: Mapping[str, tuple[DemandSample, float | None]]) -> None:
        """``record`` for every pool of a tick in one transaction (one commit per tick)."""
        if not samples:
            return
        start = bin_start(at)
        with self.store._write() as s:
            for pool, (sample, forecast_gpus) in samples.items():
                row = s.get(DemandBinRow, (pool, start), with_for_update=True)
                if row is None:
                    s.add(DemandBinRow(pool=pool, bin_start=start,
                                       requested_gpus=sample.requested_gpus,
                                       in_use_gpus=sample.in_use_gpus,
                                       nodes_serving=sample.nodes_serving,
                                       forecast_gpus=forecast_gpus, source="service"))
                    continue
                row.requested_gpus = max(row.requested_gpus, sample.requested_gpus)
                row.in_use_gpus = _bigger(row.in_use_gpus, sample.in_use_gpus)
                nodes = _bigger(row.nodes_serving, sample.nodes_serving)
                row.nodes_serving = int(nodes) if nodes is not None else None
                if row.forecast_gpus is None:
                    row.forecast_gpus = forecast_gpus
                row.source = "service"

    def fill(self, pool: str, bins: Iterable[tuple[datetime, float]],
             source: str = "prometheus") -> int:
        """Add bins the store does not hold yet (history loaded at start); returns how many."""
        given = {bin_start(at): value for at, value in bins}
        if not given:
            return 0
        with self.store._write() as s:
            held = set(s.scalars(select(DemandBinRow.bin_start).where(
                DemandBinRow.pool == pool, DemandBinRow.bin_start >= min(given),
                DemandBinRow.bin_start <= max(given))))
            fresh = [DemandBinRow(pool=pool, bin_start=start, requested_gpus=value, source=source)
                     for start, value in sorted(given.items()) if start not in held]
            s.add_all(fresh)
        return len(fresh)

    def bins(self, pool: str, since: datetime, until: datetime | None = None) -> list[DemandBin]:
        """The pool's bins starting in ``[since, until)``, oldest first."""
        t = DemandBinRow  # plain rows, not ORM objects: weeks of bins are read at a refit
        q = select(t.bin_start, t.requested_gpus, t.in_use_gpus, t.nodes_serving,
                   t.forecast_gpus, t.source).where(t.pool == pool, t.bin_start >= since)
        if until is not None:
            q = q.where(t.bin_start < until)
        with self.store.session() as s:
            return [DemandBin(*row) for row in s.execute(q.order_by(t.bin_start))]

    def prune(self, pool: str, now: datetime) -> int:
        """Delete the pool's bins older than the retention; returns how many."""
        with self.store._write() as s:
            result = s.execute(delete(DemandBinRow).where(
                DemandBinRow.pool == pool, DemandBinRow.bin_start < now - self.retention))
            return int(getattr(result, "rowcount", 0) or 0)

    def prune_stale(self, now: datetime, limit: int) -> int:
        """Delete the bins older than the retention of every pool, at most ``limit`` of them
        (one bounded transaction; a caller with more to delete calls again); returns how
        many."""
        t = DemandBinRow
        with self.store._write() as s:
            found = s.execute(select(t.pool, t.bin_start).where(t.bin_start < now - self.retention)
                              .order_by(t.pool, t.bin_start).limit(limit)).all()
            # In (pool, bin) order, so each pool's bins found are all of its bins up to the
            # last one found: one range delete per pool.
            last = {pool: start for pool, start in found}
            for pool, start in last.items():
                s.execute(delete(t).where(t.pool == pool, t.bin_start <= start))
            return len(found)

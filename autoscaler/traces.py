"""Trace loaders: the Alibaba GPU v2023 pod list and the GenAI GPU duty-cycle series.

Data is read from a path and never copied. Times stay in the trace's own seconds (an
anonymised origin); the replay window is chosen in whole days from that origin.

Pod-list rules (documented in docs/internals/simulator.md):

* arrival = ``creation_time``; run time = ``deletion_time - scheduled_time`` (the time the
  pod held its GPUs in production). Production queueing (``scheduled - creation``) is not
  replayed: each simulated cluster makes its own waits.
* CPU-only pods (``num_gpu == 0``) are not GPU demand and are skipped.
* Pods never scheduled (no ``scheduled_time``, phase Pending) never ran, so their run time
  is unknown; they are skipped and counted (``never_scheduled``). Their lifetime in the trace
  (p50 ~90 s) is how long users waited before giving up, not work.
* GPU share: ``gpu_milli / 1000`` when ``num_gpu == 1`` (a fraction of one GPU), else
  ``num_gpu`` whole GPUs.
* Pods that arrived before the window but still hold GPUs at its start are "carried": they
  arrive at the window start with the run time they had left; waits exclude them.
* The window ends at the last timestamp of the trace at the latest (pods still Running
  then are censored there).
"""

from __future__ import annotations

import csv
import gzip
import io
import itertools
import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

DAY = 86400.0
POD_COLUMNS = (
    "name", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
    "creation_time", "deletion_time", "scheduled_time",
)
DUTY_COLUMNS = ("value", "timestamp_anon", "container_ip")


class TraceError(Exception):
    """A trace file is missing, unreadable or malformed (message names file and line)."""


@dataclass(frozen=True)
class Job:
    id: str
    arrival: float  # seconds from the trace origin
    duration: float  # seconds of GPU time it needs
    gpus: float  # < 1: share of one GPU; >= 1: whole GPUs on one node
    gpu_spec: tuple[str, ...] = ()  # accepted trace GPU models; empty = any
    qos: str = ""
    carried: bool = False  # running before the window; excluded from wait statistics

    @property
    def whole_gpus(self) -> int:
        return 0 if self.gpus < 1 else round(self.gpus)


@dataclass
class LoadStats:
    rows: int = 0
    cpu_only: int = 0
    never_scheduled: int = 0
    zero_length: int = 0
    outside_window: int = 0
    carried: int = 0


@dataclass
class Workload:
    jobs: list[Job]
    start: float
    end: float
    trace_end: float
    stats: LoadStats = field(default_factory=LoadStats)
    # Jobs before the window: the demand history the predictive strategy trains on (only
    # filled when it is replayed; see sim/strategies/predictive.py).
    before: list[Job] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def demand_gpu_hours(self) -> float:
        """GPU-hours the jobs held in production inside the window (the oracle's demand)."""
        return sum(j.gpus * min(j.duration, self.end - j.arrival) for j in self.jobs) / 3600


def _open_text(path: Path) -> io.TextIOBase:
    try:
        if path.suffix == ".gz":
            return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
        return path.open(encoding="utf-8", newline="")
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror}") from exc


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    with _open_text(path) as fh:
        reader = csv.DictReader(fh)
        try:
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise TraceError(f"{path}: missing column(s) {', '.join(missing)} "
                                 f"(expected at least: {', '.join(required)})")
            for row in reader:
                yield reader.line_num, row
        # A decoding error is a ValueError: bytes that are not UTF-8 (or a file that is
        # not gzip) end the load with the line reached, never a traceback.
        except UnicodeDecodeError as exc:
            raise TraceError(f"{path}:{_first_undecodable_line(path)}: not UTF-8") from exc
        except (csv.Error, OSError, EOFError) as exc:
            raise TraceError(f"{path}:{reader.line_num}: {exc}") from exc


def _first_undecodable_line(path: Path) -> int:
    """Text is decoded in blocks, so the failing line is found again in bytes."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return number
    return 1


def _number(path: Path, line: int, row: dict[str, str], col: str) -> float | None:
    text = (row.get(col) or "").strip()
    if text == "" or text.lower() == "nan":
        return None
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{path}:{line}: column {col}: {text[:40]!r} is not a number") from None
    if not math.isfinite(value):
        raise TraceError(f"{path}:{line}: column {col}: {text[:40]!r} is not a finite number")
    return value


def _share(num_gpu: int, milli: float | None) -> float:
    if num_gpu == 1 and milli is not None and 0 < milli < 1000:
        return milli / 1000
    return float(num_gpu)


def _spec(text: str) -> tuple[str, ...]:
    text = text.strip()
    return () if text in ("", "nan") else tuple(s for s in text.split("|") if s)


def load_pod_list(path: Path, start_day: float = 0, days: float | None = None) -> Workload:
    """GPU jobs of the v2023 pod list that use GPUs inside the chosen window of days."""
    raw: list[tuple[str, float, float, float, float, tuple[str, ...], str]] = []
    stats = LoadStats()
    trace_end = 0.0
    for line, row in _rows(Path(path), POD_COLUMNS):
        stats.rows += 1
        created = _number(path, line, row, "creation_time")
        deleted = _number(path, line, row, "deletion_time")
        if created is None or deleted is None:
            raise TraceError(f"{path}:{line}: creation_time and deletion_time are required")
        trace_end = max(trace_end, deleted)
        num = _number(path, line, row, "num_gpu")
        if num is None or num <= 0:
            stats.cpu_only += 1
            continue
        scheduled = _number(path, line, row, "scheduled_time")
        if scheduled is None:
            stats.never_scheduled += 1
            continue
        share = _share(int(num), _number(path, line, row, "gpu_milli"))
        raw.append((row["name"], created, scheduled, deleted, share, _spec(row.get("gpu_spec", "")),
                    row.get("qos", "")))
    start = start_day * DAY
    end = trace_end if days is None else min(trace_end, start + days * DAY)
    if end <= start:
        raise TraceError(f"{path}: the window starts at day {start_day:g}, after the trace ends "
                         f"(day {trace_end / DAY:.1f})")
    jobs = []
    for name, created, scheduled, deleted, share, spec, qos in raw:
        run = deleted - scheduled
        if run <= 0:
            stats.zero_length += 1
            continue
        if created >= end or deleted <= start:
            stats.outside_window += 1
            continue
        if created < start:
            stats.carried += 1
            jobs.append(Job(name, start, deleted - max(scheduled, start), share, spec, qos, carried=True))
        else:
            jobs.append(Job(name, created, run, share, spec, qos))
    jobs.sort(key=lambda j: (j.arrival, j.id))
    return Workload(jobs=jobs, start=start, end=end, trace_end=trace_end, stats=stats)


@dataclass(frozen=True)
class DutyCycles:
    """Per-container GPU duty cycle (%) sampled every ``step`` seconds."""

    series: tuple[tuple[float, ...], ...]
    step: float

    def __len__(self) -> int:
        return len(self.series)

    def mean(self) -> float:
        vals = [v for s in self.series for v in s]
        return sum(vals) / len(vals) if vals else 0.0


def load_duty_cycles(path: Path, min_samples: int = 10) -> DutyCycles:
    """Read ``value,timestamp_anon,container_ip`` rows (plain or .gz) into per-container series."""
    by_container: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for line, row in _rows(Path(path), DUTY_COLUMNS):
        value = _number(path, line, row, "value")
        ts = _number(path, line, row, "timestamp_anon")
        if value is None or ts is None:
            continue
        by_container[row["container_ip"]].append((ts, max(0.0, min(100.0, value))))
    series, gaps = [], []
    for key in sorted(by_container):
        samples = sorted(by_container[key])
        if len(samples) < min_samples:
            continue
        series.append(tuple(v for _, v in samples))
        gaps += [b[0] - a[0] for a, b in itertools.pairwise(samples) if b[0] > a[0]]
    if not series:
        raise TraceError(f"{path}: no container has at least {min_samples} samples")
    gaps.sort()
    return DutyCycles(series=tuple(series), step=gaps[len(gaps) // 2] if gaps else 60.0)


def compress_arrivals(workload: Workload, factor: float) -> Workload:
    """The same jobs arriving ``factor`` times faster: a backlog from the same trace.

    Arrival offsets from the window start are divided by ``factor`` and the window shrinks
    with them; run times, shares and GPU models stay the trace's own. With the pool's quota
    unchanged, demand outgrows it and jobs queue (the benchmark's backlog scenario).
    """
    if factor < 1:
        raise TraceError(f"compression factor must be >= 1, got {factor:g}")
    start = workload.start
    jobs = [replace(j, arrival=start + (j.arrival - start) / factor) for j in workload.jobs]
    return Workload(jobs=jobs, start=start, end=start + workload.seconds / factor,
                    trace_end=workload.trace_end, stats=workload.stats)

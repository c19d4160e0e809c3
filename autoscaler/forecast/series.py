"""A pool's demand history at a fixed resolution (5-minute bins from a fixed origin).

Bin ``i`` covers ``[origin + (first + i)*step, origin + (first + i + 1)*step)``. Bin 0 is taken
as Monday 00:00 UTC (the simulator maps trace second 0 there), and ``first`` is a whole
number of weeks, so a bin's index modulo a week is its hour-of-week slot.

A series is bounded by its window whatever the timestamps say: ``clip`` keeps the finite
samples with a sane value inside the ``WINDOW`` that holds the most of them (the newest
such), so one sample at t = 3e11 s (a clock jump) is dropped and counted, not a reason to
allocate a bin for every five minutes up to it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

STEP = 300.0
DAY_BINS = int(86400 / STEP)
WEEK_BINS = 7 * DAY_BINS
WINDOW_WEEKS = 13  # a quarter: the service keeps 5 weeks, a backtest of a trace uses up to this
WINDOW = WINDOW_WEEKS * WEEK_BINS * STEP  # seconds
MAX_BINS = (WINDOW_WEEKS + 1) * WEEK_BINS  # the window, from the Monday before it
MAX_GPUS = 1e6  # more than any fleet holds: a larger value is a unit or parse error
MAX_SECONDS = 1e15  # ~30 million years from the origin: further is no time, and its bin
# index would not fit an int64


@dataclass(frozen=True)
class Clip:
    """Which samples a series is built from (``keep``), the window they fall in and how
    many were left out, by reason."""

    keep: np.ndarray
    lo: float
    hi: float
    dropped: dict[str, int]


def clip(times: np.ndarray, values: np.ndarray, span: float = WINDOW) -> Clip:
    """Finite samples with a value in [0, MAX_GPUS], inside the ``span`` seconds that hold
    the most of them (the newest such span)."""
    times, values = np.asarray(times, dtype=float), np.asarray(values, dtype=float)
    finite = np.isfinite(times) & np.isfinite(values)
    sane = finite & (values >= 0) & (values <= MAX_GPUS) & (np.abs(times) <= MAX_SECONDS)
    keep, lo = sane.copy(), 0.0
    if sane.any():
        t = np.sort(times[sane])
        counts = np.searchsorted(t, t + span, side="left") - np.arange(len(t))
        lo = float(t[len(t) - 1 - int(np.argmax(counts[::-1]))])
        keep &= (times >= lo) & (times < lo + span)
    dropped = {"not finite": int((~finite).sum()), "out of range": int((finite & ~sane).sum()),
               "outside the window": int((sane & ~keep).sum())}
    return Clip(keep, lo, lo + span, {k: v for k, v in dropped.items() if v})


@dataclass(frozen=True)
class DemandSeries:
    """GPUs requested by pending and running jobs, one value per bin, ``first`` the index
    of ``values[0]`` on the time axis (a multiple of WEEK_BINS)."""

    values: np.ndarray
    step: float = STEP
    first: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # samples left out, by reason

    def __post_init__(self) -> None:
        if len(self.values) > MAX_BINS or self.first % WEEK_BINS:
            raise ValueError(f"a demand series holds at most {MAX_BINS} bins from a week's "
                             f"start (got {len(self.values)} from bin {self.first})")
        if not np.all(np.isfinite(self.values)):
            raise ValueError("a demand series holds finite values only")

    def __len__(self) -> int:
        return len(self.values)

    def bin_of(self, t: float) -> int:
        """The index in ``values`` of the bin holding time ``t``."""
        return int(t // self.step) - self.first

    def start_of(self, i: int) -> float:
        """The time bin ``i`` starts at."""
        return (self.first + i) * self.step

    def before(self, t: float) -> np.ndarray:
        """Only complete bins before ``t``: what is known at ``t``."""
        return self.values[: max(0, min(len(self.values), self.bin_of(t)))]


def from_intervals(intervals: Iterable[tuple[float, float, float]], end: float,
                   step: float = STEP) -> DemandSeries:
    """``(start, stop, gpus)`` held from start to stop -> GPUs held at any time in each bin,
    up to ``end`` and within the window ``clip`` chooses from the starts.

    A job counts in every bin it overlaps: capacity must be there for the whole bin, so
    a 2-minute job is demand in its bin (an upper bound, the side to provision on)."""
    rows = np.array(list(intervals), dtype=float).reshape(-1, 3)
    start, stop, gpus = rows.T
    window = clip(start, np.where(np.isfinite(stop), gpus, np.nan), WINDOW_WEEKS * WEEK_BINS * step)
    # The series ends with the jobs in the window: a job "deleted" at t = 3e11 s does not
    # stretch it to the window's end either.
    last = min(end if math.isfinite(end) else math.inf, window.hi,
               float(stop[window.keep].max()) if window.keep.any() else math.inf)
    first = max(0, int(window.lo // step) // WEEK_BINS * WEEK_BINS)
    n = max(1, min(MAX_BINS, math.ceil(last / step) - first))
    sane = (np.isfinite(start) & np.isfinite(stop) & (gpus > 0) & (gpus <= MAX_GPUS)
            & (np.abs(start) <= MAX_SECONDS))
    use = sane & (stop > first * step) & (start < min(last, (first + n) * step))
    a = np.maximum(0, (start[use] // step).astype(np.int64) - first)
    b = np.minimum(n, np.ceil(np.minimum(stop[use], (first + n) * step) / step).astype(np.int64)
                   - first)
    diff = np.zeros(n + 1)
    np.add.at(diff, a, gpus[use])
    np.add.at(diff, np.maximum(b, a + 1), -gpus[use])
    dropped = {k: v for k, v in window.dropped.items() if k != "outside the window"}
    if outside := int((sane & ~use).sum()):
        dropped["outside the window"] = outside
    # cumsum of +g and -g can leave -1e-12: no demand is below zero
    return DemandSeries(values=np.maximum(np.cumsum(diff)[:n], 0.0), step=step, first=first,
                        dropped=dropped)

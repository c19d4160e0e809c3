"""A pool's demand history at a fixed resolution (5-minute bins from a fixed origin).

Bin ``i`` covers ``[origin + i*step, origin + (i+1)*step)``. Bin 0 is taken as Monday
00:00 UTC (the simulator maps trace second 0 there), so bin index modulo a week is the
hour-of-week slot.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

STEP = 300.0
DAY_BINS = int(86400 / STEP)
WEEK_BINS = 7 * DAY_BINS


@dataclass(frozen=True)
class DemandSeries:
    """GPUs requested by pending and running jobs, one value per bin."""

    values: np.ndarray
    step: float = STEP

    def __len__(self) -> int:
        return len(self.values)

    def bin_of(self, t: float) -> int:
        return int(t // self.step)

    def before(self, t: float) -> np.ndarray:
        """Only complete bins before ``t``: what is known at ``t``."""
        return self.values[: max(0, min(len(self.values), self.bin_of(t)))]


def from_intervals(intervals: Iterable[tuple[float, float, float]], end: float,
                   step: float = STEP) -> DemandSeries:
    """``(start, stop, gpus)`` held from start to stop -> GPUs held at any time in each bin.

    A job counts in every bin it overlaps: capacity must be there for the whole bin, so
    a 2-minute job is demand in its bin (an upper bound, the side to provision on)."""
    n = max(1, int(np.ceil(end / step)))
    diff = np.zeros(n + 1)
    for start, stop, gpus in intervals:
        if stop <= 0 or start >= end or gpus <= 0:
            continue
        a = max(0, int(start // step))
        b = min(n, int(np.ceil(min(stop, end) / step)))
        diff[a] += gpus
        diff[max(b, a + 1)] -= gpus
    return DemandSeries(values=np.cumsum(diff)[:n], step=step)

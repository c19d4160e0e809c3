"""Load scenarios for the synthetic DCGM exporter: constant, ramp, a recorded trace."""

from __future__ import annotations

import bisect
import csv
import gzip
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


class Scenario(Protocol):
    def util(self, node_index: int, gpu: int, elapsed_s: float) -> float: ...


@dataclass(frozen=True)
class Constant:
    value: float

    def util(self, node_index: int, gpu: int, elapsed_s: float) -> float:
        return self.value


@dataclass(frozen=True)
class Ramp:
    """Linear from ``start`` to ``end`` % over ``seconds``, then holds ``end``."""

    start: float
    end: float
    seconds: float

    def util(self, node_index: int, gpu: int, elapsed_s: float) -> float:
        frac = min(1.0, max(0.0, elapsed_s / self.seconds)) if self.seconds > 0 else 1.0
        return self.start + (self.end - self.start) * frac


class Trace:
    """Replays a duty-cycle CSV (``value,timestamp_anon,container_ip``, optionally gzip).

    GPU k of the sandbox (node_index * gpus_per_node + gpu) plays container k modulo the
    number of containers; ``speed`` trace seconds pass per wall second; playback loops.
    """

    def __init__(self, path: Path, gpus_per_node: int, speed: float = 1.0):
        opener: Callable[..., Any] = gzip.open if str(path).endswith(".gz") else open
        series: dict[str, list[tuple[float, float]]] = {}
        with opener(path, "rt", newline="") as fh:
            for row in csv.DictReader(fh):
                key = row["container_ip"]
                series.setdefault(key, []).append((float(row["timestamp_anon"]), float(row["value"])))
        if not series:
            raise ValueError(f"{path}: no samples")
        self._series = [sorted(s) for _, s in sorted(series.items())]
        self._times = [[t for t, _ in s] for s in self._series]
        self.t0 = min(s[0][0] for s in self._series)
        self.span = max(s[-1][0] for s in self._series) - self.t0 + 60.0
        self.gpus_per_node = gpus_per_node
        self.speed = speed

    def util(self, node_index: int, gpu: int, elapsed_s: float) -> float:
        k = (node_index * self.gpus_per_node + gpu) % len(self._series)
        t = self.t0 + (elapsed_s * self.speed) % self.span
        i = bisect.bisect_right(self._times[k], t) - 1
        # Before a container's first sample it was not running: idle.
        return self._series[k][i][1] if i >= 0 else 0.0

"""Synthetic DCGM history with hand-computable window aggregates, for backfilling.

Samples are every 30 s at ``T - 5 - 30k`` (k = 0, 1, ...), so no sample sits on a window
boundary: a 5 m window holds k = 0..9, 3 m k = 0..5, 15 m k = 0..29, 20 m k = 0..39.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from autoscaler.sandbox.services.prometheus import Series, backfill, openmetrics_lines

STEP = 30
SAMPLES = 40  # 20 minutes

Value = Callable[[int], float | None]  # k -> value (None: no sample)


def labels(node: str, gpu: int, label: str = "Hostname") -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"gpu": str(gpu), "UUID": f"GPU-{node}-{gpu}", "device": f"nvidia{gpu}",
                         "modelName": "Tesla V100-SXM2-16GB", label: node}.items()))


class History:
    def __init__(self, end: datetime, label: str = "Hostname"):
        self.end = end
        self.label = label
        self.series: dict[Series, list[tuple[float, float]]] = {}

    def add(self, node: str, gpu: int, metric: str, value: Value, samples: int = SAMPLES) -> None:
        t_end = self.end.timestamp()
        points = [(t_end - 5 - STEP * k, v) for k in range(samples) if (v := value(k)) is not None]
        self.series[(metric, labels(node, gpu, self.label))] = points

    def gpu(self, node: str, gpu: int, util: Value, temp: float = 50, power: float = 100,
            used: float = 1000, free: float = 15000, xid: Value = lambda k: 0,
            throttle: float = 0, gr: bool = True, util_metric: bool = True,
            alive: Callable[[int], bool] = lambda k: True) -> None:
        """One GPU's DCGM fields; ``alive(k)`` False means no sample at k (a dropout)."""
        def when(v: Value) -> Value:
            return lambda k: v(k) if alive(k) else None

        if util_metric:
            self.add(node, gpu, "DCGM_FI_DEV_GPU_UTIL", when(util))
        if gr:
            self.add(node, gpu, "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                     when(lambda k: None if util(k) is None else (util(k) or 0) / 100))
        for metric, value in (("DCGM_FI_DEV_GPU_TEMP", temp), ("DCGM_FI_DEV_POWER_USAGE", power),
                              ("DCGM_FI_DEV_FB_USED", used), ("DCGM_FI_DEV_FB_FREE", free),
                              ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", throttle)):
            self.add(node, gpu, metric, when(lambda k, v=value: v))
        self.add(node, gpu, "DCGM_FI_DEV_XID_ERRORS", when(xid))

    def lines(self) -> Iterator[str]:
        return openmetrics_lines(self.series)

    def backfill(self, data_dir: Path) -> None:
        source = data_dir.parent / f"{data_dir.name}.om"
        with source.open("w") as fh:
            fh.writelines(self.lines())
        backfill(source, data_dir)


def tick_end(offset_s: int = 120) -> datetime:
    """A query time a little in the past, on a whole 10 s."""
    now = int(datetime.now(UTC).timestamp()) - offset_s
    return datetime.fromtimestamp(now - now % 10, UTC)

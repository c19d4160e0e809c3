"""Demand history from every trace format the simulator loads.

* Alibaba v2023 pod list: GPUs its pods held (``load_pod_list`` rules: arrival to arrival
  + run time, shares as fractions), counted in every 5-minute bin a pod overlaps.
* GenAI duty-cycle series: GPU-equivalents busy, the sum over containers of each one's
  mean duty cycle in the bin / 100; time from the first sample.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from autoscaler.forecast.series import STEP, DemandSeries, clip, from_intervals
from autoscaler.traces import DUTY_COLUMNS, POD_COLUMNS, TraceError, _open_text, _rows, load_pod_list


def trace_kind(path: Path) -> str:
    with _open_text(path) as fh:
        header = {c.strip() for c in fh.readline().split(",")}
    if set(POD_COLUMNS) <= header:
        return "pod-list"
    if set(DUTY_COLUMNS) <= header:
        return "duty-cycle"
    raise TraceError(f"{path}: neither a pod list ({', '.join(POD_COLUMNS)}) nor a duty-cycle "
                     f"series ({', '.join(DUTY_COLUMNS)})")


def load_series(path: Path) -> tuple[DemandSeries, str]:
    kind = trace_kind(path)
    if kind == "pod-list":
        w = load_pod_list(path)
        return from_intervals(((j.arrival, j.arrival + j.duration, j.gpus) for j in w.jobs), w.end), kind
    return duty_series(path), kind


def duty_series(path: Path) -> DemandSeries:
    """GPU-equivalents busy per bin from the first sample in the window ``clip`` chooses."""
    rows: list[tuple[str, float, float]] = []
    for line, row in _rows(path, DUTY_COLUMNS):
        value, ts = row.get("value", ""), row.get("timestamp_anon", "")
        try:
            v, t = float(value), float(ts)
        except ValueError:
            raise TraceError(f"{path}:{line}: value and timestamp_anon must be numbers") from None
        if not (np.isfinite(v) and np.isfinite(t)):
            raise TraceError(f"{path}:{line}: value and timestamp_anon must be finite")
        rows.append((row["container_ip"], t, min(100.0, max(0.0, v))))
    if not rows:
        raise TraceError(f"{path}: no samples")
    times = np.array([t for _, t, _ in rows])
    window = clip(times, np.zeros(len(rows)))
    base = int(times[window.keep].min() // STEP)
    sums: defaultdict[tuple[str, int], list[float]] = defaultdict(list)
    for (container, t, v), kept in zip(rows, window.keep.tolist(), strict=True):
        if kept:
            sums[container, int(t // STEP) - base].append(v)
    values = np.zeros(max(b for _, b in sums) + 1)
    for (_, b), vals in sums.items():
        values[b] += sum(vals) / len(vals) / 100
    return DemandSeries(values, dropped=window.dropped)

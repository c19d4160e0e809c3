"""Spot capacity per zone from the SkyPilot spot traces.

Each file is ``{"metadata": {"gap_seconds": N}, "data": [...]}``, one file per zone, the
zone being the file name up to the first ``_`` (``us-east-1a_v100_1.json``). The traces'
README calls a data point "the number of available instances", but the consumers of this
data (SkyPilot's "Can't Be Late" simulator: ``spot_available = not trace[tick]``; the
conversion scripts that write the ``preempted`` column into ``data``) read **1 as
preempted / unavailable** and 0 as available. We follow the consumers: any non-zero value
means no spot capacity in that zone at that tick.

How the replay uses it (same for every strategy):

* a spot launch into a zone that is unavailable fails with a capacity error;
* when a zone turns unavailable (0 -> non-zero), spot nodes running there get a
  2-minute interruption notice (as the consumer model does for its instance; each node is
  hit with probability ``interrupt_share``, 1.0 by default: the probe instance stands for
  the whole (type, zone) capacity pool);
* the trace is aligned with the start of the replay window and wraps around when the
  window is longer than the trace.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from autoscaler.sim.traces import TraceError


@dataclass(frozen=True)
class ZoneTrace:
    zone: str
    gap: float
    unavailable: tuple[bool, ...]

    @property
    def period(self) -> float:
        return self.gap * len(self.unavailable)

    def available(self, offset: float) -> bool:
        """Spot capacity at ``offset`` seconds after the replay start."""
        return not self.unavailable[int(offset // self.gap) % len(self.unavailable)]

    def outages(self, until: float) -> list[float]:
        """Offsets in [0, until) at which the zone turns unavailable (0 -> non-zero)."""
        starts = [i * self.gap for i in range(1, len(self.unavailable))
                  if self.unavailable[i] and not self.unavailable[i - 1]]
        if self.unavailable[0] and not self.unavailable[-1]:
            starts.insert(0, 0.0)  # wrap-around edge; never counted at offset 0 below
        out: list[float] = []
        base = 0.0
        while base < until:
            out += [base + s for s in starts if 0 < base + s < until]
            base += self.period
        return out


@dataclass(frozen=True)
class SpotMarket:
    """Availability per zone; zones without a trace are always available."""

    zones: dict[str, ZoneTrace]
    interrupt_share: float = 1.0

    def available(self, zone: str | None, offset: float) -> bool:
        if zone is None:
            return not self.zones or any(z.available(offset) for z in self.zones.values())
        trace = self.zones.get(zone)
        return True if trace is None else trace.available(offset)

    def outage_events(self, until: float) -> list[tuple[float, str]]:
        events = [(t, name) for name, z in self.zones.items() for t in z.outages(until)]
        return sorted(events)

    def first_available(self, zones: list[str], offset: float) -> str | None:
        for zone in zones:
            if self.available(zone, offset):
                return zone
        return None


ALWAYS_AVAILABLE = SpotMarket(zones={})


def _load_file(path: Path) -> ZoneTrace:
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from exc
    except UnicodeDecodeError as exc:
        line = exc.object[:exc.start].count(b"\n") + 1
        raise TraceError(f"{path}:{line}: not UTF-8") from exc
    except RecursionError:
        raise TraceError(f"{path}:1: not valid JSON: nested too deeply") from None
    try:
        gap = float(doc["metadata"]["gap_seconds"])
        data = doc["data"]
    except (KeyError, TypeError, ValueError):
        shape = '{"metadata": {"gap_seconds": N}, "data": [...]}'
        raise TraceError(f"{path}: expected {shape}") from None
    if not 0 < gap < float("inf") or not isinstance(data, list) or not data:
        raise TraceError(f"{path}: gap_seconds must be > 0 and data a non-empty list")
    if not all(isinstance(v, int | float) for v in data):
        raise TraceError(f"{path}: data must hold numbers")
    return ZoneTrace(zone=path.name.split("_")[0], gap=gap, unavailable=tuple(v != 0 for v in data))


def load_spot_traces(path: Path, interrupt_share: float = 1.0) -> SpotMarket:
    """One JSON file, or every ``*.json`` directly inside a directory (one zone each)."""
    path = Path(path)
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    if not files:
        raise TraceError(f"{path}: no *.json spot trace found")
    zones: dict[str, ZoneTrace] = {}
    for file in files:
        trace = _load_file(file)
        if trace.zone in zones:
            raise TraceError(f"{file}: zone {trace.zone} already read from another file")
        zones[trace.zone] = trace
    if not 0 <= interrupt_share <= 1:
        raise TraceError("interrupt_share must be within [0, 1]")
    return SpotMarket(zones=zones, interrupt_share=interrupt_share)

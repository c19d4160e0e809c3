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
  2-minute interruption notice, each with probability ``interrupt_share``. The default,
  0.5, is from the traces' own preemption data: in the 4-node V100 preemption trace
  (``preemption/4-node/aws-08-03-2023``, 3 zones, 13 days, value = instances of the 4
  preempted) the 135 onsets (0 -> k) hit k/4 = 51% of the instances on average (63 took
  1, 24 took 2, 28 took 3, 20 took all 4). 1.0 (a one-instance probe stands for the
  whole zone) is the worst case;
* a pool zone the trace does not cover is refused (:meth:`SpotMarket.for_pool`) unless the
  run says ``assume_available``, which the report shows;
* the trace is aligned with the start of the replay window and wraps around when the
  window is longer than the trace.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from autoscaler.traces import TraceError


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


DEFAULT_INTERRUPT_SHARE = 0.5  # see the module docstring: 51% in the 4-node preemption trace


@dataclass(frozen=True)
class SpotMarket:
    """Availability per zone; zones without a trace only when assumed (``for_pool``)."""

    zones: dict[str, ZoneTrace]
    interrupt_share: float = DEFAULT_INTERRUPT_SHARE
    assumed: tuple[str, ...] = ()  # pool zones without a trace, assumed always available

    def available(self, zone: str | None, offset: float) -> bool:
        trace = self.zones.get(zone) if zone is not None else None
        return True if trace is None else trace.available(offset)

    def for_pool(self, zones: list[str], assume_available: bool) -> SpotMarket:
        """This market for a pool's zones: a zone the trace lacks (or a pool naming no zone)
        is an error, unless the run assumes those always have spot capacity."""
        if not self.zones:
            return self
        missing = [z for z in zones if z not in self.zones] or ([] if zones else ["(no zone)"])
        if missing and not assume_available:
            raise TraceError(f"pool zone(s) {', '.join(missing)} not in the spot trace (zones "
                           f"{', '.join(sorted(self.zones))}): pass --assume-available to treat "
                           f"them as always having spot capacity, or a trace that covers them")
        return replace(self, assumed=tuple(missing))

    def describe(self) -> dict[str, object]:
        return {"zones_traced": sorted(self.zones), "assumed_available": list(self.assumed),
                "interrupt_share": self.interrupt_share}

    def outage_events(self, until: float) -> list[tuple[float, str]]:
        events = [(t, name) for name, z in self.zones.items() for t in z.outages(until)]
        return sorted(events)


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


def load_spot_traces(path: Path, interrupt_share: float = DEFAULT_INTERRUPT_SHARE) -> SpotMarket:
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

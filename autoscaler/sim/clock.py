"""The discrete-event clock: a heap of (time, order, sequence, event).

Events at the same instant run in a fixed order (jobs finish and nodes come up before new
jobs arrive, and all of those before a strategy's tick), and in insertion order within a
kind, so a replay is deterministic.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any


class Kind(IntEnum):
    FINISH = 0
    NODE = 1  # provisioned / ready / launch failed / reclaimed / drain timeout
    OUTAGE = 2
    ARRIVAL = 3
    TICK = 4
    SAMPLE = 5


@dataclass(order=True)
class Event:
    at: float
    kind: Kind
    seq: int
    run: Callable[[float], Any] = field(compare=False)


class Clock:
    """The heap holds plain tuples ``(at, kind, seq, run)``: tuples compare in C, an Event's
    generated ``__lt__`` in Python, and a large fleet pushes tens of events a tick."""

    def __init__(self, start: float):
        self.now = start
        self._heap: list[tuple[float, Kind, int, Callable[[float], Any]]] = []
        self._seq = 0

    def at(self, when: float, kind: Kind, run: Callable[[float], Any]) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (max(when, self.now), kind, self._seq, run))

    def next_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def pop(self) -> Event:
        at, kind, seq, run = heapq.heappop(self._heap)
        self.now = at
        return Event(at, kind, seq, run)

    def __len__(self) -> int:
        return len(self._heap)

"""First-fit-decreasing packing of pending GPU jobs onto nodes, whole and shared GPUs.

A job asking for ``g >= 1`` GPUs needs ``ceil(g)`` wholly free GPUs on one node; a job
asking for a share ``f < 1`` of a GPU needs one GPU with at least ``f`` left (best fit,
so shares pack densely the way GPU-sharing schedulers place them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from autoscaler.engine.pricing import Offer
from autoscaler.model.node import Node
from autoscaler.model.snapshot import PendingJob

EPS = 1e-9


@dataclass(slots=True)
class Bin:
    free: list[float]
    node: Node | None = None  # None: a node this plan launches
    offer: Offer | None = None
    gpu_model: str = ""
    jobs: list[str] = field(default_factory=list)

    @classmethod
    def empty(cls, gpus: int, **kw: object) -> Bin:
        return cls(free=[1.0] * gpus, **kw)  # type: ignore[arg-type]

    @classmethod
    def with_allocated(cls, gpus: float, allocated: float, **kw: object) -> Bin:
        """A node with ``allocated`` GPUs in use: whole GPUs first, then one partial."""
        total = math.floor(gpus + EPS)
        used = max(0.0, min(allocated, float(total)))
        whole_used = math.floor(used + EPS)
        free = [0.0] * whole_used + [1.0] * (total - whole_used)
        if whole_used < total and used - whole_used > EPS:
            free[whole_used] = 1.0 - (used - whole_used)
        return cls(free=free, **kw)  # type: ignore[arg-type]

    def fits(self, gpus: float) -> bool:
        if gpus >= 1 - EPS:
            need = math.ceil(gpus - EPS)
            # Most nodes are smaller than a multi-GPU job: no need to count their free GPUs.
            return len(self.free) >= need and sum(1 for f in self.free if f >= 1 - EPS) >= need
        return any(f >= gpus - EPS for f in self.free)

    def place(self, job: str, gpus: float) -> None:
        if gpus >= 1 - EPS:
            need = math.ceil(gpus - EPS)
            for i, f in enumerate(self.free):
                if need and f >= 1 - EPS:
                    self.free[i] = 0.0
                    need -= 1
        else:
            best = min((f, i) for i, f in enumerate(self.free) if f >= gpus - EPS)[1]
            self.free[best] -= gpus
        self.jobs.append(job)


def job_parts(jobs: list[PendingJob]) -> list[tuple[str, float, str | None]]:
    """(job id, GPUs on one node, required model), one entry per node: higher priority
    (Kubernetes PriorityClass) first, so caps and max_step leave out the lower ones; then
    largest first. A part's zones are in ``part_zones``."""
    ranked = [
        (-j.priority, -j.gpus, j.id if j.nodes == 1 else f"{j.id}[{k}]", j.gpu_model)
        for j in jobs
        for k in range(j.nodes)
    ]
    ranked.sort(key=lambda p: (p[0], p[1], p[2]))
    return [(job, -neg, model) for _, neg, job, model in ranked]


def part_zones(jobs: list[PendingJob]) -> dict[str, frozenset[str]]:
    """Part id -> the zones it may run in, for the parts that are constrained."""
    return {(j.id if j.nodes == 1 else f"{j.id}[{k}]"): frozenset(j.zones)
            for j in jobs if j.zones is not None for k in range(j.nodes)}


def part_types(jobs: list[PendingJob]) -> dict[str, frozenset[str]]:
    """Part id -> the instance types it may run on, for the parts that are constrained."""
    return {(j.id if j.nodes == 1 else f"{j.id}[{k}]"): frozenset(j.instance_types)
            for j in jobs if j.instance_types is not None for k in range(j.nodes)}


def part_waits(jobs: list[PendingJob], now: datetime) -> dict[str, timedelta]:
    """Part id -> how long its job has been pending, for jobs that report a submit time."""
    return {(j.id if j.nodes == 1 else f"{j.id}[{k}]"): max(timedelta(0), now - j.submitted_at)
            for j in jobs if j.submitted_at is not None for k in range(j.nodes)}


def bin_zone(b: Bin) -> str | None:
    if b.node is not None:
        return b.node.zone
    return b.offer.zone if b.offer is not None else None


class LazyBins:
    """Bins in a fixed order, each built when a search first reaches it; bins appended
    later come after all of them.

    A pool with dozens of nodes that have a GPU free usually places its few pending jobs
    on the first ones, so building a bin for every such node each tick is mostly wasted.
    """

    def __init__(self, source: Iterable[Bin]):
        self._built: list[Bin] = []
        self._source = iter(source)
        self._appended: list[Bin] = []
        self._drained = False  # the source has no more bins

    def __iter__(self) -> Iterator[Bin]:
        yield from self._built
        for b in self._source:
            self._built.append(b)
            yield b
        yield from self._appended

    def append(self, b: Bin) -> None:
        self._appended.append(b)

    def from_index(self, start: int) -> Iterator[tuple[int, Bin]]:
        """(position, bin) from position ``start`` on, in the order ``__iter__`` gives."""
        i = start
        while (b := self._at(i)) is not None:
            yield i, b
            i += 1

    def past_end(self, i: int) -> bool:
        """Position ``i`` is after every bin built so far and the source is drained."""
        return self._drained and i >= len(self._built) + len(self._appended)

    def _at(self, i: int) -> Bin | None:
        while len(self._built) <= i:
            if (b := next(self._source, None)) is None:
                self._drained = True
                break
            self._built.append(b)
        if i < len(self._built):
            return self._built[i]
        k = i - len(self._built)  # the source is exhausted: appended bins come next
        return self._appended[k] if k < len(self._appended) else None


def bin_type(b: Bin) -> str | None:
    if b.node is not None:
        return b.node.instance_type
    return b.offer.instance_type if b.offer is not None else None


def fits_part(b: Bin, gpus: float, model: str | None, zones: frozenset[str] | None,
              types: frozenset[str] | None = None) -> bool:
    """Whether a job part of this shape (GPUs, model, allowed zones and types) fits on ``b``."""
    return ((model is None or b.gpu_model == model) and b.fits(gpus)
            and (zones is None or bin_zone(b) in zones)
            and (types is None or bin_type(b) in types))


def first_fit(bins: Iterable[Bin], gpus: float, model: str | None,
              zones: frozenset[str] | None = None, types: frozenset[str] | None = None) -> Bin | None:
    for b in bins:
        if fits_part(b, gpus, model, zones, types):
            return b
    return None

"""First-fit-decreasing packing of pending GPU jobs onto nodes, whole and shared GPUs.

A job asking for ``g >= 1`` GPUs needs ``ceil(g)`` wholly free GPUs on one node; a job
asking for a share ``f < 1`` of a GPU needs one GPU with at least ``f`` left (best fit,
so shares pack densely the way GPU-sharing schedulers place them).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from operator import attrgetter

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


# One node's share of a pending job: (part id, GPUs on one node, required model, allowed
# zones or None, allowed instance types or None, the job).
Part = tuple[str, float, str | None, frozenset[str] | None, frozenset[str] | None, PendingJob]
_HEAD = 16  # parts of a group put in order before sorting all of it (most groups stop early)


@dataclass(slots=True)
class PartGroup:
    """The pending jobs of one (priority, GPUs per node) class: higher priority first
    (Kubernetes PriorityClass), so caps and max_step leave out the lower ones; then largest
    first; parts in id order within.

    ``uniform``: every part has the group's model, zones and instance types, so a part that finds no room
    tells the packer the rest of the group finds none either, and only the parts read are
    put in order (the smallest ids first, the whole group only past ``_HEAD``)."""

    priority: int
    gpus: float
    model: str | None
    zones: list[str] | None
    jobs: list[PendingJob] = field(default_factory=list)
    count: int = 0  # parts: one per node each job asks for
    uniform: bool = True
    multi_node: bool = False

    def parts(self) -> Iterator[Part]:
        if self.multi_node:
            items = [(j.id if j.nodes == 1 else f"{j.id}[{k}]", j) for j in self.jobs for k in range(j.nodes)]
            for pid, j in sorted(items, key=_first):
                yield _part(pid, j)
            return
        # The same order as sorting all (min, nsmallest and sorted agree on ties), put
        # together only as far as it is read: most groups stop at their first part.
        jobs = self.jobs
        first = min(jobs, key=_ID)
        yield _part(first.id, first)
        if len(jobs) > 1:
            yield from (_part(j.id, j) for j in heapq.nsmallest(_HEAD, jobs, key=_ID)[1:])
        if len(jobs) > _HEAD:
            yield from (_part(j.id, j) for j in sorted(jobs, key=_ID)[_HEAD:])


_ID = attrgetter("id")
_SHAPE = attrgetter("priority", "gpus", "gpu_model", "nodes")
_ZONES = attrgetter("zones")


def _first(item: tuple[str, PendingJob]) -> str:
    return item[0]


def _part(pid: str, j: PendingJob) -> Part:
    return (pid, j.gpus, j.gpu_model, None if j.zones is None else frozenset(j.zones),
            None if j.instance_types is None else frozenset(j.instance_types), j)


def part_groups(jobs: list[PendingJob]) -> list[PartGroup]:
    """``jobs`` grouped by (priority, GPUs per node), in packing order. One pass in Python
    (a backlog has thousands of jobs in a handful of shapes); the rest runs per shape."""
    by_shape: dict[tuple[int, float, str | None, int], list[PendingJob]] = {}
    for j in jobs:
        try:
            by_shape[_SHAPE(j)].append(j)
        except KeyError:
            by_shape[_SHAPE(j)] = [j]
    groups: dict[tuple[int, float], PartGroup] = {}
    for (priority, gpus, model, nodes), members in by_shape.items():
        g = groups.get((priority, gpus))
        if g is None:
            g = groups[(priority, gpus)] = PartGroup(priority, gpus, model, members[0].zones, members)
        else:  # several models: the jobs in their input order (it breaks ties of equal ids)
            g.uniform = g.uniform and model == g.model
            g.jobs = [j for j in jobs if (j.priority, j.gpus) == (priority, gpus)]
        g.count += len(members) * nodes
        g.multi_node = g.multi_node or nodes != 1
    if list(map(_ZONES, jobs)).count(None) != len(jobs):  # some jobs name zones
        for g in groups.values():
            g.uniform = g.uniform and all(j.zones == g.zones for j in g.jobs)
    if any(j.instance_types is not None for j in jobs):  # some jobs name instance types
        for g in groups.values():
            g.uniform = g.uniform and all(j.instance_types == g.jobs[0].instance_types for j in g.jobs)
    return sorted(groups.values(), key=lambda g: (-g.priority, -g.gpus))


def part_wait(job: PendingJob, now: datetime) -> timedelta | None:
    """How long the part's job has been pending, if it reports a submit time."""
    return None if job.submitted_at is None else max(timedelta(0), now - job.submitted_at)


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

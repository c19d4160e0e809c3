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
from itertools import repeat
from operator import attrgetter

from autoscaler.engine.pricing import Offer
from autoscaler.model.node import Node
from autoscaler.model.snapshot import PendingJob, PendingShape

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

    @classmethod
    def observed(cls, gpus: float, allocated: float, free: list[float] | None, *, most: int,
                 **kw: object) -> Bin:
        """A serving node as its scheduler reports it: per GPU when it says, else by total.
        ``most`` is the GPUs of its instance type: a total beyond it (or not a number) is no
        room to believe in, so a bin never has more GPUs than the catalog gives the node and
        packing costs the same whatever a scheduler reported (the signal reader refuses such
        reports first; snapshots from files and traces meet this)."""
        if not 0 <= gpus <= most + EPS:
            gpus = 0.0
        if not allocated >= 0:  # NaN or negative: how much is in use is unknown
            allocated = gpus
        if free is not None and len(free) == math.floor(gpus + EPS):
            return cls(free=list(free), **kw)  # type: ignore[arg-type]
        return cls.with_allocated(gpus, allocated, **kw)

    def whole_free(self) -> int:
        return sum(1 for f in self.free if f >= 1 - EPS)

    def fits(self, gpus: float) -> bool:
        if gpus >= 1 - EPS:
            # Most nodes are smaller than a multi-GPU job: no need to count their free GPUs
            # (len is whole, so len >= gpus is len >= ceil(gpus); an infinite ask fits none).
            return len(self.free) >= gpus - EPS and self.whole_free() >= math.ceil(gpus - EPS)
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
# zones or None, allowed instance types or None, when its job was submitted).
Part = tuple[str, float, str | None, frozenset[str] | None, frozenset[str] | None, datetime | None]


@dataclass(slots=True)
class PartGroup:
    """The pending jobs of one (priority, GPUs per node) class: higher priority first
    (Kubernetes PriorityClass), so caps and max_nodes leave out the lower ones; then largest
    first; parts in id order within, read only as far as the packer reads them.

    ``uniform``: every shape of the group has the first one's model, zones and instance
    types, so a part that finds no room tells the packer the rest of the group finds none
    either."""

    priority: int
    gpus: float
    shapes: list[PendingShape]
    count: int = 0  # parts: one per node each job asks for
    uniform: bool = True

    def parts(self) -> Iterator[Part]:
        heads = [_head(s) for s in self.shapes]
        if any(s.nodes != 1 for s in self.shapes):
            items = [(i if s.nodes == 1 else f"{i}[{k}]", t, h)
                     for s, h in zip(self.shapes, heads, strict=True)
                     for i, t in zip(s.ids, s.submitted_at, strict=True) for k in range(s.nodes)]
            for pid, t, h in sorted(items, key=_first):
                yield (pid, *h, t)
            return
        # Each shape's ids are in order already: one shape is read as it is, several are
        # merged (ties of equal ids: the earlier shape first).
        per_shape = [zip(s.ids, s.submitted_at, repeat(h)) for s, h in zip(self.shapes, heads, strict=True)]
        for pid, t, h in per_shape[0] if len(per_shape) == 1 else heapq.merge(*per_shape, key=_first):
            yield (pid, *h, t)


def _head(s: PendingShape) -> tuple[float, str | None, frozenset[str] | None, frozenset[str] | None]:
    """What every part of the shape has: GPUs, model, allowed zones and types."""
    return (s.gpus, s.gpu_model, None if s.zones is None else frozenset(s.zones),
            None if s.instance_types is None else frozenset(s.instance_types))


def _first(item: tuple[str, object, object]) -> str:
    return item[0]


_ID = attrgetter("id")


def shapes_of(jobs: Iterable[PendingJob]) -> list[PendingShape]:
    """``jobs`` counted by shape (shapes in the order first seen; ids in order within, equal
    ids in input order): one pass, for sources that list every job."""
    by_shape: dict[tuple[object, ...], list[PendingJob]] = {}
    for j in jobs:
        key = (j.priority, j.gpus, j.gpu_model, j.nodes, j.reason,
               None if j.zones is None else tuple(j.zones),
               None if j.instance_types is None else tuple(j.instance_types))
        by_shape.setdefault(key, []).append(j)
    out = []
    for members in by_shape.values():
        members.sort(key=_ID)
        f = members[0]
        out.append(PendingShape.model_construct(
            gpus=f.gpus, nodes=f.nodes, reason=f.reason, gpu_model=f.gpu_model, priority=f.priority,
            zones=f.zones, instance_types=f.instance_types, ids=[j.id for j in members],
            submitted_at=[j.submitted_at for j in members]))
    return out


def part_groups(shapes: Iterable[PendingShape]) -> list[PartGroup]:
    """``shapes`` grouped by (priority, GPUs per node), in packing order: per shape, not per
    job (a backlog has thousands of jobs in a handful of shapes)."""
    groups: dict[tuple[int, float], PartGroup] = {}
    for s in shapes:
        g = groups.get((s.priority, s.gpus))
        if g is None:
            g = groups[(s.priority, s.gpus)] = PartGroup(s.priority, s.gpus, [s])
        else:
            first = g.shapes[0]
            g.uniform = g.uniform and ((s.gpu_model, s.zones, s.instance_types)
                                       == (first.gpu_model, first.zones, first.instance_types))
            g.shapes.append(s)
        g.count += s.count * s.nodes
    return sorted(groups.values(), key=lambda g: (-g.priority, -g.gpus))


def part_wait(submitted: datetime | None, now: datetime) -> timedelta | None:
    """How long the part's job has been pending, if it reports a submit time."""
    return None if submitted is None else max(timedelta(0), now - submitted)


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

"""First-fit packing of many identical pods at once, onto nodes grouped by free-GPU profile.

The Cluster Autoscaler's binpacking estimate places pods one by one, first fit. With a
backlog of thousands of pods that is O(pods x nodes) per estimate. Here nodes with the same
free GPUs (a *profile*, sorted) are one group with a count, and the pods of one shape are
placed together: a group takes ``fit`` pods per node for as many nodes as needed. The
cost is O(shapes x profiles) after sorting the pods, and the result is the one-by-one
first fit's (same slots rule as :func:`autoscaler.sim.placement.slots_for`), except that
groups are tried in the order their first node appeared rather than node by node.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

from autoscaler.sim.placement import EPS

Profile = tuple[float, ...]


def _profile(free: Iterable[float]) -> Profile:
    return tuple(sorted(round(f, 9) for f in free))


# Profiles and shapes are few (node sizes x GPU shares in use), so fits are memoised.
@lru_cache(maxsize=8192)
def fit(profile: Profile, gpus: float) -> int:
    """How many pods asking ``gpus`` fit on one node with this free profile."""
    if gpus >= 1 - EPS:
        return sum(1 for f in profile if f >= 1 - EPS) // round(gpus)
    return sum(math.floor((f + EPS) / gpus) for f in profile)


@lru_cache(maxsize=8192)
def _after(profile: Profile, gpus: float, count: int) -> Profile:
    """The profile once ``count`` (<= fit) pods are placed: whole GPUs, or tightest GPU first."""
    free = list(profile)
    if gpus >= 1 - EPS:
        need = count * round(gpus)
        for i, f in enumerate(free):
            if need and f >= 1 - EPS:
                free[i], need = 0.0, need - 1
        return _profile(free)
    for i, f in enumerate(free):  # ascending: the tightest GPU that fits takes pods first
        if count <= 0:
            break
        take = min(count, math.floor((f + EPS) / gpus))
        free[i], count = f - take * gpus, count - take
    return _profile(free)


class Bins:
    """Nodes' free GPUs as {profile: node count}, in the order profiles first appeared."""

    def __init__(self) -> None:
        self.groups: dict[Profile, int] = {}
        self.nodes = 0

    def add(self, free: Iterable[float], count: int = 1) -> None:
        if count > 0:
            key = _profile(free)
            self.groups[key] = self.groups.get(key, 0) + count
            self.nodes += count

    def place(self, gpus: float, count: int) -> int:
        """Place up to ``count`` pods of one shape, first fit; returns how many were placed."""
        placed = 0
        moves: Counter[Profile] = Counter()
        for key, nodes in list(self.groups.items()):
            if placed >= count:
                break
            per = fit(key, gpus)
            if per <= 0:
                continue
            left = count - placed
            full = min(nodes, left // per)
            if full:
                self._move(key, _after(key, gpus, per), full, moves)
                placed += full * per
            if placed < count and full < nodes:
                self._move(key, _after(key, gpus, count - placed), 1, moves)
                placed = count
        for key, n in moves.items():
            self.groups[key] = self.groups.get(key, 0) + n
        return placed

    def _move(self, old: Profile, new: Profile, n: int, moves: Counter[Profile]) -> None:
        self.groups[old] -= n
        if not self.groups[old]:
            del self.groups[old]
        moves[new] += n


def shapes(gpus: Iterable[float]) -> list[tuple[float, int]]:
    """(GPUs asked, pod count), largest first: first-fit-decreasing order."""
    return sorted(Counter(gpus).items(), key=lambda kv: -kv[0])

"""Where a job goes on a node's GPUs: whole GPUs, or a share of one GPU.

A job asking ``g >= 1`` GPUs takes ``g`` wholly free GPUs of one node; a job asking a share
``f < 1`` takes ``f`` of one GPU (GPU sharing, as in the Alibaba cluster the trace comes
from). Best fit everywhere: the node with the fewest free whole GPUs that still fits, the
GPU with the least room that still fits, older nodes first on ties. Packing this way lets
the newest nodes empty out, which is what every scale-down method needs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

EPS = 1e-9


class HasGpus(Protocol):
    free: list[float]


N = TypeVar("N", bound=HasGpus)


def whole_free(free: list[float]) -> int:
    return sum(1 for f in free if f >= 1 - EPS)


def max_share_free(free: list[float]) -> float:
    return max(free, default=0.0)


def slots_for(free: list[float], gpus: float) -> list[tuple[int, float]] | None:
    """GPU slots (index, amount) for a job on a node with ``free``, or None if it doesn't fit."""
    if gpus >= 1 - EPS:
        need = round(gpus)
        idx = [i for i, f in enumerate(free) if f >= 1 - EPS]
        return [(i, 1.0) for i in idx[:need]] if len(idx) >= need else None
    best = None
    for i, f in enumerate(free):
        if f >= gpus - EPS and (best is None or f < free[best]):
            best = i
    return None if best is None else [(best, gpus)]


def room(free: list[float], gpus: float) -> float:
    """How much room the best slot leaves: smaller is a tighter fit (None-safe ordering key)."""
    if gpus >= 1 - EPS:
        return whole_free(free) - gpus
    return min(f for f in free if f >= gpus - EPS) - gpus


def best_node(nodes: Iterable[N], gpus: float) -> tuple[N, list[tuple[int, float]]] | None:
    """The tightest-fitting node (``nodes`` come oldest first) and the job's slots on it."""
    best: tuple[float, N] | None = None
    for node in nodes:
        if slots_for(node.free, gpus) is None:
            continue
        r = room(node.free, gpus)
        if best is None or r < best[0] - EPS:
            best = (r, node)
            if r < EPS:
                break  # a perfect fit cannot be beaten
    if best is None:
        return None
    slots = slots_for(best[1].free, gpus)
    return None if slots is None else (best[1], slots)

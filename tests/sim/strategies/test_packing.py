from __future__ import annotations

import random

import pytest

from autoscaler.sim.placement import slots_for
from autoscaler.sim.strategies.packing import Bins, fit, shapes


def _one_by_one(nodes: list[list[float]], pods: list[float]) -> int:
    """The plain first fit the grouped packer replaces: pods placed one at a time."""
    placed = 0
    for gpus in pods:
        for free in nodes:
            slots = slots_for(free, gpus)
            if slots is not None:
                for i, amount in slots:
                    free[i] -= amount
                placed += 1
                break
    return placed


def test_fit_counts_whole_gpus_and_shares() -> None:
    assert fit((0.0, 1.0, 1.0, 1.0), 2.0) == 1
    assert fit((0.3, 1.0), 0.5) == 2
    assert fit((0.25, 0.25), 0.25) == 2


@pytest.mark.parametrize("seed", range(20))
def test_grouped_first_fit_places_as_many_as_one_by_one(seed: int) -> None:
    # Empty nodes of mixed sizes, as the estimate packs them (in-flight nodes, new nodes).
    rng = random.Random(seed)
    nodes = [[1.0] * rng.choice([1, 4, 8]) for _ in range(30)]
    pods = sorted((rng.choice([0.16, 0.25, 0.5, 0.81, 1.0, 2.0, 4.0, 8.0]) for _ in range(200)), reverse=True)
    bins = Bins()
    for free in nodes:
        bins.add(free)
    grouped = sum(bins.place(g, k) for g, k in shapes(pods))
    assert grouped == _one_by_one([list(f) for f in nodes], pods)
    assert bins.nodes == 30

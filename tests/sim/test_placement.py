from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from autoscaler.sim.placement import best_node, slots_for


@dataclass
class N:
    name: str
    free: list[float] = field(default_factory=list)


@pytest.mark.parametrize("free, gpus, slots", [
    ([1.0, 1.0], 2, [(0, 1.0), (1, 1.0)]),
    ([0.5, 1.0, 1.0], 2, [(1, 1.0), (2, 1.0)]),  # whole GPUs only
    ([0.5, 1.0], 2, None),
    ([1.0, 0.5, 0.3], 0.3, [(2, 0.3)]),  # best fit: the GPU with the least room
    ([1.0, 0.2], 0.46, [(0, 0.46)]),
    ([0.2], 0.46, None),
])
def test_slots(free: list[float], gpus: float, slots: list[tuple[int, float]] | None) -> None:
    assert slots_for(free, gpus) == slots


def test_shares_pack_onto_partly_used_gpus_first() -> None:
    nodes = [N("empty", [1.0]), N("half", [0.54])]
    node, slots = best_node(nodes, 0.46) or (None, None)
    assert node is not None and node.name == "half" and slots == [(0, 0.46)]


def test_whole_gpu_jobs_fill_the_fullest_node_that_fits_oldest_first() -> None:
    two_left = [0.0] * 6 + [1.0] * 2
    nodes = [N("old-8", [1.0] * 8), N("two-left", list(two_left)), N("also-two", list(two_left))]
    found = best_node(nodes, 2)
    assert found is not None and found[0].name == "two-left"
    assert best_node(nodes, 8) is not None
    assert best_node([N("x", [0.9] * 8)], 1) is None

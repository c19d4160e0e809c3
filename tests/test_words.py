"""Lists in messages: the first few items, then how many more."""

from __future__ import annotations

from autoscaler.words import first_few


def test_the_first_few_then_how_many_more() -> None:
    names = [f"gpu-{i}" for i in range(1, 8)]
    assert first_few(names) == "gpu-1, gpu-2, gpu-3, gpu-4, gpu-5 and 2 more"
    assert first_few(names[:5]) == "gpu-1, gpu-2, gpu-3, gpu-4, gpu-5"
    assert first_few(["a", "b", "c", "d"], 3, "; ") == "a; b; c and 1 more"
    assert first_few([]) == ""

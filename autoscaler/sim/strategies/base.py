"""The small interface every strategy implements; strategies act only through the replay."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autoscaler.sim.cluster import SimNode
    from autoscaler.sim.replay import Replay


class Strategy:
    name: str = "strategy"
    interval: float = 30.0  # seconds between ticks
    wake_after: float | None = None  # see SimConfig.wake_after; baselines keep their scan
    pool_count: int = 1  # pools it launches into, each applying one launch at a time
    description: str = ""

    def begin(self, replay: Replay, now: float) -> None:
        """Called once before the first tick (a static fleet launches here)."""

    def tick(self, replay: Replay, now: float) -> None:
        """Look at the cluster and act (launch, drain, terminate)."""
        raise NotImplementedError

    def capacity_error(self, replay: Replay, node: SimNode, now: float) -> None:
        """A launch was refused (no spot capacity in the zone) or lost before it was ready."""

    def parameters(self) -> dict[str, object]:
        """The settings that define the strategy, for the report."""
        return {}

"""Capacity mix: the on-demand base first, then ``spot_percent`` of the nodes above it."""

from __future__ import annotations

from autoscaler.policy.models import Capacity, Market


class MarketMix:
    """Hands out the market of each next node so the pool converges on its policy mix."""

    def __init__(self, capacity: Capacity, on_demand: int, spot: int):
        self.capacity = capacity
        self.on_demand = on_demand
        self.spot = spot

    def next(self) -> Market:
        market = self.peek()
        self.take(market)
        return market

    def peek(self) -> Market:
        if self.on_demand < self.capacity.on_demand_base:
            return Market.ON_DEMAND
        above = self.on_demand + self.spot + 1 - self.capacity.on_demand_base
        # Round half up: with 70% spot, the first node above the base is spot.
        spot_target = int(above * self.capacity.spot_percent / 100 + 0.5)
        return Market.SPOT if self.spot < spot_target else Market.ON_DEMAND

    def take(self, market: Market) -> None:
        if market is Market.SPOT:
            self.spot += 1
        else:
            self.on_demand += 1

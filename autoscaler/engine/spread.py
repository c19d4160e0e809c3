"""Where a pool's spot goes: away from zones under an interruption, and how many of its spot
nodes one zone may hold (``capacity.max_spot_share_per_zone``).

Spot interruptions and refusals come by zone (in the V100 trace over 92% of
co-interruptions fall within 3 minutes of each other), so a cap on each zone's share bounds
what one zone's outage takes. A zone may hold ``ceil(share x n)`` of the pool's ``n`` spot
nodes once the new one is counted: serving, on their way and those this plan launches.
Rounded up, so a zone may always hold one and two zones at 0.5 take 2 of 3.
Refusals and stock already rule offers out (``pricing``); this only skips the zones that
are full, so the cheapest zone with room wins, and when every zone is full the pool falls
back as it does when spot is refused (``spot_fallback``). A (type, zone) where one of the
pool's nodes has an interruption notice under way ranks after the others whatever its
price: the zone is being reclaimed, and a launch there is likely refused, one provisioning
attempt later.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

from autoscaler.engine.pricing import Offer
from autoscaler.model.node import Node
from autoscaler.policy.models import Market, Pool


class ZoneSpread:
    def __init__(self, pool: Pool, nodes: Iterable[Node], interrupted: Iterable[Node] = ()):
        self.share = pool.capacity.max_spot_share_per_zone
        self.zones: Counter[str | None] = Counter(n.zone for n in nodes if n.market is Market.SPOT)
        self.reclaimed = {(n.instance_type, n.zone) for n in interrupted}

    def full(self, zone: str | None) -> str | None:
        """Why ``zone`` may take no more spot nodes, or None."""
        if self.share is None or zone is None:
            return None
        total = sum(self.zones.values()) + 1
        allowed = math.ceil(self.share * total - 1e-9)
        if self.zones[zone] + 1 <= allowed:
            return None
        return (f"{zone} holds {self.zones[zone]} of the pool's {total - 1} spot nodes "
                f"(max_spot_share_per_zone {self.share:g})")

    def keep(self, offers: list[Offer]) -> tuple[list[Offer], list[str]]:
        """The spot offers in zones with room, those under an interruption last, and why
        the others were skipped."""
        kept, skipped = [], []
        for offer in offers:
            why = self.full(offer.zone) if offer.market is Market.SPOT else None
            if why is None:
                kept.append(offer)
            else:
                skipped.append(f"{offer.instance_type} spot in {offer.zone}: {why}")
        if self.reclaimed:
            kept.sort(key=lambda o: o.market is Market.SPOT and (o.instance_type, o.zone) in self.reclaimed)
        return kept, skipped

    def add(self, offer: Offer) -> None:
        if offer.market is Market.SPOT:
            self.zones[offer.zone] += 1

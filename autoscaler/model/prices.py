"""What nodes cost: the catalog's prices, overridden by the offerings a snapshot observed.

Previews, the status API and the engine all price a node the same way, here. Catalog
prices are per region (``Catalog.price``); when a region has no price of its own and
another region's stands in, ``price_source`` says so, for reasons and previews.
"""

from __future__ import annotations

from autoscaler.catalog import Catalog, CatalogError, InstanceType, Price
from autoscaler.catalog.volumes import stopped_hourly_usd
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.model.snapshot import Offering, Snapshot
from autoscaler.policy.models import Market


class PriceBook:
    """What instance types and nodes cost: observed offerings (spot price history,
    DescribePrice) first, the catalog's prices as the fallback."""

    def __init__(self, catalog: Catalog, snapshot: Snapshot):
        self.catalog = catalog
        self._offerings: dict[tuple[str, str, str, str | None], Offering] = {}
        for off in snapshot.offerings:
            self._offerings[(off.cloud, off.region, off.instance_type, off.zone)] = off
        # Memos: a 10,000-node fleet asks the same few (type, zone, market) questions.
        self._types: dict[tuple[str, str], InstanceType | None] = {}
        self._listed: dict[tuple[str, str, str], Price | None] = {}
        self._costs: dict[tuple[str, str, str, str | None, Market], tuple[int, float]] = {}
        self._gpus: dict[tuple[str, str], int] = {}

    def itype(self, cloud: str, name: str) -> InstanceType | None:
        key = (cloud, name)
        if key not in self._types:
            try:
                self._types[key] = self.catalog.get(cloud, name)
            except CatalogError:
                self._types[key] = None
        return self._types[key]

    def _offering(self, cloud: str, region: str, name: str, zone: str | None) -> Offering | None:
        return self._offerings.get((cloud, region, name, zone)) or self._offerings.get(
            (cloud, region, name, None)
        )

    def listed(self, cloud: str, region: str, name: str) -> Price | None:
        """The catalog's price for the region (None for a type the catalog does not know)."""
        key = (cloud, region, name)
        if key not in self._listed:
            self._listed[key] = (self.catalog.price(cloud, region, name)
                                 if self.itype(cloud, name) else None)
        return self._listed[key]

    def on_demand(self, cloud: str, region: str, name: str, zone: str | None) -> float | None:
        off = self._offering(cloud, region, name, zone)
        if off is not None and off.on_demand_usd is not None:
            return off.on_demand_usd
        price = self.listed(cloud, region, name)
        return price.on_demand_usd if price else None

    def spot(self, cloud: str, region: str, name: str, zone: str | None) -> float | None:
        off = self._offering(cloud, region, name, zone)
        if off is not None and off.spot_usd is not None:
            return off.spot_usd
        price = self.listed(cloud, region, name)
        return price.spot_usd if price else None

    def price_source(self, cloud: str, region: str, name: str, zone: str | None,
                     market: Market = Market.ON_DEMAND) -> str:
        """Where ``on_demand``/``spot`` got their figure: "observed" (a cloud price API or
        spot history) or the catalog's source, e.g. "us-east-1 list price used for
        eu-west-1" (a stand-in a preview should show)."""
        off = self._offering(cloud, region, name, zone)
        if off is not None:
            seen = off.spot_usd if market is Market.SPOT else off.on_demand_usd
            if seen is not None:
                return "observed"
        price = self.listed(cloud, region, name)
        if price is None:
            return f"{name} is not in the {cloud} catalog"
        if market is Market.SPOT:
            return f"catalog spot fallback ({price.source})"
        return price.source

    def node_cost(self, node: Node) -> tuple[int, float]:
        """GPUs and $/h of a node; unknown prices count as 0 so a missing price file never
        blocks scale-down (launches are refused separately). A stopped warm node (WARM)
        offers no GPU and bills its volume only (catalog/volumes.py)."""
        if node.state is NodeState.WARM:
            return 0, stopped_hourly_usd()
        key = (node.cloud, node.region, node.instance_type, node.zone, node.market)
        cost = self._costs.get(key)
        if cost is None:
            itype = self.itype(node.cloud, node.instance_type)
            fn = self.spot if node.market is Market.SPOT else self.on_demand
            price = fn(node.cloud, node.region, node.instance_type, node.zone) or 0.0
            cost = self._costs[key] = (itype.gpus if itype else 0, price)
        return cost

    def node_hourly(self, node: Node) -> float:
        """What a node costs now (0 when unknown, see node_cost)."""
        return self.node_cost(node)[1]

    def node_gpus(self, node: Node) -> int:
        """The GPUs of the node's type (0 for a type the catalog does not know), as
        ``node_cost`` counts them for a running node (a stopped warm node's are its type's
        here, 0 there: quotas count ``node_cost``). Keyed by type alone: rules ask it for every node of a
        pool, and building ``node_cost``'s five-part key cost more than the answer."""
        key = (node.cloud, node.instance_type)
        gpus = self._gpus.get(key)
        if gpus is None:
            itype = self.itype(*key)
            gpus = self._gpus[key] = itype.gpus if itype else 0
        return gpus

    def gpu_model(self, node: Node) -> str:
        """The node's GPU model, "" for a type the catalog does not know."""
        itype = self.itype(node.cloud, node.instance_type)
        return itype.gpu_model if itype else ""

"""The parts a tick's Snapshot is built from, each produced by its own source, and the one
function that builds it from them.

======================  =====================================  ===============================
Snapshot field          part                                   produced by
======================  =====================================  ===============================
taken_at, nodes, pools  ``Observed``                           signals/reader.py (Prometheus,
unserved,                                                      Slurm, Kubernetes), read before
cluster_quotas                                                 the reconciler, which uses it
missing                 ``Observed.missing``, then the         the reader; signals/prices.py
                        ``PriceView.missing`` not already in
offerings               ``PriceView.offerings``                signals/prices.py
spot_scores             ``PriceView.spot_scores``              signals/prices.py (AWS)
capacity_errors         ``PriceView.capacity_errors``, then    signals/prices.py (launches the
                        the launch backoffs                    executor saw refused);
                                                               service/control/backoff.py
forecasts               forecast floors, pool -> floor         service/observe/forecasts.py (mode
                                                               scale)
held                    node -> the request holding it         service/control/request_keeper.py
pools[key].image        baked pools' images, pool -> image     signals/images.py (DescribeImages
                        (absent: base pool, or not known)      by bootstrap hash, cached)
======================  =====================================  ===============================

A spot notice is not a part: the notice intake (or the simulator's cluster) moves the node
to INTERRUPTED, and that state is the engine's one source for it.

The service reads ``Observed`` before its reconciler runs and the other parts after it,
from the fleet as the reconciler left it, then calls :func:`assemble` once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from autoscaler.model.snapshot import (
    CapacityError,
    ClusterQuota,
    ForecastFloor,
    ImageObservation,
    NodeObservation,
    Offering,
    PoolObservation,
    Snapshot,
    SpotScore,
    UnservedJob,
)


@dataclass(frozen=True)
class Observed:
    """What the signal reader saw at ``taken_at``: per node its metrics and scheduler
    state, per pool its pending jobs, and the sources that could not be read (a reason
    per pool in ``metrics_missing`` / ``scheduler_missing``)."""

    taken_at: datetime
    nodes: dict[str, NodeObservation] = field(default_factory=dict)
    pools: dict[str, PoolObservation] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)  # whole sources not read this time
    unserved: list[UnservedJob] = field(default_factory=list)
    cluster_quotas: dict[str, ClusterQuota] = field(default_factory=dict)


@dataclass(frozen=True)
class PriceView:
    """The market: offerings, the capacity errors launches met recently, and the price
    sources that failed (for status; the engine freezes nothing for prices)."""

    offerings: list[Offering]
    capacity_errors: list[CapacityError]
    missing: list[str]
    spot_scores: list[SpotScore] = field(default_factory=list)


NO_PRICES = PriceView([], [], [])


def assemble(observed: Observed, *, market: PriceView | None = None,
             backoffs: Sequence[CapacityError] = (),
             forecasts: Mapping[str, ForecastFloor] | None = None,
             held: Mapping[str, str] | None = None,
             images: Mapping[str, ImageObservation] | None = None) -> Snapshot:
    """The Snapshot of these parts (the table above); an absent part adds nothing."""
    market = market or NO_PRICES
    return Snapshot(
        taken_at=observed.taken_at, nodes=observed.nodes, pools=_with_images(observed.pools, images),
        capacity_errors=[*market.capacity_errors, *backoffs], offerings=market.offerings,
        spot_scores=market.spot_scores,
        missing=[*observed.missing, *(m for m in market.missing if m not in observed.missing)],
        unserved=observed.unserved, cluster_quotas=observed.cluster_quotas,
        held=dict(held or {}), forecasts=dict(forecasts or {}))



def _with_images(pools: dict[str, PoolObservation],
                 images: Mapping[str, ImageObservation] | None) -> dict[str, PoolObservation]:
    """``pools`` with each baked pool's image set (a pool nothing was observed for gets an
    observation of its image only)."""
    if not images:
        return pools
    out = dict(pools)
    for key, image in images.items():
        out[key] = out.get(key, _NOTHING_SEEN).model_copy(update={"image": image})
    return out


_NOTHING_SEEN = PoolObservation()

__all__ = ["NO_PRICES", "Observed", "PriceView", "assemble"]

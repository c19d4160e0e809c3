"""The tick's Snapshot from its parts: the table in model/snapshot_parts.py, field by field."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from autoscaler.model.snapshot import (
    CapacityError,
    ClusterQuota,
    ForecastFloor,
    ImageObservation,
    Offering,
    PoolObservation,
    Snapshot,
    UnservedJob,
)
from autoscaler.model.snapshot_parts import Observed, PriceView, assemble
from autoscaler.policy.models import Market
from tests.builders import NOW, busy, pending

OBSERVED = Observed(
    taken_at=NOW, nodes={"vision-gpu-1": busy()},
    pools={"vision/gpu": PoolObservation(pending=pending(4))},
    missing=["kubernetes"],
    unserved=[UnservedJob(id="ns/p", reason="no pool has a T4", constraint="gpu model")],
    cluster_quotas={"vision": ClusterQuota(max_gpus=8, source="ResourceQuota vision/gpus")})
OFFERING = Offering(cloud="aws", region="us-east-1", instance_type="p3.2xlarge", spot_usd=1.0)
REFUSED = CapacityError(cloud="aws", region="us-east-1", instance_type="p3.2xlarge", zone=None,
                        market=Market.SPOT, code="InsufficientInstanceCapacity", at=NOW)
MARKET = PriceView([OFFERING], [REFUSED], ["prices aws/us-east-1: spot prices: timed out",
                                           "kubernetes"])
BACKOFF = CapacityError(cloud="aws", region="us-east-1", instance_type="p3.2xlarge", zone=None,
                        market=Market.ON_DEMAND, code="launch-backoff", at=NOW,
                        until=NOW + timedelta(minutes=5))
FLOORS = {"vision/gpu": ForecastFloor(gpus=8, reason="forecast p80 for Mon 12:00-12:15")}
HELD = {"vision-gpu-1": "request ci-4711 (team vision, atomic, 1 x 4 GPUs)"}
IMAGES = {"vision/gpu": ImageObservation(hash="0123456789ab"),
          "vision/cpu": ImageObservation(hash="0123456789ab", image_id="ami-0abc1234")}


def test_every_part_lands_in_its_fields() -> None:
    snap = assemble(OBSERVED, market=MARKET, backoffs=[BACKOFF], forecasts=FLOORS, held=HELD)
    assert snap == Snapshot(
        taken_at=NOW, nodes=OBSERVED.nodes, pools=OBSERVED.pools, unserved=OBSERVED.unserved,
        cluster_quotas=OBSERVED.cluster_quotas, offerings=[OFFERING],
        capacity_errors=[REFUSED, BACKOFF],  # the market's first, then the launch backoffs
        missing=["kubernetes", "prices aws/us-east-1: spot prices: timed out"],  # once each
        forecasts=FLOORS, held=HELD)


def test_what_was_observed_keeps_its_field_names() -> None:
    snap = assemble(OBSERVED)
    for f in dataclasses.fields(Observed):
        assert getattr(snap, f.name) == getattr(OBSERVED, f.name), f.name


@pytest.mark.parametrize(("part", "fields"), [
    ({"market": MARKET}, {"offerings", "capacity_errors", "missing"}),
    ({"backoffs": [BACKOFF]}, {"capacity_errors"}),
    ({"forecasts": FLOORS}, {"forecasts"}),
    ({"held": HELD}, {"held"}),
    ({"images": IMAGES}, {"pools"}),
])
def test_each_part_fills_only_its_own_fields(part: dict[str, Any], fields: set[str]) -> None:
    alone, more = assemble(OBSERVED), assemble(OBSERVED, **part)
    assert {f for f in Snapshot.model_fields if getattr(more, f) != getattr(alone, f)} == fields


def test_a_baked_pools_image_joins_what_was_observed_of_the_pool() -> None:
    snap = assemble(OBSERVED, images=IMAGES)
    assert snap.pools == {
        "vision/gpu": PoolObservation(pending=pending(4), image=IMAGES["vision/gpu"]),
        "vision/cpu": PoolObservation(image=IMAGES["vision/cpu"])}  # nothing else observed
    assert OBSERVED.pools["vision/gpu"].image is None  # the observed part is not changed


def test_the_assembled_snapshot_is_what_plan_snapshot_replays() -> None:
    snap = assemble(OBSERVED, market=MARKET, backoffs=[BACKOFF], forecasts=FLOORS, held=HELD,
                    images=IMAGES)
    assert Snapshot.model_validate_json(snap.model_dump_json()) == snap

"""Fast spot fallback: during a spot outage, jobs past their tier's max_wait go on-demand at
once instead of walking the zones one refusal at a time; such launches are marked."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from autoscaler.engine import Launch, decide
from autoscaler.model.snapshot import CapacityError, PendingJob, PoolObservation
from autoscaler.policy.models import Capacity, Market, Priority
from tests.builders import NOW, fleet, make_policy, snapshot, spot_refusal

KEY = "vision/gpu"
ZONES = ["us-east-1a", "us-east-1c", "us-east-1d", "us-east-1f"]


def launches(priority: str, waited: timedelta, errors: list[CapacityError], **capacity) -> list[Launch]:
    policy = make_policy(priority=priority, instance_types=["p3.2xlarge"], zones=ZONES,
                         capacity={"spot_percent": 100, "spot_fallback": "on-demand", **capacity})
    job = PendingJob(id="j1", gpus=1, submitted_at=NOW - waited)
    plan = decide({policy.team: policy}, fleet(),
                  snapshot(pools={KEY: PoolObservation(pending=[job])}, capacity_errors=errors), NOW)
    return [a for a in plan.actions if isinstance(a, Launch)]


def test_high_priority_falls_back_on_the_first_refusal_and_is_marked():
    (launch,) = launches("high", timedelta(seconds=40), [spot_refusal("us-east-1a")])
    assert launch.market is Market.ON_DEMAND and launch.fallback_from_spot
    assert "p3.2xlarge spot in us-east-1a: InsufficientInstanceCapacity" in launch.reason
    assert "max_wait 0s" in launch.reason


def test_low_priority_tries_the_next_zone_until_max_wait():
    (launch,) = launches("low", timedelta(minutes=5), [spot_refusal("us-east-1a")])
    assert (launch.market, launch.zone, launch.fallback_from_spot) == (Market.SPOT, "us-east-1c", False)
    (late,) = launches("low", timedelta(minutes=31), [spot_refusal("us-east-1a")])
    assert late.market is Market.ON_DEMAND and late.fallback_from_spot
    assert "waited 31m >= max_wait 30m" in late.reason


def test_without_an_outage_a_long_wait_stays_on_spot():
    (launch,) = launches("high", timedelta(hours=2), [])
    assert launch.market is Market.SPOT and not launch.fallback_from_spot


def test_every_offering_refused_falls_back_in_the_same_tick_even_before_max_wait():
    (launch,) = launches("low", timedelta(0), [spot_refusal(z) for z in ZONES])
    assert launch.market is Market.ON_DEMAND and launch.fallback_from_spot
    assert all(f"in {z}: capacity error" in launch.reason for z in ZONES)


def test_no_fallback_policy_keeps_waiting_for_spot():
    (launch,) = launches("high", timedelta(minutes=5), [spot_refusal("us-east-1a")], spot_fallback="none")
    assert (launch.market, launch.zone) == (Market.SPOT, "us-east-1c")


def test_explicit_max_wait_overrides_the_tier_and_is_bounded():
    (launch,) = launches("high", timedelta(minutes=5), [spot_refusal("us-east-1a")], max_wait="10m")
    assert launch.market is Market.SPOT
    assert Capacity().wait_limit(Priority.MEDIUM) == timedelta(minutes=10)
    with pytest.raises(ValidationError, match="at most 1d"):
        Capacity(max_wait="2d")

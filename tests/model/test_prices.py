"""PriceBook: observed offerings first, then the catalog's price for the pool's region,
with the source of every figure available for reasons and previews."""

from __future__ import annotations

from datetime import UTC, datetime

from autoscaler.catalog import default_catalog
from autoscaler.model.prices import PriceBook
from autoscaler.model.snapshot import Offering, Snapshot
from autoscaler.policy.models import Market


def book(*offerings: Offering) -> PriceBook:
    snap = Snapshot(taken_at=datetime(2026, 12, 3, tzinfo=UTC), offerings=list(offerings))
    return PriceBook(default_catalog(), snap)


def test_prices_follow_the_region_and_name_their_source():
    prices = book()
    assert prices.on_demand("aws", "eu-west-1", "p3.2xlarge", None) == 3.305
    assert prices.price_source("aws", "eu-west-1", "p3.2xlarge", None) == "eu-west-1 list price"
    assert prices.on_demand("aws", "eu-west-3", "p3.2xlarge", "eu-west-3a") == 3.06
    assert prices.price_source("aws", "eu-west-3", "p3.2xlarge", "eu-west-3a") == (
        "us-east-1 list price used for eu-west-3")
    assert prices.spot("aws", "eu-west-1", "p3.2xlarge", None) == round(3.305 * 0.3, 4)
    assert prices.price_source("aws", "eu-west-1", "p3.2xlarge", None, Market.SPOT) == (
        "catalog spot fallback (eu-west-1 list price)")


def test_observed_offerings_win_and_say_so():
    seen = Offering(cloud="aws", region="eu-west-1", instance_type="p3.2xlarge", zone="eu-west-1a",
                    spot_usd=0.5, on_demand_usd=3.4)
    prices = book(seen)
    assert prices.on_demand("aws", "eu-west-1", "p3.2xlarge", "eu-west-1a") == 3.4
    assert prices.spot("aws", "eu-west-1", "p3.2xlarge", "eu-west-1a") == 0.5
    assert prices.price_source("aws", "eu-west-1", "p3.2xlarge", "eu-west-1a", Market.SPOT) == "observed"
    # Another zone has no observation: the catalog's region price, not the zone's.
    assert prices.on_demand("aws", "eu-west-1", "p3.2xlarge", "eu-west-1b") == 3.305


def test_unknown_and_unpriced_types():
    prices = book()
    assert prices.on_demand("aws", "us-east-1", "x9.huge", None) is None
    assert prices.price_source("aws", "us-east-1", "x9.huge", None) == "x9.huge is not in the aws catalog"
    assert prices.on_demand("aws", "us-east-1", "p5e.48xlarge", None) is None
    assert prices.price_source("aws", "us-east-1", "p5e.48xlarge", None) == "no price in the catalog"

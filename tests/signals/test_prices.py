"""Price signals end to end: moto / fake ECS data -> PriceSignals -> Snapshot.offerings ->
decide() picks the (type, zone, market) and says which prices made it choose."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import pytest

from autoscaler.clouds.alicloud import AlicloudCloud, AlicloudSettings
from autoscaler.clouds.alicloud_api import Credentials
from autoscaler.clouds.aws import AwsCloud, AwsSettings
from autoscaler.clouds.base import (
    CloudInstance,
    CloudMarket,
    CloudUnreachableError,
    InstanceState,
    Interruption,
    SpotPrice,
    ZoneOffering,
)
from autoscaler.engine import Hold, Launch, Plan, decide
from autoscaler.model.node import FleetView
from autoscaler.model.snapshot import CapacityError, PendingJob, PoolObservation
from autoscaler.model.snapshot_parts import Observed, assemble
from autoscaler.policy.models import Market, TeamPolicy
from autoscaler.sandbox.fakes.ecs import FakeEcsServer
from autoscaler.signals.prices import (
    PriceSignals,
    RegionWant,
    build_offerings,
    region_offerings,
    wants,
)
from tests.clouds import helpers
from tests.clouds.helpers import (
    AWS_TEST_ENV,
    ECS_KEY_ID,
    ECS_SECRET,
    NOW,
    FakeClock,
    ScoreBook,
    SpotBook,
)
from tests.trickle import trickling

# The cloud tests' fixtures: a moto server with a spot price book, a fake ECS endpoint.
moto_url, moto, spot_book, ecs = helpers.moto_url, helpers.moto, helpers.spot_book, helpers.ecs
score_book = helpers.score_book

T4, T4X4 = "g4dn.xlarge", "g4dn.12xlarge"
ALI_T4 = "ecs.gn6i-c4g1.xlarge"
SPOT_ONLY = {"on_demand_base": 0, "spot_percent": 100, "spot_fallback": "on-demand"}


def policies(cloud: str = "aws", region: str = "us-east-1",
             zones: Sequence[str] = ("us-east-1a", "us-east-1b"), types: Sequence[str] = (T4, T4X4),
             capacity: Mapping[str, Any] | None = None, team: str = "vision",
             pool: str = "t4") -> dict[str, TeamPolicy]:
    return {team: TeamPolicy.model_validate({"team": team, "pools": [{
        "name": pool, "cloud": cloud, "region": region, "zones": list(zones),
        "instance_types": list(types), "max_nodes": 10, "capacity": dict(capacity or SPOT_ONLY)}]})}


def one_pending_gpu(key: str = "vision/t4") -> Observed:
    return Observed(taken_at=NOW, pools={key: PoolObservation(pending=[PendingJob(id="j1", gpus=1)])})


def plan_with(signals: PriceSignals, pols: dict[str, TeamPolicy], key: str = "vision/t4") -> Plan:
    view = signals.observe(pols)
    snapshot = assemble(one_pending_gpu(key=key), market=view)
    return decide(pols, FleetView(), snapshot, NOW)


def launches(plan: Plan) -> list[Launch]:
    return [a for a in plan.actions if isinstance(a, Launch)]


def aws_signals(endpoint: str, clock: FakeClock | None = None, **kw: Any) -> PriceSignals:
    clock = clock or FakeClock()
    return PriceSignals(lambda cloud, region: AwsCloud(
        region, settings=AwsSettings(endpoint_url=endpoint), clock=clock), clock=clock, **kw)


def test_cheapest_spot_zone_wins_and_the_reason_names_its_price(moto: str, spot_book: SpotBook) -> None:
    for zone, price in (("us-east-1a", 0.20), ("us-east-1b", 0.16)):
        spot_book.add(T4, zone, price)
    spot_book.add(T4X4, "us-east-1a", 0.90)  # $0.225/GPU-h: dearer per GPU
    spot_book.add(T4X4, "us-east-1b", 0.95)
    [launch] = launches(plan_with(aws_signals(moto), policies()))
    assert (launch.instance_type, launch.zone, launch.market) == (T4, "us-east-1b", Market.SPOT)
    assert launch.hourly_usd == pytest.approx(0.16)
    assert "$0.160/h" in launch.reason


def test_spot_priced_above_the_ratio_is_not_used_for_spot(moto: str, spot_book: SpotBook) -> None:
    # g4dn.xlarge on-demand is $0.526/h, so 0.7 x on-demand = $0.368/h: $0.380 spot is out,
    # although per GPU it is cheaper than the 4-GPU type's spot price.
    spot_book.add(T4, "us-east-1a", 0.38)
    spot_book.add(T4X4, "us-east-1a", 2.00)
    [launch] = launches(plan_with(aws_signals(moto), policies(zones=["us-east-1a"])))
    assert (launch.instance_type, launch.market) == (T4X4, Market.SPOT)
    assert "$2.000/h" in launch.reason


def test_when_every_spot_price_is_too_high_the_fallback_says_why(moto: str, spot_book: SpotBook) -> None:
    spot_book.add(T4, "us-east-1a", 0.40)
    spot_book.add(T4X4, "us-east-1a", 3.00)
    [launch] = launches(plan_with(aws_signals(moto), policies(zones=["us-east-1a"])))
    assert (launch.instance_type, launch.market) == (T4, Market.ON_DEMAND)
    assert "spot $0.400/h is above 0.7 x on-demand $0.526/h" in launch.reason
    assert "falling back to on-demand" in launch.reason


def test_recent_capacity_error_steers_to_another_zone(moto: str, spot_book: SpotBook) -> None:
    spot_book.add(T4, "us-east-1a", 0.20)
    spot_book.add(T4, "us-east-1b", 0.16)
    clock = FakeClock()
    signals = aws_signals(moto, clock)  # ERROR_RETENTION: capacity errors are kept 2 hours
    signals.record_capacity_error(CapacityError(
        cloud="aws", region="us-east-1", instance_type=T4, zone="us-east-1b", market=Market.SPOT,
        code="InsufficientInstanceCapacity", at=NOW - timedelta(minutes=5)))
    signals.record_capacity_error(CapacityError(
        cloud="aws", region="us-east-1", instance_type=T4, zone="us-east-1a", market=Market.SPOT,
        code="InsufficientInstanceCapacity", at=NOW - timedelta(hours=3)))
    assert [e.zone for e in signals.capacity_errors()] == ["us-east-1b"]  # the old one aged out
    [launch] = launches(plan_with(signals, policies(types=[T4])))
    assert (launch.zone, launch.market) == ("us-east-1a", Market.SPOT)


def test_pool_without_zones_uses_the_dearest_zone_with_stock(moto: str, spot_book: SpotBook) -> None:
    for zone, price in (("us-east-1a", 0.20), ("us-east-1b", 0.16), ("us-east-1c", 0.30)):
        spot_book.add(T4, zone, price)
    spot_book.add(T4, "us-east-1e", 0.10)  # g4dn.xlarge is not offered in us-east-1e
    [launch] = launches(plan_with(aws_signals(moto), policies(zones=[], types=[T4])))
    assert (launch.zone, launch.market) == (None, Market.SPOT)
    assert "$0.300/h" in launch.reason


def ali_signals(server: FakeEcsServer) -> PriceSignals:
    clock = FakeClock()
    server.state.clock = clock
    return PriceSignals(lambda cloud, region: AlicloudCloud(
        region, settings=AlicloudSettings(endpoint=server.endpoint),
        credentials=Credentials(ECS_KEY_ID, ECS_SECRET), clock=clock), clock=clock)


def ali_policies(**capacity: Any) -> dict[str, TeamPolicy]:
    return policies("alicloud", "cn-hangzhou", ("cn-hangzhou-h", "cn-hangzhou-i"), [ALI_T4],
                    {**SPOT_ONLY, **capacity}, team="research", pool="gn6")


def test_zone_out_of_stock_is_skipped(ecs: FakeEcsServer) -> None:
    state = ecs.state
    state.set_on_demand(ALI_T4, 1.10)  # no built-in Alibaba price: DescribePrice supplies it
    state.set_spot(ALI_T4, "cn-hangzhou-h", 0.30, NOW)
    state.set_spot(ALI_T4, "cn-hangzhou-i", 0.25, NOW)  # cheaper, but sold out
    state.set_stock(ALI_T4, "cn-hangzhou-h", "WithStock")
    state.set_stock(ALI_T4, "cn-hangzhou-i", "WithoutStock")
    [launch] = launches(plan_with(ali_signals(ecs), ali_policies(), key="research/gn6"))
    assert (launch.zone, launch.market) == ("cn-hangzhou-h", Market.SPOT)
    assert "$0.300/h" in launch.reason


def test_no_stock_anywhere_holds_and_says_so(ecs: FakeEcsServer) -> None:
    state = ecs.state
    state.set_on_demand(ALI_T4, 1.10)
    for zone in ("cn-hangzhou-h", "cn-hangzhou-i"):
        state.set_spot(ALI_T4, zone, 0.30, NOW)
        state.set_stock(ALI_T4, zone, "WithoutStock")
    plan = plan_with(ali_signals(ecs), ali_policies(spot_fallback="none"), key="research/gn6")
    assert not launches(plan)
    [hold] = [a for a in plan.actions if isinstance(a, Hold) and a.what == "scale-up"]
    assert "cn-hangzhou-h: out of stock" in hold.reason and "cn-hangzhou-i: out of stock" in hold.reason


class FakeMarket:
    """The CloudMarket Protocol with canned answers; ``error`` makes every call fail."""

    cloud, region = "aws", "us-east-1"

    def __init__(self, spot: dict[tuple[str, str], float]):
        self.spot = spot
        self.error: Exception | None = None
        self.calls = 0

    def _check(self) -> None:
        self.calls += 1
        if self.error is not None:
            raise self.error

    def spot_price_history(self, types: Iterable[str], zones: Iterable[str] | None = None) -> list[SpotPrice]:
        self._check()
        return [SpotPrice(t, z, p, NOW) for (t, z), p in self.spot.items()
                if t in set(types) and (zones is None or z in set(zones))]

    def on_demand_prices(self, types: Iterable[str]) -> dict[str, float]:
        self._check()
        return {t: 0.526 for t in types}

    def offerings(self, types: Iterable[str]) -> list[ZoneOffering]:
        self._check()
        return [ZoneOffering(t, z, True, "offered") for t, z in self.spot]

    def managed_instances(self, tags: Mapping[str, str] | None = None,
                          states: Iterable[InstanceState] | None = None) -> list[CloudInstance]:
        return []

    def interruptions(self) -> list[Interruption]:
        return []


def test_failed_api_reuses_the_last_answer_then_falls_back_to_the_catalog() -> None:
    market = FakeMarket({(T4, "us-east-1a"): 0.16})
    clock = FakeClock()
    made: list[CloudMarket] = []
    signals = PriceSignals(lambda c, r: made.append(market) or market, clock=clock)
    pols = policies(zones=["us-east-1a"], types=[T4])
    assert "$0.160/h" in launches(plan_with(signals, pols))[0].reason

    market.error = CloudUnreachableError("cannot reach the EC2 endpoint")
    clock.advance(timedelta(minutes=10))
    view = signals.observe(pols)
    assert len(view.missing) == 3 and all("using the answer from 12:00:00" in m for m in view.missing)
    assert any(o.spot_usd == 0.16 for o in view.offerings)

    clock.advance(timedelta(minutes=30))  # 40 minutes: past KEEP_LAST_GOOD (30)
    view = signals.observe(pols)
    assert all("cannot reach the EC2 endpoint" in m for m in view.missing)
    assert all(o.spot_usd is None and o.on_demand_usd is None for o in view.offerings)
    # Nothing invented: the engine prices from the catalog ($0.526 x (1 - 0.65) = $0.184).
    launch = launches(decide(pols, FleetView(), assemble(one_pending_gpu(), market=view), NOW))[0]
    assert "$0.184/h" in launch.reason
    assert len(made) == 1  # one adapter per region, kept across ticks


def test_after_our_clock_steps_back_the_last_answer_is_not_reused_as_fresh() -> None:
    """Stored at 12:00, read after a 2-day step back: its age is negative, which proved
    nothing and kept 12:00's prices "fresh" for the two days (audit 8, F3)."""
    market = FakeMarket({(T4, "us-east-1a"): 0.16})
    clock = FakeClock()
    signals = PriceSignals(lambda c, r: market, clock=clock)
    pols = policies(zones=["us-east-1a"], types=[T4])
    signals.observe(pols)
    market.error = CloudUnreachableError("cannot reach the EC2 endpoint")
    clock.advance(timedelta(days=-2))
    view = signals.observe(pols)
    assert not any("using the answer from" in m for m in view.missing)
    assert all(o.spot_usd is None for o in view.offerings)


def test_prices_are_read_once_per_ttl_not_once_per_tick(moto: str, spot_book: SpotBook) -> None:
    spot_book.add(T4, "us-east-1a", 0.16)
    clock = FakeClock()
    signals = aws_signals(moto, clock)  # AwsSettings defaults: spot TTL 5 min
    pols = policies(types=[T4])
    for _ in range(120):  # ten minutes of 5-second ticks
        assert any(o.spot_usd == 0.16 for o in signals.observe(pols).offerings)
        clock.advance(timedelta(seconds=5))
    assert len(spot_book.requests) == 2
    market = signals.market("aws", "us-east-1")
    assert isinstance(market, AwsCloud)
    assert market.api_calls["describe_instance_type_offerings"] == 1  # 30 min TTL


def test_failed_sources_are_named_in_the_snapshot() -> None:
    market = FakeMarket({})
    market.error = CloudUnreachableError("down")
    view = PriceSignals(lambda c, r: market).observe(policies(types=[T4]))
    snapshot = assemble(one_pending_gpu(), market=view)
    assert len(snapshot.missing) == 3 and all("down" in m for m in snapshot.missing)


def test_strict_mode_raises_for_the_command_line() -> None:
    market = FakeMarket({})
    market.error = CloudUnreachableError("down")
    with pytest.raises(CloudUnreachableError):
        region_offerings(market, RegionWant("aws", "us-east-1", (T4,), None), strict=True)


def test_wants_merge_pools_per_region() -> None:
    a = policies(zones=["us-east-1a"], types=[T4], team="vision", pool="a")
    b = policies(zones=["us-east-1b"], types=[T4X4], team="search", pool="b")
    [want] = wants({**a, **b})
    assert want == RegionWant("aws", "us-east-1", (T4X4, T4), ("us-east-1a", "us-east-1b"),
                              ((T4X4,), (T4,)))
    c = policies(zones=[], types=[T4], team="infer", pool="c")
    [want] = wants({**a, **c})
    assert want.zones is None and want.type_sets == ((T4,),)  # c takes any zone: no score to ask


class ScoringMarket(FakeMarket):
    """A market that also scores spot placement (AWS's adapter with scores on)."""

    def __init__(self, spot: dict[tuple[str, str], float], scores: dict[str, int]):
        super().__init__(spot)
        self.scores, self.asked = scores, []  # type: list[tuple[str, ...]]

    def spot_placement_scores(self, types: Iterable[str]) -> dict[str, int] | None:
        self._check()
        self.asked.append(tuple(types))
        return dict(self.scores)


def test_each_pool_set_of_types_gets_its_zones_scores_and_a_failure_keeps_the_last() -> None:
    three = [T4, T4X4, "g4dn.2xlarge"]
    market = ScoringMarket({(T4, "us-east-1a"): 0.16, (T4, "us-east-1b"): 0.18},
                           {"us-east-1a": 2, "us-east-1b": 8, "us-east-1c": 9})
    clock = FakeClock()
    signals = PriceSignals(lambda c, r: market, clock=clock)
    pols = policies(zones=["us-east-1a", "us-east-1b"], types=three)
    view = signals.observe(pols)
    assert market.asked == [tuple(sorted(three))]
    # us-east-1c is scored but no pool lists it: left out.
    assert [(s.zone, s.score, s.instance_types) for s in view.spot_scores] == [
        ("us-east-1a", 2, sorted(three)), ("us-east-1b", 8, sorted(three))]
    # The engine reads them: the cheaper zone scores 2 of 10, so the launch goes to 1b.
    plan = decide(pols, FleetView(), assemble(one_pending_gpu(), market=view), NOW)
    [launch] = launches(plan)
    assert launch.zone == "us-east-1b" and launch.market is Market.SPOT

    market.error = CloudUnreachableError("down")
    clock.advance(timedelta(minutes=10))
    view = signals.observe(pols)
    assert [s.score for s in view.spot_scores] == [2, 8]
    assert any("spot placement scores of" in m and "using the answer from 12:00:00" in m
               for m in view.missing)
    # A market that gives no scores (Alibaba, AWS with scores off) adds none.
    assert PriceSignals(lambda c, r: FakeMarket({})).observe(pols).spot_scores == []


def test_build_offerings_per_zone_and_for_any_zone() -> None:
    want = RegionWant("aws", "us-east-1", (T4,), None)
    stock = [ZoneOffering(T4, "us-east-1a", True, "offered"),
             ZoneOffering(T4, "us-east-1e", False, "not-offered")]
    spot = [SpotPrice(T4, "us-east-1a", 0.2, NOW - timedelta(hours=1)),
            SpotPrice(T4, "us-east-1a", 0.18, NOW), SpotPrice(T4, "us-east-1e", 0.05, NOW)]
    got = {o.zone: o for o in build_offerings(want, {T4: 0.526}, stock, spot)}
    assert got["us-east-1a"].spot_usd == 0.18 and got["us-east-1a"].in_stock is True
    assert got["us-east-1e"].in_stock is False
    assert got[None].spot_usd == 0.18 and got[None].in_stock is True  # 1e has no stock
    assert got[None].on_demand_usd == 0.526
    none_left = build_offerings(want, None, [ZoneOffering(T4, "us-east-1e", False, "x")], [])
    assert {o.zone: o.in_stock for o in none_left} == {"us-east-1e": False, None: False}


def test_a_spot_price_no_cloud_would_ask_is_dropped_and_the_newest_plausible_one_kept(
        caplog: pytest.LogCaptureFixture) -> None:
    """$0.000001/h for a p3.8xlarge bought a 4-GPU node for a 1-GPU job: it won every
    comparison. Below 5% of on-demand a row is dropped; an older plausible row stands."""
    want = RegionWant("aws", "us-east-1", (T4,), ("us-east-1a", "us-east-1b"))
    spot = [SpotPrice(T4, "us-east-1a", 0.2, NOW - timedelta(hours=1)),
            SpotPrice(T4, "us-east-1a", 0.000001, NOW),
            SpotPrice(T4, "us-east-1b", 0.03, NOW)]  # 5.7%: a price
    with caplog.at_level("WARNING", logger="autoscaler.signals.prices"):
        got = {o.zone: o.spot_usd for o in build_offerings(want, {T4: 0.526}, None, spot)}
    assert got == {"us-east-1a": 0.2, "us-east-1b": 0.03, None: 0.2}
    assert caplog.messages == ["prices aws/us-east-1: dropped 1 spot price row(s) below 5% of "
                               "on-demand: no cloud discounts that far"]
    # Without an on-demand price there is nothing to hold a row against: every row stays.
    got = {o.zone: o.spot_usd for o in build_offerings(want, None, None, spot)}
    assert got["us-east-1a"] == 0.000001


def test_the_service_config_turns_scores_on_and_they_reach_the_decision(
        moto: str, spot_book: SpotBook, score_book: ScoreBook) -> None:
    """clouds.aws.spot_placement_scores -> the service's market adapters -> the price
    signals -> the snapshot -> decide(), against moto with GetSpotPlacementScores answered."""
    from autoscaler.catalog import default_catalog
    from autoscaler.service.config.models import ServiceConfig
    from autoscaler.service.wiring import Markets, build_prices

    three = [T4, T4X4, "g4dn.2xlarge"]
    for zone, price in (("us-east-1a", 0.16), ("us-east-1b", 0.18)):
        spot_book.add(T4, zone, price)
    score_book.rows = [{"Region": "us-east-1", "AvailabilityZoneId": "use1-az6", "Score": 1},  # 1a
                       {"Region": "us-east-1", "AvailabilityZoneId": "use1-az1", "Score": 7}]  # 1b
    pols = policies(zones=["us-east-1a", "us-east-1b"], types=three)
    for on in (False, True):
        config = ServiceConfig.model_validate({"policies_dir": "p", "clouds": {"aws": {
            "regions": ["us-east-1"], "endpoint_url": moto, "spot_placement_scores": on}}})
        view = PriceSignals(Markets(config, default_catalog())).observe(pols)
        [launch] = launches(decide(pols, FleetView(), assemble(one_pending_gpu(), market=view), NOW))
        assert launch.zone == ("us-east-1b" if on else "us-east-1a"), launch.reason
    assert len(score_book.requests) == 1 and score_book.requests[0]["types"] == sorted(three)
    assert "before the cheaper g4dn.xlarge in us-east-1a (spot placement score 1/10)" in launch.reason
    # With the catalog's prices (clouds.market_prices off) the scores are still read: they
    # are stock, not price; with scores off as well, nothing is asked of the cloud.
    for on in (False, True):
        config = ServiceConfig.model_validate({"policies_dir": "p", "clouds": {
            "market_prices": False, "aws": {"regions": ["us-east-1"], "endpoint_url": moto,
                                            "spot_placement_scores": on}}})
        view = build_prices(config, Markets(config, default_catalog()), lambda: NOW).observe(pols)
        assert view.offerings == [] and view.missing == []
        assert [(s.zone, s.score) for s in view.spot_scores] == (
            [("us-east-1a", 1), ("us-east-1b", 7)] if on else [])
        [launch] = launches(decide(pols, FleetView(), assemble(one_pending_gpu(), market=view), NOW))
        assert launch.zone == ("us-east-1b" if on else "us-east-1a"), launch.reason
    assert len(score_book.requests) == 2


@pytest.mark.timeout(30)
def test_a_market_that_trickles_its_answer_is_missing_within_the_call_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore bounds each socket read, not the answer: a call that overruns its limit is a
    missing source with the reason, and the tick's next calls to that client fail at once
    while it still runs (one stuck call per client, not one per tick)."""
    for key, value in AWS_TEST_ENV.items():
        monkeypatch.setenv(key, value)
    with trickling() as trickle:
        settings = AwsSettings(endpoint_url=trickle.url, connect_timeout=0.5, read_timeout=0.5,
                               max_attempts=1)
        markets = {"aws": AwsCloud("us-east-1", settings=settings, clock=FakeClock())}
        signals = PriceSignals(lambda cloud, region: markets[cloud], clock=FakeClock())
        markets["aws"]._client("ec2")  # built beforehand: loading botocore's models is not the call
        started = time.monotonic()
        view = signals.observe(policies())
        assert time.monotonic() - started < 1.5 + 1.5
        stock, spot = view.missing
        assert stock.startswith("prices aws/us-east-1: stock per zone: ")
        assert stock.endswith(f"{trickle.url} did not finish its answer within 1.5s")
        assert "still sending the answer to a call that overran its time: nothing sent" in spot
        started = time.monotonic()
        again = signals.observe(policies())
        assert time.monotonic() - started < 0.5
        assert all("nothing sent" in m for m in again.missing) and len(again.missing) == 2
        assert trickle.requests == 1

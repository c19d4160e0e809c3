"""The baked pools' images (signals/images.py's table): the newest image of each baked pool's
hash, stale when none, unknown on a failure; asked once per (region, hash) per interval."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

import pytest

from autoscaler.clouds.base import CloudError, MachineImage
from autoscaler.model.snapshot import ImageObservation
from autoscaler.policy.models import TeamPolicy
from autoscaler.signals.images import BakedImageReader
from tests.builders import NOW, make_policy, make_pool_dict
from tests.clouds.helpers import FakeClock

TAG = "gpu-autoscaler/bootstrap-hash"
INTERVAL = timedelta(minutes=5)
BAKED = {"image": "baked", "when_stale": "hold"}


@dataclass
class FakeImages:
    """An AWS adapter's image listing: images by hash (newest first), calls recorded."""

    by_hash: dict[str, list[MachineImage]] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    next_error: Exception | None = None

    def images_tagged(self, key: str, value: str) -> list[MachineImage]:
        self.calls.append((key, value))
        if self.next_error is not None:
            raise self.next_error
        return self.by_hash.get(value, [])


def policies() -> dict[str, TeamPolicy]:
    return {"vision": make_policy(pools=[
        make_pool_dict("a", bootstrap=BAKED), make_pool_dict("b", bootstrap=BAKED),
        make_pool_dict("west", region="us-west-2", bootstrap=BAKED), make_pool_dict("base")])}


HASHES = {"vision/a": "0123456789ab", "vision/b": "0123456789ab", "vision/west": "0123456789ab",
          "vision/base": "ffffffffffff"}  # a base pool is never looked up, whatever it is given


def reader(source: object, clock: FakeClock, hashes: Mapping[str, str] = HASHES) -> BakedImageReader:
    return BakedImageReader(lambda _: hashes, lambda region: source, tag=TAG,
                            interval=INTERVAL, clock=clock)


def test_the_newest_image_of_the_hash_or_stale_when_none() -> None:
    source = FakeImages({"0123456789ab": [MachineImage("ami-0new", NOW), MachineImage("ami-0old", None)]})
    got = reader(source, FakeClock()).observe(policies())
    assert got == dict.fromkeys(("vision/a", "vision/b", "vision/west"),
                                ImageObservation(hash="0123456789ab", image_id="ami-0new"))
    assert source.calls == [(TAG, "0123456789ab")] * 2  # once per region: a and b share it
    assert reader(FakeImages(), FakeClock()).observe(policies())["vision/a"].stale


def test_answers_are_kept_for_the_interval_per_region_and_hash() -> None:
    source, clock = FakeImages(), FakeClock()
    images = reader(source, clock)
    images.observe(policies())
    clock.advance(INTERVAL - timedelta(seconds=1))
    images.observe(policies())
    assert len(source.calls) == 2
    source.by_hash["0123456789ab"] = [MachineImage("ami-0baked", NOW)]
    clock.advance(timedelta(seconds=1))
    assert images.observe(policies())["vision/a"].image_id == "ami-0baked"
    assert len(source.calls) == 4


def test_an_error_is_unknown_logged_once_and_kept_for_the_interval(caplog: pytest.LogCaptureFixture) -> None:
    source, clock = FakeImages(next_error=CloudError("ec2 describe_images: throttled")), FakeClock()
    images = reader(source, clock)
    with caplog.at_level(logging.WARNING, logger="autoscaler.signals.images"):
        assert images.observe(policies()) == {}  # unknown: never a hold
        clock.advance(INTERVAL)
        assert images.observe(policies()) == {}
    assert len(source.calls) == 4  # 2 regions, asked again only after the interval
    assert len([r for r in caplog.records if "throttled" in r.getMessage()]) == 2  # once per region
    source.next_error = None
    clock.advance(INTERVAL)
    assert images.observe(policies())["vision/a"].stale


def test_an_adapter_that_cannot_list_images_or_a_bad_hash_is_unknown() -> None:
    assert reader(object(), FakeClock()).observe(policies()) == {}
    bad = dict.fromkeys(HASHES, "not-hex!")
    assert reader(FakeImages(), FakeClock(), bad).observe(policies()) == {}


def test_no_baked_pool_asks_nothing() -> None:
    source = FakeImages()
    assert reader(source, FakeClock(), {}).observe(policies()) == {}
    assert source.calls == []


def test_only_the_current_hashes_failures_are_remembered() -> None:
    """The last error logged per (region, hash) grew by one entry per image change."""
    source, clock = FakeImages(next_error=CloudError("ec2 describe_images: throttled")), FakeClock()
    hashes: dict[str, str] = {}
    images = reader(source, clock, hashes)
    for change in range(50):  # a roles change each time: a new hash, still failing
        hashes.update(dict.fromkeys(HASHES, f"{change:012x}"))
        assert images.observe(policies()) == {}
    assert set(images._logged) == {("us-east-1", f"{49:012x}"), ("us-west-2", f"{49:012x}")}
    hashes.clear()
    images.observe(policies())
    assert images._logged == {}

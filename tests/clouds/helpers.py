"""Shared pieces for cloud tests: a moto server in this process, a spot price book that
replaces moto's fake spot history, a fake ECS endpoint, an injectable clock."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses.spot_instances import SpotInstances
from moto.server import ThreadedMotoServer

from autoscaler.sandbox.fakes.ecs import FakeEcsServer
from autoscaler.sandbox.fakes.ecs_state import EcsState
from autoscaler.sandbox.services.moto_patches import spot_placement_scores_answer
from tests.hostile_answers import AnswerServer, Reply

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
AWS_TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
}
ECS_KEY_ID, ECS_SECRET = "LTAI5tFakeKeyForTests", "fake-secret-for-tests"


class FakeClock:
    def __init__(self, now: datetime = NOW):
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


@dataclass
class SpotBook:
    """Spot price rows served in place of moto's single fake row per zone, with real
    MaxResults/NextToken paging; records each request's parameters."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, instance_type: str, zone: str, price: float, at: datetime = NOW,
            product: str = "Linux/UNIX") -> None:
        self.rows.append({"InstanceType": instance_type, "AvailabilityZone": zone,
                          "SpotPrice": f"{price:.6f}", "ProductDescription": product,
                          "Timestamp": at.strftime("%Y-%m-%dT%H:%M:%S.000Z")})

    def answer(self, handler: SpotInstances) -> ActionResult:
        types = handler._get_param("InstanceTypes", [])
        products = handler._get_param("ProductDescriptions", [])
        size = int(handler._get_param("MaxResults") or 1000)
        start = int(handler._get_param("NextToken") or 0)
        with self.lock:
            self.requests.append({"types": types, "products": products, "max_results": size,
                                  "next_token": start,
                                  "start_time": handler._get_param("StartTime")})
            match = [r for r in self.rows if (not types or r["InstanceType"] in types)
                     and (not products or r["ProductDescription"] in products)]
        result: dict[str, Any] = {"SpotPriceHistory": match[start:start + size]}
        if start + size < len(match):
            result["NextToken"] = str(start + size)
        return ActionResult(result)


@dataclass
class ScoreBook:
    """Spot placement scores (GetSpotPlacementScores, which moto does not answer) served
    with real MaxResults/NextToken paging: rows as AWS shapes them, zone ids not names;
    ``error`` answers every request with that EC2 error code instead, and a DryRun request
    gets DryRunOperation, as from AWS. Records each request."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    def answer(self, handler: SpotInstances) -> ActionResult:
        self.requests.append({
            "types": handler._get_param("InstanceTypes", []),
            "capacity": handler._get_int_param("TargetCapacity"),
            "unit": handler._get_param("TargetCapacityUnitType"),
            "single_az": handler._get_bool_param("SingleAvailabilityZone"),
            "regions": handler._get_param("RegionNames", []),
            "next_token": int(handler._get_param("NextToken") or 0)})
        if self.error is not None:
            raise EC2ClientError(self.error, "You are not authorized to perform this operation.")
        return spot_placement_scores_answer(handler, self.rows)


@pytest.fixture
def score_book(monkeypatch: pytest.MonkeyPatch) -> ScoreBook:
    book = ScoreBook()
    monkeypatch.setattr(SpotInstances, "get_spot_placement_scores",
                        lambda handler: book.answer(handler), raising=False)
    return book


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def moto(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A clean moto (state reset) with test credentials in the environment."""
    req = urllib.request.Request(f"{moto_url}/moto-api/reset", method="POST", data=b"")
    with urllib.request.urlopen(req, timeout=10):
        pass
    for key, value in AWS_TEST_ENV.items():
        monkeypatch.setenv(key, value)
    return moto_url


@pytest.fixture
def spot_book(monkeypatch: pytest.MonkeyPatch) -> SpotBook:
    book = SpotBook()
    monkeypatch.setattr(SpotInstances, "describe_spot_price_history",
                        lambda handler: book.answer(handler))
    return book


@pytest.fixture(scope="module")
def answers() -> Iterator[AnswerServer]:
    """A 127.0.0.1 server that answers every call with its ``reply`` (hostile answers)."""
    server = AnswerServer(Reply()).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def ecs() -> Iterator[FakeEcsServer]:
    """A fake ECS endpoint for cn-hangzhou that knows the test key."""
    state = EcsState("cn-hangzhou", ("cn-hangzhou-h", "cn-hangzhou-i"))
    state.add_key(ECS_KEY_ID, ECS_SECRET)
    server = FakeEcsServer(state).start()
    try:
        yield server
    finally:
        server.stop()


def spot_warning(instance_id: str, at: str = "2026-11-30T12:00:00Z") -> str:
    """An EventBridge spot interruption warning, as AWS documents it."""
    return json.dumps({
        "version": "0", "id": "1e5527d7-bb36-4607-3370-4164db56a40e",
        "detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2",
        "account": "123456789012", "time": at, "region": "us-east-1",
        "resources": [f"arn:aws:ec2:us-east-1a:instance/{instance_id}"],
        "detail": {"instance-id": instance_id, "instance-action": "terminate"},
    })


def rebalance(instance_id: str, at: str = "2026-11-30T12:00:00Z") -> str:
    return json.dumps({
        "version": "0", "id": "64e3ce4a-4e8b-4f5a-b6c2-0a9d4a0b1e33",
        "detail-type": "EC2 Instance Rebalance Recommendation", "source": "aws.ec2",
        "account": "123456789012", "time": at, "region": "us-east-1",
        "resources": [f"arn:aws:ec2:us-east-1a:instance/{instance_id}"],
        "detail": {"instance-id": instance_id},
    })

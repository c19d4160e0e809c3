"""The sandbox's spot notices are events the service obeys: from the fleet's account and
region, each kind with its deadline (``gpu-autoscaler sandbox interrupt`` sends them; the
running sandbox's queue is tested in tests/sandbox/test_stack.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.clouds.aws_events import ForgedEventError, Trust, parse_event
from autoscaler.clouds.base import InterruptionKind
from autoscaler.sandbox.services.spot_notices import queue_key, queues, spot_event

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
TRUST = Trust(account="123456789012", regions=frozenset({"us-west-2"}))


def test_a_warning_is_obeyed_with_ec2s_two_minutes_and_a_recommendation_without() -> None:
    warning = parse_event(spot_event("interruption", "i-0123456789abcdef0", "us-west-2",
                                     "us-west-2b", "123456789012", NOW), TRUST, NOW)
    assert warning is not None and warning.kind is InterruptionKind.INTERRUPTION
    assert (warning.instance_id, warning.at, warning.deadline) == (
        "i-0123456789abcdef0", NOW, NOW + timedelta(minutes=2))
    advice = parse_event(spot_event("rebalance", "i-0123456789abcdef0", "us-west-2",
                                    "us-west-2b", "123456789012", NOW), TRUST, NOW)
    assert advice is not None and advice.kind is InterruptionKind.REBALANCE
    # Two notices are two events (EventBridge gives each its own id).
    one, two = (json.loads(spot_event("rebalance", "i-01234567", "us-west-2", "us-west-2a",
                                      "123456789012")) for _ in range(2))
    assert one["id"] != two["id"]


def test_another_account_or_region_is_refused_as_forged() -> None:
    for account, region in (("210987654321", "us-west-2"), ("123456789012", "us-east-1")):
        with pytest.raises(ForgedEventError):
            parse_event(spot_event("interruption", "i-01234567", region, f"{region}a", account,
                                   NOW), TRUST, NOW)


def test_the_queues_are_found_by_region_in_the_state() -> None:
    endpoints = {"moto": "http://127.0.0.1:1", queue_key("us-east-1"): "http://q/1",
                 queue_key("us-west-2"): "http://q/2", "moto_faults": "/x"}
    assert queues(endpoints) == {"us-east-1": "http://q/1", "us-west-2": "http://q/2"}

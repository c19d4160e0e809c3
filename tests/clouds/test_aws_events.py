"""EventBridge spot notices as bodies: what is obeyed, what is refused, and that nothing a
body holds raises anything else out of the parser (hypothesis)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.clouds.aws_events import (
    ForgedEventError,
    MalformedEventError,
    RejectedEventError,
    Trust,
    excerpt,
    parse_event,
)
from autoscaler.clouds.base import InterruptionKind
from tests.clouds.helpers import rebalance, spot_warning

AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NOW = AT + timedelta(seconds=5)
TRUST = Trust("123456789012", frozenset({"us-east-1"}))
ID = "i-0aaaaaaaaaaaaaaaa"


def event(**changes: Any) -> str:
    """A genuine spot warning with top-level fields changed (None: removed)."""
    doc = json.loads(spot_warning(ID))
    for key, value in changes.items():
        if value is None:
            doc.pop(key)
        else:
            doc[key] = value
    return json.dumps(doc)


def test_a_genuine_warning_and_rebalance_and_the_sns_envelope() -> None:
    warning = parse_event(spot_warning(ID), TRUST, NOW)
    assert warning is not None and warning.kind is InterruptionKind.INTERRUPTION
    assert (warning.at, warning.deadline) == (AT, AT + timedelta(minutes=2))
    assert (warning.cloud, warning.region) == ("aws", "us-east-1")
    assert "terminate" in warning.source
    wrapped = json.dumps({"Type": "Notification", "MessageId": "m", "Message": spot_warning(ID)})
    assert parse_event(wrapped, TRUST, NOW) == warning
    hint = parse_event(rebalance(ID), TRUST, NOW)
    assert hint is not None and hint.kind is InterruptionKind.REBALANCE and hint.deadline is None


def test_the_clouds_other_events_are_ignored_not_refused() -> None:
    assert parse_event(event(**{"detail-type": "EC2 Instance State-change Notification",
                                "detail": {"instance-id": ID, "state": "running"}}),
                       TRUST, NOW) is None


@pytest.mark.exhausts_stack
@pytest.mark.parametrize(("body", "why"), [
    ("[" * 100_000, "too long"),  # the RecursionError, refused on size
    ("[" * 10_000, "recursion limit"),  # and under the size cap, on depth
    ('{"a":' * 3_000, "recursion limit"),
    ("{not json", "JSON"),
    ("[]", "object"),
    ("", "JSON"),
    ("\x00\x1b[2J", "JSON"),
    (event(time="9999-12-31T23:59:59Z"), "not within"),  # the OverflowError
    (event(time="0001-01-01T00:00:00Z"), "not within"),
    (event(time="2026-12-31T12:00:00Z"), "not within"),  # from the future
    (event(time="yesterday"), "bad 'time'"),
    (event(time="2026-11-30T12:00:00"), "timezone"),
    (event(time=1796040000), "time"),
    (event(**{"detail-type": None}), "detail-type"),
    (event(detail=None), "detail"),
    (event(detail={"instance-id": "vol-1"}), "instance-id"),
    (event(detail={"instance-id": "i-1; rm -rf /"}), "instance-id"),
    (event(detail={"instance-id": ID, "instance-action": "x" * 100}), "instance-action"),
    (event(detail=[1, 2]), "detail"),
    (event(account=123456789012), "account"),
    (json.dumps({"Type": "Notification", "Message": {"nested": 1}}), "SNS envelope"),
    (json.dumps({"Type": "Notification", "Message": json.dumps(
        {"Type": "Notification", "Message": spot_warning(ID)})}), "event"),  # one envelope only
], ids=lambda v: None if len(str(v)) > 40 else str(v))
def test_malformed_bodies_are_refused_with_a_reason(body: str, why: str) -> None:
    with pytest.raises(MalformedEventError, match=why) as refused:
        parse_event(body, TRUST, NOW)
    assert refused.value.reason == "malformed" and len(str(refused.value)) < 300


@pytest.mark.parametrize(("changes", "why"), [
    ({"source": "my.app"}, "source"),
    ({"source": "aws.ec2 "}, "source"),
    ({"account": "999999999999"}, "account"),
    ({"region": "eu-west-1"}, "region"),
    ({"region": "us-east-1\n"}, "region"),
], ids=lambda v: None if len(str(v)) > 40 else str(v))
def test_forged_notices_are_refused(changes: dict[str, Any], why: str) -> None:
    with pytest.raises(ForgedEventError, match=why) as refused:
        parse_event(event(**changes), TRUST, NOW)
    assert refused.value.reason == "forged"


def test_an_ignored_event_type_is_still_checked_for_its_origin() -> None:
    forged_other = event(account="999999999999", **{"detail-type": "EC2 Instance State-change "
                                                    "Notification"})
    with pytest.raises(ForgedEventError):
        parse_event(forged_other, TRUST, NOW)


def test_excerpt_is_short_and_printable() -> None:
    assert excerpt("\x1b[31mred\nline" + "x" * 500) == "?[31mred?line" + "x" * 67 + "..."
    assert excerpt({"k": 1}) == "{'k': 1}"


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=30)
FIELDS = st.fixed_dictionaries({}, optional={
    "source": st.sampled_from(["aws.ec2", "evil"]) | JSON,
    "account": st.sampled_from(["123456789012", "1"]) | JSON,
    "region": st.sampled_from(["us-east-1", "mars-1"]) | JSON,
    "detail-type": st.sampled_from(["EC2 Spot Instance Interruption Warning",
                                    "EC2 Instance Rebalance Recommendation"]) | JSON,
    "time": st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat()) | JSON,
    "detail": st.fixed_dictionaries({}, optional={"instance-id": st.just(ID) | JSON,
                                                  "instance-action": JSON}) | JSON,
    "Type": st.just("Notification") | JSON,
    "Message": st.text(max_size=40) | JSON,
})


def _outcome(body: str) -> None:
    try:
        parse_event(body, TRUST, NOW)
    except RejectedEventError as exc:
        assert exc.reason in ("malformed", "forged") and "\n" not in str(exc)


@settings(max_examples=200, deadline=None)
@given(body=st.text(max_size=400))
def test_any_text_is_obeyed_ignored_or_refused(body: str) -> None:
    _outcome(body)


@settings(max_examples=200, deadline=None)
@given(doc=FIELDS, wrap=st.booleans())
def test_any_event_shaped_document_is_obeyed_ignored_or_refused(doc: dict[str, Any],
                                                                wrap: bool) -> None:
    body = json.dumps(doc)
    if wrap:
        body = json.dumps({"Type": "Notification", "Message": body})
    _outcome(body)


@settings(max_examples=100, deadline=None)
@given(opening=st.text(alphabet="[{\"", min_size=1, max_size=3), depth=st.integers(1, 20_000))
def test_deep_nesting_is_refused(opening: str, depth: int) -> None:
    _outcome(opening * depth)

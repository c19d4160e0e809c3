"""AlicloudCloud through the real aliyun SDK against the project's fake ECS endpoint,
which checks every request's HMAC-SHA1 signature."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from autoscaler.clouds.alicloud import AlicloudCloud, AlicloudSettings
from autoscaler.clouds.alicloud_api import Credentials, credentials_from_env, redact
from autoscaler.clouds.base import (
    CloudAuthError,
    CloudDataError,
    CloudUnreachableError,
    InstanceState,
    InterruptionKind,
    latest_spot,
)
from autoscaler.policy.models import Market
from autoscaler.sandbox.fakes.ecs import FakeEcsServer
from autoscaler.sandbox.hosts.procs import free_port
from tests.clouds.helpers import ECS_KEY_ID, ECS_SECRET, NOW, FakeClock
from tests.hostile_answers import AnswerServer, Reply

T4 = "ecs.gn6i-c4g1.xlarge"
V100X4 = "ecs.gn6v-c8g1.8xlarge"
OURS = {"managed-by": "gpu-autoscaler", "team": "research", "pool": "gn6-spot"}


def make_cloud(server: FakeEcsServer, clock: FakeClock | None = None,
               secret: str = ECS_SECRET, key_id: str = ECS_KEY_ID, **settings: object) -> AlicloudCloud:
    return AlicloudCloud("cn-hangzhou",
                         settings=AlicloudSettings(endpoint=server.endpoint, **settings),  # type: ignore[arg-type]
                         credentials=Credentials(key_id, secret), clock=clock or FakeClock())


def test_on_demand_price_is_the_instance_part_of_describe_price(ecs: FakeEcsServer) -> None:
    ecs.state.set_on_demand(T4, 1.10)
    prices = make_cloud(ecs).on_demand_prices([T4, "ecs.unknown-type"])
    # TradePrice of the whole order includes a system disk; the instanceType detail does not.
    assert prices == {T4: 1.10}


def test_spot_history_pages_by_offset_and_quotes_zones_without_history(ecs: FakeEcsServer) -> None:
    state = ecs.state
    state.history_page_size = 2
    for minutes, (h, i) in enumerate([(0.30, 0.26), (0.31, 0.25), (0.29, 0.27)]):
        at = NOW - timedelta(minutes=30 - 10 * minutes)
        state.set_spot(T4, "cn-hangzhou-h", h, at)
        state.set_spot(T4, "cn-hangzhou-i", i, at)
    state.set_spot(T4, "cn-hangzhou-k", 0.40, NOW - timedelta(days=2))  # too old for history
    state.zones.append("cn-hangzhou-k")
    clock = FakeClock(NOW)
    state.clock = clock
    cloud = make_cloud(ecs, clock)
    rows = cloud.spot_price_history([T4], zones=["cn-hangzhou-h", "cn-hangzhou-i", "cn-hangzhou-k"])
    assert state.count("DescribeSpotPriceHistory") == 3  # 6 rows, 2 per page
    latest = latest_spot(rows)
    assert latest[(T4, "cn-hangzhou-h")].usd_per_hour == pytest.approx(0.29)
    assert latest[(T4, "cn-hangzhou-i")].usd_per_hour == pytest.approx(0.27)
    # No history row in the window: DescribePrice with SpotStrategy=SpotAsPriceGo answers.
    assert latest[(T4, "cn-hangzhou-k")].usd_per_hour == pytest.approx(0.40)
    assert state.count("DescribePrice") == 1


def test_prices_are_cached_until_their_ttl(ecs: FakeEcsServer) -> None:
    ecs.state.set_on_demand(T4, 1.10)
    ecs.state.set_spot(T4, "cn-hangzhou-h", 0.3)
    clock = FakeClock()
    ecs.state.clock = clock
    cloud = make_cloud(ecs, clock, spot_ttl=timedelta(minutes=5), price_ttl=timedelta(minutes=10))
    for _ in range(3):
        cloud.on_demand_prices([T4])
        cloud.spot_price_history([T4])
    assert ecs.state.count("DescribePrice") == 1
    assert ecs.state.count("DescribeSpotPriceHistory") == 1
    clock.advance(timedelta(minutes=6))
    cloud.on_demand_prices([T4])
    cloud.spot_price_history([T4])
    assert ecs.state.count("DescribePrice") == 1
    assert ecs.state.count("DescribeSpotPriceHistory") == 2


def test_offerings_report_stock_per_zone(ecs: FakeEcsServer) -> None:
    ecs.state.set_stock(T4, "cn-hangzhou-h", "WithStock")
    ecs.state.set_stock(T4, "cn-hangzhou-i", "WithoutStock")
    ecs.state.set_stock(V100X4, "cn-hangzhou-i", "ClosedWithStock")
    cloud = make_cloud(ecs)
    got = {(o.instance_type, o.zone): (o.available, o.stock) for o in cloud.offerings([T4, V100X4])}
    assert got == {
        (T4, "cn-hangzhou-h"): (True, "WithStock"),
        (T4, "cn-hangzhou-i"): (False, "WithoutStock"),
        (V100X4, "cn-hangzhou-h"): (False, "NotOffered"),
        (V100X4, "cn-hangzhou-i"): (True, "ClosedWithStock"),
    }
    cloud.offerings([T4])
    assert ecs.state.count("DescribeAvailableResource") == 1  # one call per region, cached


def test_managed_instances_page_through_and_read_tags_locks_and_market(ecs: FakeEcsServer) -> None:
    state = ecs.state
    made = [state.add_instance(T4, "cn-hangzhou-h", {**OURS, "node": f"research-gn6-spot-{n}"},
                               spot_strategy="SpotAsPriceGo") for n in range(5)]
    state.add_instance(T4, "cn-hangzhou-h", {"owner": "someone-else"})
    stopped = state.add_instance(V100X4, "cn-hangzhou-i", {**OURS, "node": "research-gn6-spot-9"},
                                 status="Stopped")
    made[1].locks.append("Recycling")
    cloud = make_cloud(ecs, page_size=2)
    found = cloud.managed_instances()
    assert len(found) == 6 and state.count("DescribeInstances") == 3
    first = next(i for i in found if i.instance_id == made[0].instance_id)
    assert (first.node, first.team, first.pool) == ("research-gn6-spot-0", "research", "gn6-spot")
    assert first.market is Market.SPOT and first.zone == "cn-hangzhou-h"
    assert first.state is InstanceState.RUNNING and first.private_ip == made[0].private_ip
    assert first.launched_at == made[0].created_at.replace(second=0, microsecond=0)
    assert [i.recycling for i in found if i.instance_id == made[1].instance_id] == [True]
    running = cloud.managed_instances(states=[InstanceState.RUNNING])
    assert stopped.instance_id not in {i.instance_id for i in running} and len(running) == 5


def test_interruptions_from_events_and_recycling_locks(ecs: FakeEcsServer) -> None:
    state = ecs.state
    clock = FakeClock(NOW)
    state.clock = clock
    evented = state.add_instance(T4, "cn-hangzhou-h", {**OURS, "node": "a"}, spot_strategy="SpotAsPriceGo")
    locked = state.add_instance(T4, "cn-hangzhou-h", {**OURS, "node": "b"}, spot_strategy="SpotAsPriceGo")
    other = state.add_instance(T4, "cn-hangzhou-h", {"owner": "someone-else"})
    state.recycle(evented.instance_id)
    state.recycle(other.instance_id)
    locked.locks.append("Recycling")  # the lock can show before the event does
    clock.advance(timedelta(seconds=30))
    got = {i.instance_id: i for i in make_cloud(ecs, clock).interruptions()}
    assert set(got) == {evented.instance_id, locked.instance_id}
    assert got[evented.instance_id].kind is InterruptionKind.INTERRUPTION
    assert got[evented.instance_id].at == NOW
    assert got[evented.instance_id].deadline == NOW + timedelta(minutes=5)
    assert got[locked.instance_id].deadline is None
    assert got[locked.instance_id].at == NOW + timedelta(seconds=30)


def test_a_wrong_secret_is_refused_by_the_signature_check(
        ecs: FakeEcsServer, caplog: pytest.LogCaptureFixture) -> None:
    ecs.state.set_on_demand(T4, 1.10)
    with caplog.at_level(logging.DEBUG), pytest.raises(CloudAuthError) as err:
        make_cloud(ecs, secret="not-the-secret").on_demand_prices([T4])
    # The endpoint said SignatureDoesNotMatch; the SDK, seeing its own string to sign in the
    # message, reports InvalidAccessKeySecret. Either way: credentials, named variables.
    assert ecs.state.rejections == ["SignatureDoesNotMatch"]
    assert "ALIBABA_CLOUD_ACCESS_KEY_ID" in str(err.value)
    for text in [str(err.value), caplog.text]:
        assert ECS_KEY_ID not in text and "not-the-secret" not in text


def test_an_unknown_key_is_refused(ecs: FakeEcsServer) -> None:
    with pytest.raises(CloudAuthError, match=r"InvalidAccessKeyId\.NotFound"):
        make_cloud(ecs, key_id="LTAI-nobody").offerings([T4])
    assert ecs.state.rejections == ["InvalidAccessKeyId.NotFound"]


def test_credentials_come_from_either_set_of_variables() -> None:
    both = credentials_from_env({"ALICLOUD_ACCESS_KEY": "id2", "ALICLOUD_SECRET_KEY": "s2",
                                 "ALIBABA_CLOUD_ACCESS_KEY_ID": "id1",
                                 "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "s1"})
    assert (both.key_id, both.secret) == ("id1", "s1")
    legacy = credentials_from_env({"ALICLOUD_ACCESS_KEY": "id2", "ALICLOUD_SECRET_KEY": "s2"})
    assert (legacy.key_id, legacy.secret) == ("id2", "s2")
    assert "s2" not in repr(legacy)
    with pytest.raises(CloudAuthError, match="ALIBABA_CLOUD_ACCESS_KEY_SECRET"):
        credentials_from_env({"ALIBABA_CLOUD_ACCESS_KEY_ID": "only-the-id"})


def test_prices_in_another_currency_need_a_configured_rate(ecs: FakeEcsServer) -> None:
    ecs.state.currency = "CNY"
    ecs.state.set_on_demand(T4, 8.0)
    with pytest.raises(CloudDataError, match="CNY"):
        make_cloud(ecs).on_demand_prices([T4])
    converted = make_cloud(ecs, currency_rates={"USD": 1.0, "CNY": 0.14}).on_demand_prices([T4])
    assert converted == {T4: pytest.approx(1.12)}


def test_unreachable_endpoint_names_the_cause_without_the_key() -> None:
    port = free_port()
    cloud = AlicloudCloud("cn-hangzhou",
                          settings=AlicloudSettings(endpoint=f"http://127.0.0.1:{port}", max_retries=0),
                          credentials=Credentials(ECS_KEY_ID, ECS_SECRET))
    with pytest.raises(CloudUnreachableError, match="Connection refused") as err:
        cloud.offerings([T4])
    assert ECS_KEY_ID not in str(err.value)


def test_redact_hides_the_key_id_however_it_is_encoded() -> None:
    text = ("GET&%2F&AccessKeyId%3DLTAIabc%26Action%3DX ... /?AccessKeyId=LTAIabc&Signature=zz "
            "AccessKeyId%253DLTAIabc%2526")
    assert "LTAIabc" not in redact(text)
    assert redact("secret sauce", "sauce") == "secret ***"


def test_the_sdk_logger_never_prints_the_key_id(caplog: pytest.LogCaptureFixture) -> None:
    sdk_log = logging.getLogger("aliyunsdkcore.client")
    with caplog.at_level(logging.ERROR, logger="aliyunsdkcore.client"):
        sdk_log.error("ServerException: %s", "string to sign is:POST&%2F&AccessKeyId%3DLTAIabc%26")
    assert "LTAIabc" not in caplog.text and "AccessKeyId%3D***" in caplog.text


# -- hostile answers: a 127.0.0.1 server answers every call with the same body ---------------
def answering(server: AnswerServer, body: dict[str, Any] | bytes) -> AlicloudCloud:
    server.reply = Reply(200, body if isinstance(body, bytes) else json.dumps(body).encode())
    return AlicloudCloud("cn-hangzhou", settings=AlicloudSettings(endpoint=server.url, max_retries=0),
                         credentials=Credentials(ECS_KEY_ID, ECS_SECRET), clock=FakeClock())


def history(price: object, **page: object) -> dict[str, Any]:
    return {"Currency": "USD", **page, "SpotPrices": {"SpotPriceType": [
        {"InstanceType": T4, "ZoneId": "cn-hangzhou-i", "SpotPrice": price,
         "Timestamp": "2026-11-30T12:00:00Z"}]}}


INSTANCE = {"InstanceId": "i-abc", "Status": "Running"}
EVENT = {"InstanceId": "i-abc", "EventType": {"Name": "Instance:PreemptibleInstanceInterruption"},
         "EventPublishTime": "2026-11-30T12:00:00Z"}


@pytest.mark.parametrize(("body", "call", "message"), [
    (history(0.3, NextOffset="x"), "spot", "ECS DescribeSpotPriceHistory in cn-hangzhou: "
     "NextOffset 'x' is not a count"),
    (history(0.3, NextOffset=[1]), "spot", "ECS DescribeSpotPriceHistory in cn-hangzhou: "
     "NextOffset [1] is not a count"),
    (history(0.3, NextOffset=-1), "spot", "ECS DescribeSpotPriceHistory in cn-hangzhou: "
     "NextOffset -1 is not a count"),
    ({"Instances": {"Instance": [INSTANCE]}, "TotalCount": "many"}, "instances",
     "ECS DescribeInstances in cn-hangzhou: TotalCount 'many' is not a count"),
    ({"Instances": {"Instance": [INSTANCE]}, "TotalCount": True}, "instances",
     "ECS DescribeInstances in cn-hangzhou: TotalCount True is not a count"),
    ({"Instances": [INSTANCE], "TotalCount": 1}, "instances",
     "ECS DescribeInstances in cn-hangzhou: Instances is not an object"),
    ({"Instances": {"Instance": {"a": 1}}, "TotalCount": 1}, "instances",
     "ECS DescribeInstances in cn-hangzhou: Instances.Instance is not a list"),
    ({"InstanceSystemEventSet": {"InstanceSystemEventType": [EVENT]}, "TotalCount": {}}, "events",
     "ECS DescribeInstanceHistoryEvents in cn-hangzhou: TotalCount {} is not a count"),
    ({"InstanceSystemEventSet": "x", "TotalCount": 1}, "events",
     "ECS DescribeInstanceHistoryEvents in cn-hangzhou: InstanceSystemEventSet is not an object"),
    # ECS always sends the wrapper: without it the answer is no evidence that none are left.
    ({"TotalCount": 0, "RequestId": "r"}, "instances",
     "ECS DescribeInstances in cn-hangzhou: the answer has no Instances"),
], ids=["next-offset-text", "next-offset-list", "next-offset-negative", "total-count-text",
        "total-count-bool", "instances-list", "instance-not-list", "total-count-object",
        "event-set-text", "no-instances-key"])
def test_page_counters_and_shapes_that_are_not_ecs_are_a_cloud_data_error(
        answers: AnswerServer, body: dict[str, Any] | bytes, call: str, message: str) -> None:
    cloud = answering(answers, body)
    calls = {"spot": lambda: cloud.spot_price_history([T4]), "instances": cloud.managed_instances,
             "events": cloud.interruption_events}
    with pytest.raises(CloudDataError) as err:
        calls[call]()
    assert str(err.value) == message


DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.exhausts_stack
@pytest.mark.parametrize(("status", "body", "error"), [
    (200, DEEP, "RecursionError"), (500, DEEP, "RecursionError"),
    (200, b"{" + b'"a":{' * 100_000 + b"}" * 100_001, "RecursionError"),
    (500, b"5", "TypeError"), (503, bytes(range(256)), "UnicodeDecodeError"),
], ids=["deep-arrays", "deep-arrays-500", "deep-objects", "error-a-number", "error-not-utf8"])
def test_an_answer_the_sdk_cannot_read_is_a_cloud_data_error(
        answers: AnswerServer, status: int, body: bytes, error: str) -> None:
    cloud = answering(answers, body)
    answers.reply = Reply(status, body)
    with pytest.raises(CloudDataError) as err:
        cloud.managed_instances()
    host = answers.url.removeprefix("http://")
    assert str(err.value) == (f"ECS DescribeInstances: {host} answered something that is not an "
                              f"ECS response ({error})")


@pytest.mark.exhausts_stack
def test_json_nested_too_deeply_past_the_sdk_is_a_cloud_data_error(answers: AnswerServer) -> None:
    # The SDK decodes the body too, first; a client that does not is read the same way.
    cloud = answering(answers, b"{}")

    class Client:
        def do_action_with_exception(self, request: object) -> bytes:
            return DEEP
    cloud.api._client = Client()  # type: ignore[assignment]
    with pytest.raises(CloudDataError) as err:
        cloud.managed_instances()
    assert str(err.value) == "ECS DescribeInstances: answer is JSON nested too deeply to read"


@pytest.mark.parametrize("price", [-3, 0, "NaN", "Infinity", "-Infinity", "nan", 1e400])
def test_a_spot_history_row_without_a_finite_price_above_zero_is_dropped(
        answers: AnswerServer, price: object, caplog: pytest.LogCaptureFixture) -> None:
    body = history(price)
    body["SpotPrices"]["SpotPriceType"].append(
        {**body["SpotPrices"]["SpotPriceType"][0], "ZoneId": "cn-hangzhou-h", "SpotPrice": 0.31})
    cloud = answering(answers, body)
    with caplog.at_level(logging.WARNING, logger="autoscaler.clouds.alicloud"):
        got = cloud.spot_price_history([T4])
    assert [(p.zone, p.usd_per_hour) for p in got] == [("cn-hangzhou-h", 0.31)]
    assert [r.getMessage() for r in caplog.records] == [
        f"alicloud cn-hangzhou: dropped 1 spot price row(s) for {T4}: not a finite price above 0"]


def describe_price(trade: object) -> dict[str, Any]:
    return {"PriceInfo": {"Price": {"Currency": "USD", "TradePrice": trade}}}


@pytest.mark.parametrize(("trade", "shown"), [
    (-1, "-1.0"), ("nan", "nan"), ("NaN", "nan"), ("Infinity", "inf"), (1e400, "inf")])
def test_a_describe_price_that_is_not_a_price_is_a_cloud_data_error(
        answers: AnswerServer, trade: object, shown: str) -> None:
    with pytest.raises(CloudDataError) as err:
        answering(answers, describe_price(trade)).on_demand_prices([T4])
    assert str(err.value) == (f"ECS DescribePrice in cn-hangzhou: {shown} for {T4} is not a price "
                              "(finite, at least 0)")
    # A spot quote of 0 too: the engine would take it for free capacity.
    with pytest.raises(CloudDataError, match=r"0\.0 for .* is not a price \(finite, above 0\)$"):
        answering(answers, describe_price(0)).spot_quote(T4, "cn-hangzhou-i")
    assert answering(answers, describe_price(0)).on_demand_prices([T4]) == {T4: 0.0}


def events(**event: object) -> dict[str, Any]:
    return {"InstanceSystemEventSet": {"InstanceSystemEventType": [{**EVENT, **event}]}, "TotalCount": 1}


@pytest.mark.parametrize("not_before", [
    "1970-01-01T00:00:00Z", "0001-01-01T00:00:00Z", "2026-11-30T11:59:00Z", "not a time", 12345,
    ["2026-11-30T12:05:00Z"], "2026-11-30T12:05:00Z" + "0" * 100,
], ids=["1970", "year-1", "before-publication", "text", "number", "list", "long"])
def test_a_not_before_that_is_not_a_coming_reclaim_is_no_deadline(
        answers: AnswerServer, not_before: object) -> None:
    """Believed, a past NotBefore terminates the node at once, without its checkpoint drain;
    without a deadline the configured interruption_drain_deadline applies."""
    [got] = answering(answers, events(NotBefore=not_before)).interruption_events()
    assert (got.instance_id, got.at, got.deadline) == ("i-abc", NOW, None)


@pytest.mark.parametrize(("published", "not_before", "deadline"), [
    ("2026-11-30T12:00:00Z", "2026-11-30T12:05:00Z", NOW + timedelta(minutes=5)),
    ("2026-11-30T11:50:00Z", "2026-11-30T11:57:00Z", NOW - timedelta(minutes=3)),  # clock skew
    ("2026-11-30T12:00:00Z", "2026-11-30T12:05Z", NOW + timedelta(minutes=5)),  # to the minute
], ids=["five-minutes", "within-skew", "minutes-only"])
def test_a_not_before_after_publication_is_the_deadline(
        answers: AnswerServer, published: str, not_before: str, deadline: object) -> None:
    [got] = answering(answers, events(EventPublishTime=published, NotBefore=not_before)).interruption_events()
    assert got.deadline == deadline


@pytest.mark.parametrize("published", [
    "1970-01-01T00:00:00Z", "9999-01-01T00:00:00Z", "2026-11-14T12:00:00Z", "2026-11-30T12:06:00Z",
    "soon", 0, None,
], ids=["1970", "9999", "16-days-ago", "6-min-ahead", "text", "number", "null"])
def test_an_implausible_publication_time_is_read_as_now_and_the_notice_kept(
        answers: AnswerServer, published: object) -> None:
    """The event is the cloud's own answer: its time is dropped, never the notice."""
    [got] = answering(answers, events(EventPublishTime=published,
                                      NotBefore="2026-11-30T12:05:00Z")).interruption_events()
    assert (got.at, got.deadline) == (NOW, NOW + timedelta(minutes=5))


def test_an_event_s_problem_is_logged_once_while_the_event_lasts(
        answers: AnswerServer, caplog: pytest.LogCaptureFixture) -> None:
    """The same event is read every poll until the reclaim: one warning, not one a poll; a
    new problem (another value) is said again, and so is one that comes back."""
    cloud = answering(answers, events(EventPublishTime="soon", NotBefore="later"))
    with caplog.at_level(logging.WARNING, logger="autoscaler.clouds.alicloud"):
        for _ in range(3):
            cloud.interruption_events()
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 2
        assert "EventPublishTime 'soon' is not a time" in said[0]
        assert "NotBefore 'later' is not a coming reclaim time" in said[1]
        answers.reply = Reply(200, json.dumps(events(EventPublishTime="soon")).encode())
        cloud.interruption_events()
        assert len(caplog.records) == 2  # the same publication problem: still said once
        answers.reply = Reply(200, json.dumps(events()).encode())
        cloud.interruption_events()
        answers.reply = Reply(200, json.dumps(events(EventPublishTime="soon")).encode())
        cloud.interruption_events()
        assert len(caplog.records) == 3  # gone, then back: said again


@pytest.mark.parametrize(("created", "launched"), [
    ("2017-12-10T04:04Z", datetime(2017, 12, 10, 4, 4, tzinfo=UTC)),
    ("1970-01-01T00:00:00Z", datetime(1970, 1, 1, tzinfo=UTC)),  # bounded by the adopter
    ("yesterday", None), (12345, None), (["2017-12-10T04:04Z"], None), ("", None),
], ids=["minutes-only", "1970", "text", "number", "list", "empty"])
def test_a_creation_time_is_an_aware_time_or_none(
        answers: AnswerServer, created: object, launched: object) -> None:
    body = {"Instances": {"Instance": [{**INSTANCE, "CreationTime": created}]}, "TotalCount": 1}
    [got] = answering(answers, body).managed_instances()
    assert got.instance_id == "i-abc" and got.launched_at == launched

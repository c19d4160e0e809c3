"""Spot interruptions: EventBridge events on a (moto) SQS queue -> INTERRUPTED -> fast drain
-> the engine's replacement launch -> the interrupted node destroyed."""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from autoscaler.clouds.alicloud import AlicloudCloud, AlicloudSettings
from autoscaler.clouds.alicloud_api import Credentials
from autoscaler.clouds.aws import AwsCloud, AwsSettings
from autoscaler.clouds.aws_queue import SqsInterruptionQueue
from autoscaler.clouds.base import Interruption, InterruptionKind
from autoscaler.engine import decide
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.plan import Launch
from autoscaler.model.snapshot import Snapshot
from autoscaler.policy.models import Market
from autoscaler.service.control.interruptions import (
    InterruptionIntake,
    NoticeLoop,
    PollingSource,
    sources_for,
)
from autoscaler.service.executor import ExecutorSettings
from autoscaler.service.observe.metrics import ServiceMetrics
from tests.builders import busy
from tests.clouds.helpers import (  # noqa: F401 (fixtures)
    AWS_TEST_ENV,
    ECS_KEY_ID,
    ECS_SECRET,
    moto,
    moto_url,
    rebalance,
    spot_warning,
)
from tests.service.executor_rig import Rig, make_rig, slurm_policy
from tests.trickle import trickling

S = NodeState


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = make_rig(tmp_path, policies={"vision": slurm_policy(
        capacity={"on_demand_base": 0, "spot_percent": 100, "on_interruption": "on-demand"})})
    yield r
    r.store.close()


@pytest.fixture
def queue(moto: str, rig: Rig) -> tuple[Any, SqsInterruptionQueue]:  # noqa: F811
    sqs = boto3.client("sqs", region_name="us-east-1", endpoint_url=moto)
    url = sqs.create_queue(QueueName="interruptions",
                           Attributes={"VisibilityTimeout": "0"})["QueueUrl"]
    cloud = AwsCloud("us-east-1", clock=rig.clock,
                     settings=AwsSettings(endpoint_url=moto, queue_url=url))
    [source] = sources_for([cloud])
    assert isinstance(source, SqsInterruptionQueue)
    return sqs, source


def pending_messages(sqs: Any, source: SqsInterruptionQueue) -> int:
    attrs = sqs.get_queue_attributes(QueueUrl=source.queue_url, AttributeNames=[
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    return sum(int(v) for v in attrs.values())


def test_spot_warning_to_replacement_to_destroyed(rig: Rig, queue: tuple[Any, SqsInterruptionQueue]) -> None:
    sqs, source = queue
    [name] = rig.ready_nodes(market=Market.SPOT)
    instance = rig.node(name).instance_id or ""
    rig.slurm.scheduler.run(name, "4242")
    sqs.send_message(QueueUrl=source.queue_url, MessageBody=spot_warning(instance))

    report = rig.reconciler(sources=[source]).run()
    assert report.interruptions["interrupted"] == [name]
    node = rig.node(name)
    notice = rig.store.meta(name)["interruption"]
    assert node.state is S.INTERRUPTED and notice["deadline"].startswith("2026-11-30T12:02:00")
    assert pending_messages(sqs, source) == 0  # acked after the store had it

    snap = rig_snapshot(rig, name)
    plan = decide(rig.policies, rig.store.fleet_view(), snap, rig.clock())
    [launch] = [a for a in plan.actions if isinstance(a, Launch)]
    assert (launch.trigger, launch.replaces, launch.market) == ("interruption", [name], Market.ON_DEMAND)
    [new] = rig.executor().submit(plan)
    assert rig.node(name).replacement_requested and rig.store.meta(new)["replaces"] == name
    again = decide(rig.policies, rig.store.fleet_view(), snap, rig.clock())
    assert not [a for a in again.actions if isinstance(a, Launch)]  # one replacement only

    rig.advance()  # drained at once, checkpoint signal first; the replacement is provisioned
    assert name in rig.slurm.scheduler.cordoned and rig.state(new) is S.BOOTSTRAPPING
    assert any(c[:2] == ("checkpoint", name) for c in rig.slurm.calls)
    assert rig.state(name) is S.INTERRUPTED
    rig.clock.tick(31)  # grace over: requeue, drained, destroyed
    moved = rig.advance().moved(S.TERMINATED)
    rig.clock.tick(10)
    moved += rig.advance().moved(S.TERMINATED)
    assert moved == [name]
    assert rig.cloud.instances[instance].state == "terminated"
    rig.slurm.scheduler.join(new)
    rig.advance()
    assert rig.state(new) is S.READY and rig.node(new).market is Market.ON_DEMAND


def rig_snapshot(rig: Rig, name: str) -> Snapshot:
    return Snapshot(taken_at=rig.clock(), nodes={name: busy()})


def test_notice_is_recorded_before_it_is_acked(rig: Rig, queue: tuple[Any, SqsInterruptionQueue]) -> None:
    sqs, source = queue
    [name] = rig.ready_nodes(market=Market.SPOT)
    sqs.send_message(QueueUrl=source.queue_url, MessageBody=spot_warning(rig.node(name).instance_id or ""))

    class CrashOnAck:
        def batches(self):  # type: ignore[no-untyped-def]
            return source.batches()

        def ack(self, receipts):  # type: ignore[no-untyped-def]
            raise KeyboardInterrupt("crash between record and ack")

    with pytest.raises(KeyboardInterrupt):
        rig.reconciler(sources=[CrashOnAck()]).run()
    assert rig.state(name) is S.INTERRUPTED and pending_messages(sqs, source) == 1
    report = rig.reconciler(sources=[source]).run()  # redelivered: no second move
    assert report.interruptions["ignored"] == [name] and report.changes == []
    assert pending_messages(sqs, source) == 0
    assert [t.to_state for t in rig.store.transitions(name)].count("INTERRUPTED") == 1


@pytest.mark.parametrize(("mode", "state", "trigger"), [
    ("interrupt", S.INTERRUPTED, None), ("drain", S.DRAINING, "rebalance"), ("ignore", S.READY, None)])
def test_rebalance_recommendation_per_settings(rig: Rig, queue: tuple[Any, SqsInterruptionQueue],
                                               mode: str, state: NodeState, trigger: str | None) -> None:
    sqs, source = queue
    rig.settings = ExecutorSettings(on_rebalance=mode)  # type: ignore[arg-type]
    [name] = rig.ready_nodes(market=Market.SPOT)
    sqs.send_message(QueueUrl=source.queue_url, MessageBody=rebalance(rig.node(name).instance_id or ""))
    rig.reconciler(sources=[source]).run()
    node = rig.node(name)
    assert node.state is state and node.drain_trigger == trigger
    assert [a.event for a in rig.store.audit_log()] == ["interruption"]
    if mode == "drain":  # a normal drain: the pool's timeout, not the short one
        progress = rig.store.meta(name)["drain"]
        assert progress["deadline"].startswith("2026-11-30T12:10:00")


@pytest.mark.parametrize(("mode", "state"), [("interrupt", S.INTERRUPTED), ("drain", S.DRAINING)])
def test_a_burst_of_rebalance_advice_moves_only_the_pools_draining_budget(
        rig: Rig, mode: str, state: NodeState) -> None:
    """Advice, not a reclaim: 10 recommendations in a pool of 10 drained all 10 at once.
    max_draining_percent 20 lets 2 go; a warning (the cloud reclaiming) is never held."""
    rig.settings = ExecutorSettings(on_rebalance=mode)  # type: ignore[arg-type]
    names = rig.ready_nodes(10, market=Market.SPOT)
    ids = {name: rig.node(name).instance_id or "" for name in names}
    at = rig.clock()
    rig.cloud.notices = [Interruption(ids[n], InterruptionKind.REBALANCE, at, None, "aws.ec2")
                         for n in names]
    [source] = sources_for([rig.cloud])
    report = rig.reconciler(sources=[source]).run().interruptions
    moved = report["interrupted"] + report["drained"]
    assert len(moved) == 2 and len(report["held"]) == 8
    assert sorted(n for n in names if rig.node(n).state is state) == sorted(moved)
    assert all(rig.node(n).state is S.READY for n in report["held"])
    held = report["held"][0]
    rig.cloud.notices = [Interruption(ids[held], InterruptionKind.INTERRUPTION, at,
                                      at + timedelta(minutes=2), "aws.ec2")]
    assert rig.reconciler(sources=[source]).run().interruptions["interrupted"] == [held]


def test_unknown_instances_and_polled_sources(rig: Rig) -> None:
    [name] = rig.ready_nodes(market=Market.SPOT)
    at = rig.clock()
    rig.cloud.notices = [
        Interruption("i-0123456789abcdef0", InterruptionKind.INTERRUPTION, at, None, "alicloud"),
        Interruption(rig.node(name).instance_id or "", InterruptionKind.INTERRUPTION, at,
                     at + timedelta(seconds=20), "alicloud:Recycling"),
    ]
    [source] = sources_for([rig.cloud])
    assert isinstance(source, PollingSource)
    report = rig.reconciler(sources=[source]).run()
    assert report.interruptions["unknown"] == ["i-0123456789abcdef0"]
    assert report.interruptions["interrupted"] == [name]
    # The notice's own deadline (20 s) leaves no time: checkpoint at once.
    assert rig.store.meta(name)["drain"]["deadline"].startswith("2026-11-30T12:00:00")
    rig.clock.tick(21)
    assert rig.advance().moved(S.TERMINATING) == [name]


# -- hostile queues (issue 30) -------------------------------------------------------------
def forged_warning(instance: str, **changes: str) -> str:
    return json.dumps({**json.loads(spot_warning(instance)), **changes})


def notice_loop(rig: Rig, source: SqsInterruptionQueue, **intake_kw: Any) -> NoticeLoop:
    intake = InterruptionIntake(rig.store, [source], rig.settings, rig.clock,
                                lambda: rig.policies, **intake_kw)
    return NoticeLoop(intake, rig.executor().drain_now, lambda: True,
                      lambda counts, texts: None, ServiceMetrics())


def rejected_metric(loop: NoticeLoop, reason: str) -> float:
    assert loop.metrics is not None
    value = loop.metrics.registry.get_sample_value("gpu_autoscaler_notices_rejected_total",
                                                   {"reason": reason})
    return value or 0.0


def test_poison_forged_and_genuine_notice_in_one_receive(
        rig: Rig, queue: tuple[Any, SqsInterruptionQueue], caplog: pytest.LogCaptureFixture) -> None:
    sqs, source = queue
    genuine, target = rig.ready_nodes(2, market=Market.SPOT)
    rig.slurm.scheduler.run(genuine, "4242")  # it stays INTERRUPTED through the grace
    target_id = rig.node(target).instance_id or ""
    for body in ("[" * 100_000, forged_warning(target_id, account="666666666666"),
                 spot_warning(rig.node(genuine).instance_id or "")):
        sqs.send_message(QueueUrl=source.queue_url, MessageBody=body)
    loop = notice_loop(rig, source)

    started = time.monotonic()
    with caplog.at_level(logging.INFO):
        report = loop.run_once()
    took = time.monotonic() - started

    assert report.interrupted == [genuine] and rig.state(genuine) is S.INTERRUPTED
    assert took < rig.settings.notice_interval.total_seconds()  # one pass, within the interval
    assert genuine in rig.slurm.scheduler.cordoned  # its drain started in the same pass
    assert rig.state(target) is S.READY and target not in rig.slurm.scheduler.cordoned
    assert [a.node for a in rig.store.audit_log() if a.event == "interruption"] == [genuine]
    assert pending_messages(sqs, source) == 0  # the poison message is gone, not redelivered
    assert report.rejected == {"malformed": 1, "forged": 1} and not report.errors
    assert (rejected_metric(loop, "malformed"), rejected_metric(loop, "forged")) == (1, 1)
    refusals = [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused")]
    assert len(refusals) == 2 and all(len(m) < 500 for m in refusals)
    assert not any(r.exc_info for r in caplog.records)
    assert loop.run_once().rejected == {}  # logged and counted once: nothing comes back


def test_our_instance_id_named_from_another_region_is_not_obeyed(
        rig: Rig, moto: str) -> None:  # noqa: F811
    [name] = rig.ready_nodes(market=Market.SPOT)
    sqs = boto3.client("sqs", region_name="us-east-1", endpoint_url=moto)
    url = sqs.create_queue(QueueName="interruptions")["QueueUrl"]
    cloud = AwsCloud("us-east-1", clock=rig.clock, settings=AwsSettings(
        endpoint_url=moto, queue_url=url, notice_regions=frozenset({"us-east-1", "us-west-2"})))
    [source] = sources_for([cloud])
    assert isinstance(source, SqsInterruptionQueue)
    sqs.send_message(QueueUrl=url, MessageBody=forged_warning(
        rig.node(name).instance_id or "", region="us-west-2"))
    loop = notice_loop(rig, source)
    report = loop.run_once()
    assert report.rejected == {"wrong-region": 1} and report.interrupted == []
    assert rig.state(name) is S.READY and rejected_metric(loop, "wrong-region") == 1


def junk(i: int) -> str:
    """Three kinds of message that must not be obeyed: malformed, forged, not our node."""
    if i % 3 == 0:
        return "{" * (i % 500 + 1) + "junk"
    if i % 3 == 1:
        return forged_warning(f"i-{i:017x}", source="my.app")
    return spot_warning(f"i-{i + 10**6:017x}")


def send_all(sqs: Any, url: str, bodies: list[str]) -> None:
    for start in range(0, len(bodies), 10):
        sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "MessageBody": b} for i, b in enumerate(bodies[start:start + 10])])


def interrupted(rig: Rig, name: str) -> bool:
    return "INTERRUPTED" in [t.to_state for t in rig.store.transitions(name)]


def passes_until_interrupted(rig: Rig, loop: NoticeLoop, name: str, bound: int) -> int:
    for n in range(1, bound + 2):
        loop.run_once()
        if interrupted(rig, name):
            return n
    return bound + 1


def test_a_notice_behind_others_is_applied_within_the_receive_bound(
        rig: Rig, queue: tuple[Any, SqsInterruptionQueue]) -> None:
    """60 others and the notice, 2 receives (20 messages) a pass: ceil(61 / 20) = 4 passes."""
    sqs, source = queue
    [name] = rig.ready_nodes(market=Market.SPOT)
    send_all(sqs, source.queue_url, [junk(i) for i in range(60)]
             + [spot_warning(rig.node(name).instance_id or "")])
    loop = notice_loop(rig, source, max_receives=2)
    assert passes_until_interrupted(rig, loop, name, 4) <= 4
    assert pending_messages(sqs, source) == 0


def test_the_read_budget_ends_a_pass_after_its_batch(
        rig: Rig, queue: tuple[Any, SqsInterruptionQueue]) -> None:
    """A budget spent by the first receive: one batch (10 messages) a pass, each acted on."""
    sqs, source = queue
    [name] = rig.ready_nodes(market=Market.SPOT)
    send_all(sqs, source.queue_url, [junk(i) for i in range(15)]
             + [spot_warning(rig.node(name).instance_id or "")])
    ticks = itertools.count(0, 10.0)  # every reading of the timer is 10 s later
    loop = notice_loop(rig, source, timer=lambda: next(ticks))
    first = loop.run_once()
    assert first.unfinished == ["SqsInterruptionQueue"] and sum(first.rejected.values()) == 10
    assert not interrupted(rig, name)
    assert passes_until_interrupted(rig, loop, name, 1) == 1


def poll_twice(rig: Rig, source: Any, limit: float) -> tuple[list[str], list[str]]:
    """Two polls of ``source``: the first within ``limit`` (and some slack), the second at once."""
    intake = InterruptionIntake(rig.store, [source], rig.settings, rig.clock, lambda: rig.policies)
    started = time.monotonic()
    first = intake.poll()
    assert time.monotonic() - started < limit + 1.5
    started = time.monotonic()
    second = intake.poll()
    assert time.monotonic() - started < 0.5
    return first.errors, second.errors


@pytest.mark.timeout(30)
def test_a_queue_that_trickles_its_answer_is_the_polls_error_within_the_call_limit(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore bounds each socket read, not the answer: a receive that overruns its limit
    (the long poll's wait included) is the poll's error, and the next poll fails at once
    while that receive still runs."""
    for key, value in AWS_TEST_ENV.items():
        monkeypatch.setenv(key, value)
    with trickling() as trickle:
        cloud = AwsCloud("us-east-1", clock=rig.clock, settings=AwsSettings(
            endpoint_url=trickle.url, queue_url=f"{trickle.url}/123456789012/interruptions",
            account_id="123456789012", connect_timeout=0.5, read_timeout=0.5, max_attempts=1))
        [source] = sources_for([cloud])
        cloud._client("sqs")  # built beforehand: loading botocore's models is not the call
        assert cloud.call_limit("sqs") == 0.5 + 1 + 2 * 0.5  # connect, the long poll, reads
        first, second = poll_twice(rig, source, 2.5)
        assert first == ["SqsInterruptionQueue: sqs receive_message: did not finish its answer "
                         "within 2.5s"]
        assert second == ["SqsInterruptionQueue: sqs receive_message: an earlier call that "
                          "overran its time still runs: nothing sent"]
        assert trickle.requests == 1


@pytest.mark.timeout(30)
def test_a_polled_cloud_that_trickles_its_answer_is_the_polls_error_within_the_call_limit(
        rig: Rig) -> None:
    """The same for Alibaba Cloud, whose notices are polled (the SDK bounds each read too)."""
    with trickling() as trickle:
        cloud = AlicloudCloud("cn-hangzhou", credentials=Credentials(ECS_KEY_ID, ECS_SECRET),
                              settings=AlicloudSettings(endpoint=trickle.url, connect_timeout=0.5,
                                                        read_timeout=0.5, max_retries=0))
        [source] = sources_for([cloud])
        assert cloud.api.limit == 1.5
        first, second = poll_twice(rig, source, 1.5)
        where = trickle.url.removeprefix("http://")
        [error] = first
        assert error.startswith("PollingSource: ECS ")
        assert error.endswith(f"{where} did not finish its answer within 1.5s")
        [error] = second
        assert error.endswith("is still sending the answer to a call that overran its time: "
                              "nothing sent")
        assert trickle.requests == 1

"""Spot interruptions: EventBridge events on a (moto) SQS queue -> INTERRUPTED -> fast drain
-> the engine's replacement launch -> the interrupted node destroyed."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from autoscaler.clouds.aws import AwsCloud, AwsSettings
from autoscaler.clouds.aws_queue import SqsInterruptionQueue
from autoscaler.clouds.base import Interruption, InterruptionKind
from autoscaler.engine import decide
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.plan import Launch
from autoscaler.model.snapshot import Snapshot
from autoscaler.policy.models import Market
from autoscaler.service.control.interruptions import PollingSource, sources_for
from autoscaler.service.executor import ExecutorSettings
from tests.builders import busy
from tests.clouds.helpers import moto, moto_url, rebalance, spot_warning  # noqa: F401 (fixtures)
from tests.service.executor_rig import Rig, make_rig, slurm_policy

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

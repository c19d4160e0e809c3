"""A leaving node is TERMINATED only when neither the state nor the cloud holds an instance
for it: the store never forgets an instance that may still be billed (fakes; the real
Terraform case, where a half-failed apply leaves its outputs stale, is in
test_orphan_terraform.py)."""

from __future__ import annotations

from autoscaler.actuators.node_map import NodeMap, NodeSpec
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.pool import PoolRef
from autoscaler.policy.models import Market
from tests.fleet.writes import transition
from tests.service.executor_rig import Rig, launch

S = NodeState
REF = PoolRef("vision", "gpu", "aws", "us-east-1")
SPEC = NodeSpec(instance_type="p3.2xlarge", market=Market.ON_DEMAND)


def test_an_instance_the_state_lost_is_destroyed_before_its_node_is_terminated(rig: Rig) -> None:
    [name] = rig.submit(launch(1))
    # An apply killed between RunInstances and saving the state: the cloud runs an
    # instance for the node that the state never heard of. Then the launch is cancelled.
    lost = rig.cloud.launch(REF, name, SPEC)
    transition(rig.store, name, S.TERMINATING, rig.clock(), "cancelled before its apply")
    rig.advance()
    node = rig.node(name)
    assert node.state is S.TERMINATING, "terminated while the cloud still ran its instance"
    assert node.instance_id == lost.instance_id, "the store lost track of the instance"
    destroys = [c for c in rig.tf.calls if c[0] == "apply" and c[2]["destroy"]]
    assert destroys == [("apply", REF.key, {"nodes": {}, "destroy": [lost.instance_id]})]
    assert rig.cloud.live() == []
    rig.clock.tick()
    rig.advance()
    assert rig.state(name) is S.TERMINATED
    assert lost.instance_id in rig.node(name).reason


def test_no_cloud_answer_is_no_evidence_that_the_instance_is_gone(rig: Rig) -> None:
    [name] = rig.submit(launch(1))
    transition(rig.store, name, S.TERMINATING, rig.clock(), "cancelled")
    rig.cloud.next_error = RuntimeError("DescribeInstances: throttled")
    report = rig.advance()
    assert rig.state(name) is S.TERMINATING
    assert any("not marked TERMINATED" in e for e in report.errors), report.errors
    rig.clock.tick()
    rig.advance()
    assert rig.state(name) is S.TERMINATED


def test_a_node_cancelled_while_its_apply_runs_keeps_its_instance_id(rig: Rig) -> None:
    [name] = rig.submit(launch(1))

    def cancel_meanwhile(ref: PoolRef, nodes: NodeMap) -> None:
        if name in nodes:  # the engine cancels the launch while the apply is in flight
            transition(rig.store, name, S.TERMINATING, rig.clock(), "demand gone")

    rig.tf.on_apply = cancel_meanwhile
    rig.advance()
    node = rig.node(name)
    [inst] = rig.cloud.live()
    assert (node.state, node.instance_id) == (S.TERMINATING, inst.instance_id)
    rig.tf.on_apply = None
    rig.clock.tick()
    rig.advance()
    assert rig.state(name) is S.TERMINATED and rig.cloud.live() == []
    assert inst.instance_id in rig.node(name).reason

"""The periodic GPU health check of READY nodes (health.check_interval), with fakes: checked
every interval, a failed check recorded and handed to the engine as the node's
health_check_failed (a Replace), an unreachable node given no verdict. The playbook itself
on a booted host: tests/playbooks/test_gpu_node.py."""

from __future__ import annotations

from autoscaler.actuators.ansible import HostStatus
from autoscaler.catalog import default_catalog
from autoscaler.engine import decide
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.plan import Replace
from autoscaler.model.snapshot import NodeObservation
from autoscaler.model.snapshot_parts import assemble
from autoscaler.signals.config import SignalsConfig
from autoscaler.signals.prometheus import MetricsReading
from autoscaler.signals.reader import SignalReader
from tests.service.executor_rig import Rig, slurm_policy
from tests.signals.test_snapshot import IDLE, FakeMetrics

S = NodeState
HOT = (HostStatus.FAILED, "Check GPU temperatures", "GPU health check failed: GPU 0 above 87 C")


def every_10m(rig: Rig) -> None:
    rig.policies = {"vision": slurm_policy(health={"check_interval": "10m"})}


def test_ready_nodes_are_checked_every_interval_and_not_before(rig: Rig) -> None:
    every_10m(rig)
    names = rig.ready_nodes(2)
    rig.advance()
    assert rig.ansible.health_calls == []  # READY just now: the first check is due in 10m
    rig.clock.tick(10 * 60)
    rig.advance()
    assert rig.ansible.health_calls == [names]  # one run for the pool's READY nodes
    health = rig.node(names[0]).progress.health
    assert health.checked_at == rig.clock() and health.failed is None and health.last_error is None
    rig.clock.tick(5 * 60)
    rig.advance()
    assert len(rig.ansible.health_calls) == 1
    rig.clock.tick(5 * 60)
    rig.advance()
    assert rig.ansible.health_calls == [names, names]
    assert all(rig.state(n) is S.READY for n in names)


def test_no_interval_no_check(rig: Rig) -> None:
    rig.ready_nodes(1)
    rig.clock.tick(24 * 3600)
    rig.advance()
    assert rig.ansible.health_calls == []


def test_a_failed_check_reaches_the_engine_as_a_replace(rig: Rig) -> None:
    every_10m(rig)
    good, bad = rig.ready_nodes(2)
    rig.ansible.health_fail[bad] = HOT
    rig.clock.tick(10 * 60)
    rig.advance()
    failed = rig.node(bad).progress.health.failed
    assert failed is not None and failed.startswith("GPU health check failed: GPU 0 above 87 C at "
                                                    "task 'Check GPU temperatures'")
    assert rig.node(good).progress.health.failed is None
    assert any(a.event == "health-check-failed" and a.detail.startswith(f"{bad}: GPU health")
               for a in rig.store.audit_log(50))
    rig.clock.tick(10 * 60)
    rig.advance()
    assert rig.ansible.health_calls[-1] == [good]  # a failed node is not checked again

    # The signal reader hands it to the engine, even with its metrics missing.
    metrics = MetricsReading({good: NodeObservation(metrics=IDLE)}, queries=1)
    reader = SignalReader(SignalsConfig(scheduler=[]), default_catalog(), prometheus=FakeMetrics(metrics))
    fleet = rig.store.fleet_view()
    observed = reader.read(rig.policies, fleet.nodes, rig.clock())
    assert observed.nodes[bad].health_check_failed == failed
    assert observed.nodes[good].health_check_failed is None
    plan = decide(rig.policies, fleet, assemble(observed), rig.clock(), catalog=default_catalog())
    [replace] = [a for a in plan.actions if isinstance(a, Replace)]
    assert replace.node == bad and replace.trigger == "unhealthy"
    assert f"health check failed: {failed}" in replace.reason


def test_an_unreachable_node_gets_no_verdict_and_is_tried_an_interval_later(rig: Rig) -> None:
    every_10m(rig)
    [name] = rig.ready_nodes(1)
    rig.ansible.health_fail[name] = (HostStatus.UNREACHABLE, "", "ssh: connect to host timed out")
    rig.clock.tick(10 * 60)
    rig.advance()
    health = rig.node(name).progress.health
    assert health.failed is None and health.last_error == (
        "health check did not reach the node: ssh: connect to host timed out")
    rig.advance()
    assert len(rig.ansible.health_calls) == 1
    del rig.ansible.health_fail[name]
    rig.clock.tick(10 * 60)
    rig.advance()
    assert len(rig.ansible.health_calls) == 2
    assert rig.node(name).progress.health.last_error is None


def test_a_run_that_fails_as_a_whole_is_an_error_not_a_verdict(rig: Rig) -> None:
    every_10m(rig)
    [name] = rig.ready_nodes(1)
    rig.clock.tick(10 * 60)
    rig.ansible.next_error = RuntimeError("ansible-playbook not found")
    report = rig.advance()
    assert any("ansible-playbook not found" in e for e in report.errors)
    health = rig.node(name).progress.health
    assert health.failed is None and "ansible-playbook not found" in (health.last_error or "")

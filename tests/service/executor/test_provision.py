"""Terraform applies settled (autoscaler/service/executor/provision.py): what is dropped
when a node is TERMINATED."""

from __future__ import annotations

from autoscaler.model.lifecycle import NodeState
from autoscaler.service.executor import AdvanceReport, provision
from autoscaler.service.executor.operations import Inline
from tests.service.executor_rig import Rig, drain, terminate

S = NodeState


def _terminate(rig: Rig, name: str) -> None:
    rig.submit(drain(name))
    rig.advance()
    rig.clock.tick(10)
    rig.advance()
    assert rig.state(name) is S.DRAINED
    rig.submit(terminate(name))


def test_a_terminated_node_is_forgotten_by_the_bootstrapper(rig: Rig) -> None:
    keep, gone = rig.ready_nodes(2)
    _terminate(rig, gone)
    assert rig.advance().moved(S.TERMINATED) == [gone]
    assert rig.ansible.forgotten == [gone] and rig.ansible.kept == {keep}


def test_a_failed_forget_is_reported_and_the_node_still_terminated(rig: Rig) -> None:
    [name] = rig.ready_nodes()
    _terminate(rig, name)

    def broken(names: list[str]) -> None:
        raise OSError("read-only file system")

    report = AdvanceReport(started_at=rig.clock())
    provision.provision(rig.executor()._step(report), rig.tf, rig.address_of,
                        Inline(rig.clock), broken)
    assert rig.state(name) is S.TERMINATED
    assert report.step_errors == {"ansible": 1}
    assert any("pinned host key could not be deleted" in e for e in report.errors)


def test_at_start_what_is_kept_of_nodes_gone_meanwhile_is_forgotten(rig: Rig) -> None:
    keep, gone = rig.ready_nodes(2)
    _terminate(rig, gone)
    rig.advance()
    rig.ansible.forgotten.clear()
    rig.ansible.kept |= {gone, "vision-gpu-99"}  # its forget failed; ended while no leader ran
    rig.executor().advance()  # a new process: its first advance
    assert sorted(rig.ansible.forgotten) == [gone, "vision-gpu-99"]
    assert rig.ansible.kept == {keep}

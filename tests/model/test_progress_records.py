"""The typed changes of the progress records and the node: each changes exactly the fields it
names and keeps every other one (and the record it is called on)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from autoscaler.model.lifecycle import NodeState
from autoscaler.model.progress import (
    BootstrapProgress,
    DrainPhase,
    DrainProgress,
    LongJob,
    NodeProgress,
    ProgressUpdate,
)
from tests.builders import NOW, make_node

LATER = NOW + timedelta(minutes=5)


def changed(before: Any, after: Any) -> dict[str, Any]:
    old, new = _fields(before), _fields(after)
    assert old.keys() == new.keys()
    return {name: new[name] for name in new if new[name] != old[name]}


def _fields(record: Any) -> dict[str, Any]:
    """A model's or a slotted record's (model/record.py) fields by name."""
    if isinstance(record, BaseModel):
        return record.model_dump()
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}


BOOT = BootstrapProgress(attempts=2, started_at=NOW, next_at=NOW, last_error="unreachable")


def test_a_bootstrap_attempt_is_counted_given_back_succeeds_or_fails() -> None:
    assert changed(BOOT, BOOT.begun(LATER)) == {"attempts": 3, "started_at": LATER, "next_at": None}
    assert changed(BOOT, BOOT.given_back()) == {"attempts": 1}
    assert changed(BOOT, BOOT.succeeded(LATER)) == {"ok_at": LATER, "last_error": None}
    assert changed(BOOT, BOOT.failed("timeout", retry_at=LATER)) == {"last_error": "timeout", "next_at": LATER}
    assert (BOOT.attempts, BOOT.last_error) == (2, "unreachable"), "the record itself is unchanged"


def test_a_drain_waits_until_its_next_step_is_worth_running() -> None:
    drain = DrainProgress(reason="idle", started_at=NOW, deadline=LATER, grace=timedelta(minutes=1),
                          phase=DrainPhase.SIGNALLED, signalled_at=NOW, last_error="busy")
    assert changed(drain, drain.waiting_until(LATER)) == {"not_before": LATER}
    waiting = drain.waiting_until(LATER)
    assert changed(waiting, waiting.waiting_until(None)) == {"not_before": None}


JOB = LongJob(reported_at=NOW, signal=True, started_at=NOW, not_before=NOW, outcome="reported")


def test_a_long_job_is_signalled_then_released_or_refused() -> None:
    assert changed(JOB, JOB.with_release()) == {"release": True}
    assert changed(JOB, JOB.signalling(LATER)) == {"signalled_at": LATER, "outcome": "sending"}
    assert changed(JOB, JOB.with_outcome("SIGUSR1 sent")) == {"outcome": "SIGUSR1 sent"}
    assert changed(JOB, JOB.releasing(LATER, outcome="requeue sending")) == {
        "released_at": LATER, "outcome": "requeue sending"}
    sent = JOB.releasing(NOW, outcome="requeue sending")
    assert changed(sent, sent.release_refused(retry_at=LATER, outcome="requeue refused: PDB")) == {
        "released_at": None, "not_before": LATER, "outcome": "requeue refused: PDB"}


def test_a_node_with_the_instance_a_launch_reported() -> None:
    node = make_node("n1", state=NodeState.PROVISIONING, zone="us-east-1a", reason="launch")
    assert changed(node, node.with_instance(instance_id="i-1", address="10.0.0.1")) == {
        "instance_id": "i-1", "address": "10.0.0.1"}
    assert node.with_instance(instance_id="i-1", address=None).address is None


def test_the_baked_image_a_node_was_launched_from_is_written_and_cleared_and_old_records_read() -> None:
    old = NodeProgress.model_validate({"cluster": "slurm", "bootstrap": {"attempts": 1}})
    assert old.baked_image is None  # written before the field existed: the full bootstrap
    baked = ProgressUpdate(baked_image="ami-0baked").applied_to(old)
    assert changed(old, baked) == {"baked_image": "ami-0baked"}
    assert ProgressUpdate(baked_image=None).applied_to(baked) == old

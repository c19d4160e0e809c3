"""Operations as rows: each apply, Ansible batch and drain step handed to actuation is a
journal row, closed when it ends; rows a killed process left open are closed as
interrupted (and audited) by the next leader's first advance."""

from __future__ import annotations

import pytest

from autoscaler.fleet.operations import OperationLog
from autoscaler.service.executor.advance import AdvanceReport
from autoscaler.service.executor.operations import WorkerPools
from autoscaler.service.http.status import recent_operations
from tests.service.crash_harness import Crash
from tests.service.executor_rig import Rig, launch

WAIT = 20.0  # seconds: a bound on waits for worker threads


def test_each_operation_is_a_row_closed_when_it_ends(rig: Rig) -> None:
    journal = OperationLog(rig.store)
    pools = WorkerPools(rig.clock, {"apply": 1, "bootstrap": 1, "drain": 1})
    pools.journal = journal

    def boom(report: AdvanceReport) -> None:
        raise RuntimeError("ansible-runner crashed")

    try:
        assert pools.start("apply", ["apply:vision/gpu"], "terraform apply vision/gpu",
                           lambda report: None, AdvanceReport(started_at=rig.clock()))
        assert pools.start("bootstrap", ["boot:vision-gpu-1"], "ansible vision-gpu-1", boom,
                           AdvanceReport(started_at=rig.clock()))
        assert pools.wait(WAIT)
    finally:
        pools.close()
    rows = {r.what: r for r in journal.recent()}
    assert rows["terraform apply vision/gpu"].outcome == "done"
    failed = rows["ansible vision-gpu-1"]
    assert (failed.outcome, failed.kind, failed.keys) == ("failed", "bootstrap", ["boot:vision-gpu-1"])
    assert "ansible-runner crashed" in failed.detail and failed.finished_at is not None


def test_rows_a_killed_process_left_running_are_closed_and_audited(rig: Rig) -> None:
    rig.submit(launch(1))
    ex = rig.executor()

    def die(*args: object, **kwargs: object) -> None:
        raise Crash("SIGKILL during the apply")

    rig.tf.on_apply = die
    with pytest.raises(Crash):
        ex.advance()
    [open_row] = [r for r in OperationLog(rig.store).recent() if r.outcome == "running"]
    assert open_row.what == "terraform apply vision/gpu"
    rig.tf.on_apply = None
    rig.clock.tick()
    rig.executor().advance()  # a new process: its first advance
    rows = OperationLog(rig.store).recent()
    assert [(r.what, r.outcome) for r in rows[:2]] == [
        ("terraform apply vision/gpu", "interrupted"), ("terraform apply vision/gpu", "done")]
    assert {r.outcome for r in rows[2:]} == {"done"}  # the bootstrap that followed
    assert any(a.event == "operation-interrupted" and "terraform apply vision/gpu" in a.detail
               for a in rig.store.audit_log())


def test_status_shows_the_journal_with_outcomes_and_durations(rig: Rig) -> None:
    journal = OperationLog(rig.store)
    op = journal.started("apply", ["apply:vision/gpu"], "terraform apply vision/gpu", rig.clock())
    rig.clock.tick(42)
    journal.finished(op, rig.clock(), "failed", "InsufficientInstanceCapacity in us-east-1a")
    journal.started("drain", ["drain:vision-gpu-2"], "drain vision-gpu-2", rig.clock())
    done, running = recent_operations(rig.store)
    assert (done["what"], done["outcome"], done["duration_s"]) == (
        "terraform apply vision/gpu", "failed", 42.0)
    assert "InsufficientInstanceCapacity" in done["detail"]
    assert (running["outcome"], running["finished_at"], running["duration_s"]) == (
        "running", None, None)

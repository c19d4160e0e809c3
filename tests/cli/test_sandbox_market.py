"""``gpu-autoscaler sandbox fault|scores|interrupt`` write what the sandbox's moto reads, and
refuse what could not match a real launch, request or notice (tests/sandbox/test_stack.py
runs them against a running sandbox's moto)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.sandbox.stack.state import StackState, proc_of, write_state


@pytest.fixture
def running_sandbox(tmp_path: Path) -> Path:
    """A state directory whose sandbox is "running": its supervisor is this test's process."""
    write_state(tmp_path, StackState(status="ready", supervisor=proc_of(os.getpid()), endpoints={
        "moto_faults": str(tmp_path / "faults.json"),
        "moto_spot_scores": str(tmp_path / "scores.json")}))
    return tmp_path


def run(*args: str):
    return CliRunner().invoke(app, ["sandbox", *args], env={"COLUMNS": "200"})


def test_faults_are_added_listed_and_cleared(running_sandbox: Path) -> None:
    d = str(running_sandbox)
    assert run("fault", "add", "--type", "p3.2xlarge", "--zone", "us-east-1a", "--market", "spot",
               "--dir", d).exit_code == 0
    added = run("fault", "add", "--zone", "us-east-1b", "--code", "VcpuLimitExceeded", "--dir", d)
    assert added.exit_code == 0, added.output
    assert json.loads((running_sandbox / "faults.json").read_text()) == [
        {"instance_type": "p3.2xlarge", "zone": "us-east-1a", "market": "spot",
         "code": "InsufficientInstanceCapacity"},
        {"instance_type": "", "zone": "us-east-1b", "market": "", "code": "VcpuLimitExceeded"}]
    listed = run("fault", "list", "--dir", d).output
    assert "p3.2xlarge" in listed and "VcpuLimitExceeded" in listed and "any" in listed
    cleared = run("fault", "clear", "--dir", d)
    assert cleared.exit_code == 0 and "every launch succeeds" in cleared.output
    assert json.loads((running_sandbox / "faults.json").read_text()) == []


def test_scores_of_the_same_zone_and_types_are_replaced(running_sandbox: Path) -> None:
    d = str(running_sandbox)
    for args in (("us-east-1a=9", "us-east-1b=2"), ("us-east-1a=4",)):
        put = run("scores", "set", "us-east-1", *args, "--types", "p3.8xlarge, p3.2xlarge",
                  "--dir", d)
        assert put.exit_code == 0, put.output
    assert run("scores", "set", "us-west-2", "us-west-2c=7", "--dir", d).exit_code == 0
    rows = json.loads((running_sandbox / "scores.json").read_text())
    assert sorted((r["zone"], r["score"], tuple(r["instance_types"])) for r in rows) == [
        ("us-east-1a", 4, ("p3.2xlarge", "p3.8xlarge")), ("us-east-1b", 2, ("p3.2xlarge", "p3.8xlarge")),
        ("us-west-2c", 7, ())]
    listed = run("scores", "list", "--dir", d).output
    assert "us-west-2c" in listed and "any set" in listed
    assert "empty answer" in run("scores", "clear", "--dir", d).output
    assert json.loads((running_sandbox / "scores.json").read_text()) == []


@pytest.mark.parametrize(("args", "says"), [
    (("fault", "add", "--type", "p3.3xlarge"), "not a known aws instance type"),
    (("fault", "add", "--zone", "us-east-1z"), "not an AWS availability zone"),
    (("fault", "add", "--zone", "us-east-1a", "--code", "Throttling"), "Throttling"),
    (("fault", "add", "--zone", "us-east-1a", "--code", "OperationDenied.NoStock"), "NoStock"),
    (("fault", "add", "--market", "reserved"), "reserved"),
    (("fault", "add"), "name at least one of"),
    (("scores", "set", "us-east-1", "us-west-2a=5"), "not in region 'us-east-1'"),
    (("scores", "set", "us-east-1", "us-east-1a=11"), "score of 1-10"),
    (("scores", "set", "us-east-1", "us-east-1a=-1"), "score of 1-10"),
    (("scores", "set", "us-east-1", "us-east-1a"), "not ZONE=SCORE"),
    (("scores", "set", "us-east-9", "us-east-9a=5"), "not a region of aws"),
    (("scores", "set", "us-east-1", "us-east-1a=5", "--types", "p3.2xlarge,x9"), "'x9' is not"),
])
def test_what_could_not_match_is_refused_and_nothing_written(running_sandbox: Path, args, says) -> None:
    refused = run(*args, "--dir", str(running_sandbox))
    assert refused.exit_code == 1 and says in refused.output, refused.output
    assert not (running_sandbox / "faults.json").exists()
    assert not (running_sandbox / "scores.json").exists()


@pytest.mark.parametrize(("args", "says"), [
    (("--reclaim-after", "2h"), "between 0s and 1h"),
    (("--reclaim-after", "soon"), "not a duration"),
    ((), "no interruption queue"),  # a sandbox started before the queues were
])
def test_an_interrupt_that_could_not_be_sent_is_refused(running_sandbox: Path, args, says) -> None:
    refused = run("interrupt", "demo-v100-1", *args, "--dir", str(running_sandbox))
    assert refused.exit_code == 1 and says in refused.output, refused.output


def test_an_interrupt_says_so_when_moto_does_not_answer(tmp_path: Path) -> None:
    from autoscaler.sandbox.hosts.procs import free_port
    from autoscaler.sandbox.services.spot_notices import queue_key

    gone = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    write_state(tmp_path, StackState(status="ready", supervisor=proc_of(os.getpid()), endpoints={
        "moto": gone, queue_key("us-east-1"): f"{gone}/123456789012/q"}))
    refused = run("interrupt", "demo-v100-1", "--dir", str(tmp_path))
    assert refused.exit_code == 1 and f"moto at {gone} did not answer" in refused.output, refused.output


@pytest.mark.parametrize("args", [("fault", "list"), ("fault", "clear"),
                                  ("scores", "set", "us-east-1", "us-east-1a=5"),
                                  ("interrupt", "demo-v100-1")])
def test_without_a_running_sandbox_nothing_is_written(tmp_path: Path, args) -> None:
    # A stopped sandbox's moto clears both files when it starts again: a write would not count.
    write_state(tmp_path, StackState(status="stopped", endpoints={
        "moto_faults": str(tmp_path / "faults.json")}))
    refused = run(*args, "--dir", str(tmp_path))
    assert refused.exit_code == 1 and "no running sandbox" in refused.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sandbox.json"]

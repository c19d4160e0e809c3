"""Per-host results from ansible-runner events (shapes as ansible-runner 2.4 writes them)."""

from __future__ import annotations

from typing import Any

from autoscaler.actuators.ansible import HostResult, HostStatus
from autoscaler.actuators.ansible.results import Redactor, host_results

NO_SECRETS = Redactor([])


def ev(kind: str, host: str | None = None, task: str = "", **data: Any) -> dict[str, Any]:
    event_data: dict[str, Any] = {"task": task, **data}
    if host is not None:
        event_data["host"] = host
    return {"event": kind, "event_data": event_data}


def stats(**counts: dict[str, int]) -> dict[str, Any]:
    return ev("playbook_on_stats", **counts)


def test_ok_failed_and_unreachable_hosts() -> None:
    events = [
        ev("runner_on_start", "a", "Query every GPU with nvidia-smi"),
        ev("runner_on_ok", "a", "Query every GPU with nvidia-smi", res={"changed": False}),
        ev("runner_on_start", "b", "Check the GPU count"),
        ev("runner_on_failed", "b", "Check the GPU count",
           res={"msg": "GPU health check failed: expected 4 GPUs, nvidia-smi reports 2"}),
        ev("runner_on_unreachable", "c", "Pin the NVIDIA driver to its branch",
           res={"msg": "Failed to connect to the host via ssh: No route to host"}),
        stats(ok={"a": 30, "b": 12}, changed={"a": 3, "b": 2}, failures={"b": 1}, dark={"c": 1},
              processed={"a": 1, "b": 1, "c": 1}),
    ]
    results = host_results(["a", "b", "c"], events, "failed", 60, NO_SECRETS)
    assert results["a"] == HostResult("a", HostStatus.OK, None, "", changed=3, ok=30)
    assert results["b"].status is HostStatus.FAILED
    assert results["b"].failed_task == "Check the GPU count"
    assert "expected 4 GPUs" in results["b"].message
    assert results["c"].status is HostStatus.UNREACHABLE
    assert "No route to host" in results["c"].message


def test_ignored_errors_do_not_fail_a_host() -> None:
    events = [ev("runner_on_failed", "a", "Optional step", ignore_errors=True, res={"msg": "x"}),
              stats(ok={"a": 5}, processed={"a": 1})]
    assert host_results(["a"], events, "successful", 60, NO_SECRETS)["a"].status is HostStatus.OK


def test_command_failures_report_stderr_and_no_log_tasks_stay_hidden() -> None:
    events = [
        ev("runner_on_failed", "a", "Start slurmd", res={"rc": 1, "stderr": "slurmd exited"}),
        ev("runner_on_failed", "b", "Join the Kubernetes cluster", res={"censored": "hidden"}),
        stats(failures={"a": 1, "b": 1}, processed={"a": 1, "b": 1}),
    ]
    results = host_results(["a", "b"], events, "failed", 60, NO_SECRETS)
    assert results["a"].message == "slurmd exited"
    assert "no_log" in results["b"].message


def test_a_timed_out_run_fails_unfinished_hosts_naming_their_last_task() -> None:
    events = [ev("runner_on_start", "a", "Wait until slurmctld hears from slurmd")]
    results = host_results(["a", "b"], events, "timeout", 1800, NO_SECRETS)
    assert results["a"].status is HostStatus.FAILED
    assert results["a"].failed_task == "Wait until slurmctld hears from slurmd"
    assert results["a"].message == "run timed out after 1800s"
    assert results["b"].status is HostStatus.FAILED and results["b"].failed_task is None


def test_secrets_are_redacted_from_messages() -> None:
    token = "abcdef.0123456789abcdef"
    events = [ev("runner_on_failed", "a", "Join", res={"stderr": f"bad token {token} rejected"}),
              stats(failures={"a": 1}, processed={"a": 1})]
    result = host_results(["a"], events, "failed", 60, Redactor([token, ""]))["a"]
    assert token not in result.message
    assert result.message == "bad token <redacted> rejected"


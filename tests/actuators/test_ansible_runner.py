"""The actuator's run mechanics over real SSH with a tiny playbook: secrets, time limit,
shared SSH connections closed at the end of the run, run directories kept and rotated."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoscaler.actuators.ansible import AnsibleActuator, AnsibleSettings, HostStatus
from autoscaler.model.lifecycle import NodeState
from autoscaler.sandbox.hosts.ssh_hosts import SshHosts
from tests.builders import make_node, make_policy

SECRET = "s3cr3t-VALUE-that-must-never-be-logged"
PLAYBOOK = """\
- name: Tiny
  hosts: all
  gather_facts: false
  tasks:
    - name: Use the secret
      ansible.builtin.copy:
        content: "{{ test_secret }}"
        dest: /etc/test-secret
        mode: "0600"
      no_log: true
      when: test_secret is defined
    - name: Wait
      ansible.builtin.command: sleep {{ test_sleep | default(0) }}
      changed_when: false
"""
POLICIES = {"vision": make_policy()}


def _private_dirs() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "gpu-autoscaler-ansible-*")))


def _ssh_masters() -> list[str]:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines()
            if line.startswith("ssh:") and "gpu-autoscaler-ansible-" in line]


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHosts]:
    with SshHosts(["run-a"], tmp_path_factory.mktemp("runner-hosts")) as h:
        yield h


@pytest.fixture
def actuator_for(hosts: SshHosts, tmp_path: Path):  # type: ignore[no-untyped-def]
    playbook = tmp_path / "tiny.yml"
    playbook.write_text(PLAYBOOK)

    def make(**settings: object) -> AnsibleActuator:
        base: dict[str, object] = {
            "playbook": playbook, "runs_dir": tmp_path / "runs", "ssh_port": hosts.port,
            "private_key_file": hosts.private_key, "control_persist": False}
        return AnsibleActuator(AnsibleSettings(**{**base, **settings}),  # type: ignore[arg-type]
                               lambda node: hosts.address_of(node.name))
    return make


NODE = make_node("run-a", state=NodeState.BOOTSTRAPPING)


@pytest.mark.slow
def test_secret_reaches_the_host_but_no_log_or_result_and_ssh_masters_are_closed(
        hosts: SshHosts, actuator_for, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    before = _private_dirs()
    masters_before = set(_ssh_masters())  # other sandboxes on this machine may hold some
    # The production default: shared SSH connections (ControlMaster=auto).
    actuator = actuator_for(control_persist=True)
    run = actuator.bootstrap([NODE], POLICIES, secrets={"test_secret": SECRET})
    assert run.hosts["run-a"].status is HostStatus.OK, run.hosts
    assert hosts.read_file("run-a", "/etc/test-secret") == SECRET
    kept = sorted(p.name for p in run.run_dir.iterdir())
    assert kept == ["events.jsonl", "inventory.json", "rc", "results.json", "status", "stdout"]
    for path in (tmp_path / "runs").rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path
    assert SECRET not in str(run.to_json())
    # The private data directory (where the secret was written) is gone, and so are the
    # SSH masters that ControlPersist would otherwise keep for a while.
    assert _private_dirs() <= before
    assert set(_ssh_masters()) - masters_before == set()


@pytest.mark.slow
def test_a_run_in_the_main_thread_leaves_the_callers_signal_handlers_alone(
        actuator_for) -> None:  # type: ignore[no-untyped-def]
    def mine(signum: int, frame: object) -> None:
        raise AssertionError("not expected to be called")

    previous = signal.signal(signal.SIGTERM, mine), signal.signal(signal.SIGINT, mine)
    try:
        run = actuator_for().bootstrap([NODE], POLICIES)
        assert run.hosts["run-a"].status is HostStatus.OK, run.hosts
        assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])


@pytest.mark.slow
def test_a_run_over_its_time_limit_is_stopped_and_fails_its_hosts(
        actuator_for) -> None:  # type: ignore[no-untyped-def]
    actuator = actuator_for(timeout="10s", extra_vars={"test_sleep": 120})
    started = time.monotonic()
    run = actuator.bootstrap([NODE], POLICIES)
    assert time.monotonic() - started < 60
    assert run.status == "timeout"
    result = run.hosts["run-a"]
    assert result.status is HostStatus.FAILED
    assert result.message == "run timed out after 10s"
    assert result.failed_task == "Wait"


def test_old_run_directories_are_rotated(tmp_path: Path) -> None:
    settings = AnsibleSettings(runs_dir=tmp_path / "runs", keep_runs=2)
    actuator = AnsibleActuator(settings, lambda node: None)
    runs = [actuator.bootstrap([NODE], POLICIES) for _ in range(3)]
    kept = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert kept == sorted(r.run_id for r in runs[1:])

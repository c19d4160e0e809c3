"""The actuator's run mechanics over real SSH with a tiny playbook: secrets, time limit,
shared SSH connections closed at the end of the run, run directories kept and rotated; and,
with ansible-runner replaced, the tags a batch runs with (node-time on a baked image)."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import ansible_runner
import pytest

from autoscaler import secrets
from autoscaler.actuators.ansible import (
    AnsibleActuator,
    AnsibleError,
    AnsibleSettings,
    BootstrapCancelled,
    BootstrapRun,
    HostStatus,
)
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.progress import NodeProgress, WarmProgress
from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.sandbox.hosts.ssh_hosts import SshHosts
from tests.builders import NOW, make_node, make_policy

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
    - name: What the controller's environment holds
      ansible.builtin.copy:
        content: "{{ lookup('env', 'GAS_HELD') }}|{{ lookup('env', 'AWS_SECRET_ACCESS_KEY') }}|{{
          lookup('env', 'GAS_KEPT') }}"
        dest: /etc/controller-env
        mode: "0600"
      when: check_env | default(false)
    - name: Wait
      ansible.builtin.command: sleep {{ test_sleep | default(0) }}
      changed_when: false
"""
POLICIES = {"vision": make_policy()}


def _private_dirs() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "gpu-autoscaler-ansible-*")))


def _ssh_masters() -> list[str]:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    mine = os.path.join(tempfile.gettempdir(), "gpu-autoscaler-ansible-")
    return [line for line in out.splitlines() if line.startswith("ssh:") and mine in line]


@pytest.fixture
def own_tempdir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This test's runs make their private directories here, not where other tests
    running at the same time make theirs (short: SSH control sockets live inside)."""
    path = Path(tempfile.mkdtemp(prefix="gas-t-"))
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)


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
        hosts: SshHosts, actuator_for, tmp_path: Path,  # type: ignore[no-untyped-def]
        own_tempdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = _private_dirs()
    masters_before = set(_ssh_masters())
    # A secret of the service's own and the cloud's credentials are not in the
    # environment ansible-playbook runs in (nor in the one ansible-runner writes to disk).
    monkeypatch.setattr(secrets, "_HELD", set())
    for name, value in {"GAS_HELD": SECRET, "AWS_SECRET_ACCESS_KEY": SECRET, "GAS_KEPT": "kept"}.items():
        monkeypatch.setenv(name, value)
    assert secrets.read_secret("GAS_HELD", None, "the store's password") == SECRET
    # The production default: shared SSH connections (ControlMaster=auto).
    actuator = actuator_for(control_persist=True, extra_vars={"check_env": True})
    run = actuator.bootstrap([NODE], POLICIES, secrets={"test_secret": SECRET})
    assert run.hosts["run-a"].status is HostStatus.OK, run.hosts
    assert hosts.read_file("run-a", "/etc/test-secret") == SECRET
    assert hosts.read_file("run-a", "/etc/controller-env") == "||kept"
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


@pytest.mark.slow
def test_cancel_stops_a_running_playbook_at_once(
        actuator_for, own_tempdir: Path) -> None:  # type: ignore[no-untyped-def]
    actuator = actuator_for(timeout="10m", extra_vars={"test_sleep": 300})
    outcome: list[BaseException | BootstrapRun] = []

    def run() -> None:
        try:
            outcome.append(actuator.bootstrap([NODE], POLICIES))
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    # Until the playbook is running the sleep on the host (its stdout names the task).
    wait_until(lambda: any("TASK [Wait]" in p.read_text(errors="replace")
                           for p in own_tempdir.glob(
                               "gpu-autoscaler-ansible-*/artifacts/*/stdout")), 60, "the Wait task")
    cancelled_at = time.monotonic()
    actuator.cancel()
    worker.join(timeout=30)
    assert not worker.is_alive(), "cancel() did not stop the run"
    assert time.monotonic() - cancelled_at < 30
    assert len(outcome) == 1 and isinstance(outcome[0], BootstrapCancelled), outcome
    with pytest.raises(BootstrapCancelled):  # and no new run starts
        actuator.bootstrap([NODE], POLICIES)


def test_old_run_directories_are_rotated(tmp_path: Path) -> None:
    settings = AnsibleSettings(runs_dir=tmp_path / "runs", keep_runs=2)
    actuator = AnsibleActuator(settings, lambda node: None)
    runs = [actuator.bootstrap([NODE], POLICIES) for _ in range(3)]
    kept = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert kept == sorted(r.run_id for r in runs[1:])


def test_host_keys_are_pinned_per_node_and_their_directory_is_not_a_run(
        tmp_path: Path, recorded_runs: list[dict[str, Any]]) -> None:
    playbook = tmp_path / "gpu-node.yml"
    playbook.write_text(PLAYBOOK)
    settings = AnsibleSettings(playbook=playbook, runs_dir=tmp_path / "runs", keep_runs=1)
    actuator = AnsibleActuator(settings, lambda node: "192.0.2.10")
    actuator.bootstrap([NODE], POLICIES)
    last = actuator.bootstrap([NODE], POLICIES)
    # ssh keeps the first value of an option, and ANSIBLE_SSH_ARGS come first: the file
    # is given per host only (ssh, sftp and scp alike).
    ssh_args = recorded_runs[-1]["envvars"]["ANSIBLE_SSH_ARGS"]
    assert "UserKnownHostsFile" not in ssh_args and "StrictHostKeyChecking=accept-new" in ssh_args
    keys = tmp_path / "runs" / "known_hosts.d"
    host = json.loads((last.run_dir / "inventory.json").read_text())["all"]["hosts"]["run-a"]
    assert host["ansible_ssh_common_args"] == \
        f"-o HostKeyAlias=run-a -o UserKnownHostsFile={keys.absolute() / 'run-a'}"
    assert keys.is_dir()
    # Rotation keeps keep_runs runs: the keys' directory is not one of them.
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [last.run_id, "known_hosts.d"]
    (keys / "run-a").write_text("run-a ssh-ed25519 AAAA\n")
    (keys / "run-b").write_text("run-b ssh-ed25519 AAAA\n")
    actuator.forget(["run-a"])
    assert [p.name for p in keys.iterdir()] == ["run-b"]
    assert actuator.forget_all_but(["run-a"]) == ["run-b"]
    assert list(keys.iterdir()) == []


BAKED_NODE = make_node("run-b", state=NodeState.BOOTSTRAPPING,
                       progress=NodeProgress(baked_image="ami-0baked"))


@pytest.fixture
def recorded_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """ansible_runner.run replaced: the keyword arguments of each run; every host ok."""
    runs: list[dict[str, Any]] = []

    def run(**kwargs: Any) -> SimpleNamespace:
        extravars = Path(kwargs["private_data_dir"]) / "env" / "extravars"
        runs.append({**kwargs, "extravars": extravars.read_text()})
        hosts = dict.fromkeys(("run-a", "run-b"), 1)
        stats = {"event": "playbook_on_stats", "event_data": {"processed": hosts, "ok": hosts}}
        artifacts = tmp_path / "artifacts"
        artifacts.mkdir(exist_ok=True)
        return SimpleNamespace(events=[stats], status="successful",
                               config=SimpleNamespace(artifact_dir=str(artifacts)))

    monkeypatch.setattr(ansible_runner, "run", run)
    return runs


@pytest.fixture
def actuator(tmp_path: Path) -> AnsibleActuator:
    """An actuator that skips the gpu-hardware tasks, for runs recorded by ``recorded_runs``."""
    playbook = tmp_path / "gpu-node.yml"
    playbook.write_text(PLAYBOOK)
    settings = AnsibleSettings(playbook=playbook, runs_dir=tmp_path / "runs",
                               skip_tags=["gpu-hardware"])
    return AnsibleActuator(settings, lambda node: "192.0.2.10")


def test_a_batch_on_a_baked_image_runs_only_the_node_time_part(
        actuator: AnsibleActuator, recorded_runs: list[dict[str, Any]]) -> None:
    baked = actuator.bootstrap([BAKED_NODE], POLICIES)
    full = actuator.bootstrap([NODE], POLICIES)
    assert [(r["tags"], r["skip_tags"]) for r in recorded_runs] == [
        ("node", "gpu-hardware"), (None, "gpu-hardware")]
    assert (baked.hosts["run-b"].status, full.hosts["run-a"].status) == (HostStatus.OK,) * 2
    # The kept results say which part ran.
    assert json.loads((baked.run_dir / "results.json").read_text())["tags"] == "node"
    assert json.loads((full.run_dir / "results.json").read_text())["tags"] is None
    # One run is one part or the other: a mixed batch is refused before anything runs.
    with pytest.raises(AnsibleError, match=r"different parts of the playbook \(full: run-a; node: run-b\)"):
        actuator.bootstrap([NODE, BAKED_NODE], POLICIES)
    assert len(recorded_runs) == 2
    # The health check runs its own playbook whole, whatever the node was launched from.
    actuator.health_check([BAKED_NODE], POLICIES)
    assert recorded_runs[-1]["tags"] is None


def test_a_warm_node_runs_all_but_the_start_part_before_its_stop_and_the_start_part_after(
        actuator: AnsibleActuator, recorded_runs: list[dict[str, Any]]) -> None:
    warming = dataclasses.replace(NODE, progress=NodeProgress(
        warm=WarmProgress(image="0123456789ab")))
    started = dataclasses.replace(NODE, progress=NodeProgress(warm=WarmProgress(
        image="0123456789ab", stopped_at=NOW, started_at=NOW, started_for="pending job")))
    entry = actuator.bootstrap([warming], POLICIES)
    start = actuator.bootstrap([started], POLICIES)
    assert [(r["tags"], r["skip_tags"]) for r in recorded_runs] == [
        (None, "gpu-hardware,start"), ("start", "gpu-hardware")]
    # Only the entry holds the join service off (slurmd would join at the next boot).
    assert '"cluster_join_hold": true' in recorded_runs[0]["extravars"]
    assert "cluster_join_hold" not in recorded_runs[1]["extravars"]
    assert [json.loads((r.run_dir / "results.json").read_text())["part"]
            for r in (entry, start)] == ["warm", "start"]
    with pytest.raises(AnsibleError, match=r"different parts .*\(start: run-a; warm: run-b\)"):
        actuator.bootstrap([started, dataclasses.replace(warming, name="run-b")], POLICIES)

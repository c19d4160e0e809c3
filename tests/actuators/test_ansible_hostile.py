"""Policy values and secrets reach the node as data through the real ansible-runner actuator
over real SSH: nothing in them is templated (no command runs on the controller or the node)
and none is split into extra arguments; the operator's own extra_vars (service config) still
are templates. Host keys are pinned per
node: a node that shows another key than the one first seen is refused.

The policy is built past validation (``model_copy`` does not validate), so what is shown is
the actuator's own defence, not the schema's.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoscaler.actuators.ansible import AnsibleActuator, AnsibleSettings, HostStatus
from autoscaler.model.lifecycle import NodeState
from autoscaler.policy.models import TeamPolicy
from autoscaler.sandbox.hosts.ssh_hosts import SshHosts
from tests.builders import make_node, make_policy
from tests.hostile import SPLIT, jinja, jinja_block, pwned

# Writes every variable the roles read from a pool to a file on the node, and runs one
# command with the partition as one argument, the way the cluster_join role does.
PLAYBOOK = """\
- name: Echo the pool's settings
  hosts: all
  gather_facts: false
  tasks:
    - name: Write them
      ansible.builtin.copy:
        dest: "/root/echo-{{ item.key }}"
        content: "{{ item.value }}"
        mode: "0644"
      loop:
        - {key: driver, value: "{{ nvidia_driver_branch }}"}
        - {key: cuda, value: "{{ cuda_toolkit_version }}"}
        - {key: labels, value: "{{ cluster_join_labels | to_json }}"}
        - {key: secret, value: "{{ test_secret }}"}
        - {key: extra, value: "{{ test_extra }}"}
      loop_control: {label: "{{ item.key }}"}
      no_log: true
    - name: The partition is one argument
      ansible.builtin.command:
        argv: [sh, -c, 'printf "%s\\n" "$#" "$1" > /root/partition-args', sh,
               "{{ cluster_join_slurm_partition }}"]
      changed_when: true
"""
TOUCH = """\
- name: Touch
  hosts: all
  gather_facts: false
  tasks:
    - name: Leave a mark
      ansible.builtin.copy: {dest: /root/echo-driver, content: x, mode: "0644"}
"""
TAGS = ("driver", "cuda", "partition", "label-key", "label-value", "secret", "block")


def hostile_policy() -> TeamPolicy:
    policy = make_policy(cluster={"kind": "slurm"})
    pool = policy.pools[0]
    pool = pool.model_copy(update={
        "bootstrap": pool.bootstrap.model_copy(update={"driver": jinja("driver"),
                                                       "cuda": jinja_block("block")}),
        "cluster": pool.cluster.model_copy(update={
            "partition": SPLIT + " " + jinja("partition"),
            "labels": {jinja("label-key"): jinja("label-value")}}),
    })
    return policy.model_copy(update={"pools": [pool]})


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHosts]:
    with SshHosts(["gpu-evil"], tmp_path_factory.mktemp("hostile-hosts")) as h:
        yield h


def _actuator(hosts: SshHosts, tmp_path: Path, playbook: str, **extra: object) -> AnsibleActuator:
    book = tmp_path / "echo.yml"
    book.write_text(playbook)
    settings = AnsibleSettings(playbook=book, runs_dir=tmp_path / "runs", ssh_port=hosts.port,
                               private_key_file=hosts.private_key,
                               **extra)  # type: ignore[arg-type]
    return AnsibleActuator(settings, lambda node: hosts.address_of("gpu-evil"))


def _clear() -> None:
    for tag in TAGS:
        pwned(tag).unlink(missing_ok=True)


@pytest.mark.slow
def test_hostile_values_arrive_as_literal_text_and_run_nothing(
        hosts: SshHosts, tmp_path: Path) -> None:
    _clear()
    policy = hostile_policy()
    actuator = _actuator(hosts, tmp_path, PLAYBOOK,
                         extra_vars={"test_extra": "{{ inventory_hostname }}-operator"})
    node = make_node("vision-gpu-1", state=NodeState.BOOTSTRAPPING)
    run = actuator.bootstrap([node], {"vision": policy}, secrets={"test_secret": jinja("secret")})
    assert run.hosts["vision-gpu-1"].status is HostStatus.OK, run.hosts
    # Nothing ran, on the controller or on the node.
    for tag in TAGS:
        assert not pwned(tag).exists(), tag
        out = hosts.run("gpu-evil", ["sh", "-c", f"test -e {pwned(tag)} && echo yes || echo no"])
        assert out.stdout.strip() == "no", tag
    # Each value arrived exactly as written.
    assert hosts.read_file("gpu-evil", "/root/echo-driver") == jinja("driver")
    assert hosts.read_file("gpu-evil", "/root/echo-cuda") == jinja_block("block")
    assert hosts.read_file("gpu-evil", "/root/echo-extra") == "vision-gpu-1-operator"
    assert jinja("label-value") in hosts.read_file("gpu-evil", "/root/echo-labels")
    count, value = hosts.read_file("gpu-evil", "/root/partition-args").splitlines()
    assert (count, value) == ("1", SPLIT + " " + jinja("partition"))


@pytest.mark.slow
def test_a_changed_host_key_is_refused(hosts: SshHosts, tmp_path: Path) -> None:
    actuator = _actuator(hosts, tmp_path, TOUCH)
    node = make_node("vision-gpu-2", state=NodeState.BOOTSTRAPPING)
    policies = {"vision": make_policy()}
    first = actuator.bootstrap([node], policies)
    assert first.hosts["vision-gpu-2"].status is HostStatus.OK, first.hosts
    known = actuator.settings.host_keys_dir() / "vision-gpu-2"
    pinned = known.read_text().splitlines()
    # Recorded at first contact, under the node's name, in the node's own file.
    assert len(pinned) == 1 and pinned[0].startswith("vision-gpu-2 ")
    # Another machine answers at the node's address: its key differs from the pinned one.
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    key_type, key = other.with_suffix(".pub").read_text().split()[:2]
    known.write_text(f"vision-gpu-2 {key_type} {key}\n")
    hosts.run("gpu-evil", ["rm", "-f", "/root/echo-driver"])
    second = actuator.bootstrap([node], policies)
    result = second.hosts["vision-gpu-2"]
    assert result.status is HostStatus.UNREACHABLE, second.hosts
    assert "host key" in result.message.lower() or "identification has changed" in \
        result.message.lower(), result.message
    # Nothing was done on the host.
    out = hosts.run("gpu-evil", ["sh", "-c", "test -e /root/echo-driver && echo yes || echo no"])
    assert out.stdout.strip() == "no"


@pytest.mark.slow
def test_a_pin_survives_the_move_from_the_single_file_and_ends_with_its_node(
        hosts: SshHosts, tmp_path: Path) -> None:
    # Without shared connections: file transfers (sftp) connect on their own, and must
    # check the same pin as ssh.
    actuator = _actuator(hosts, tmp_path, TOUCH, control_persist=False)
    node = make_node("vision-gpu-3", state=NodeState.BOOTSTRAPPING)
    policies = {"vision": make_policy()}
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    key_type, key = other.with_suffix(".pub").read_text().split()[:2]
    legacy = actuator.settings.legacy_known_hosts()
    legacy.parent.mkdir(parents=True, exist_ok=True)
    legacy.write_text(f"vision-gpu-1 {key_type} {key}\nvision-gpu-3 {key_type} {key}\n")
    # Pinned in the old single file (before an upgrade): still refused.
    run = actuator.bootstrap([node], policies)
    assert run.hosts["vision-gpu-3"].status is HostStatus.UNREACHABLE, run.hosts
    # The start moves the pins of live nodes to their own files: still refused.
    assert actuator.forget_all_but(["vision-gpu-3"]) == []
    assert not legacy.exists()
    run = actuator.bootstrap([node], policies)
    assert run.hosts["vision-gpu-3"].status is HostStatus.UNREACHABLE, run.hosts
    # Once the node is gone its pin goes: a machine named so again is trusted on first use.
    actuator.forget(["vision-gpu-3"])
    run = actuator.bootstrap([node], policies)
    assert run.hosts["vision-gpu-3"].status is HostStatus.OK, run.hosts
    pinned = (actuator.settings.host_keys_dir() / "vision-gpu-3").read_text().splitlines()
    assert len(pinned) == 1 and pinned[0].startswith("vision-gpu-3 ") and key not in pinned[0]

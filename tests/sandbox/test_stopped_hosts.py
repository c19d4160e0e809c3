"""A stopped moto instance is a warm node: its host powers off with its disk and address kept,
boots again from them when the instance is started, and goes only when it is terminated or
the sandbox stops. The stack without policies: moto, the exporter, Prometheus, the follower."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from autoscaler.sandbox.hosts import first_boot, netns
from autoscaler.sandbox.hosts.first_boot import SANDBOX_USER_DATA
from autoscaler.sandbox.hosts.procs import port_open, wait_until
from autoscaler.sandbox.services.moto_server import MOTO_AMI
from autoscaler.sandbox.stack.local import SandboxStack, StackOptions
from autoscaler.sandbox.stack.state import alive, read_state
from autoscaler.service.config.addresses import read_address_file
from tests.sandbox.test_ssh_hosts import ssh

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("systemd-nspawn") is None,
                       reason="booted hosts need root and systemd-container"),
]
WITHIN_S = 60.0  # a pass of the follower each second, a boot of a few seconds


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxStack]:
    with SandboxStack(tmp_path_factory.mktemp("sandbox"), StackOptions(util=42.0)) as st:
        yield st


def launch(stack: SandboxStack, node: str) -> str:
    tags = [{"Key": "managed-by", "Value": "gpu-autoscaler"}, {"Key": "node", "Value": node}]
    out = stack.ec2().run_instances(ImageId=MOTO_AMI, InstanceType="p3.2xlarge", MinCount=1,
                                    MaxCount=1, UserData=SANDBOX_USER_DATA,
                                    TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])
    return str(out["Instances"][0]["InstanceId"])


def targets(stack: SandboxStack) -> list[str]:
    """Nodes the exporter serves and Prometheus is told to scrape (its file_sd)."""
    served = stack.dcgm.dcgm.nodes() if stack.dcgm is not None else []
    scraped = [g["labels"]["instance"] for g in json.loads(stack.file_sd.read_text())]
    return sorted(set(served) & set(scraped))


def node_state(stack: SandboxStack, node: str) -> str:
    state = read_state(stack.dir)
    return state.nodes.get(node, {}).get("state", "") if state is not None else ""


@contextlib.contextmanager
def held(path: Path) -> Iterator[Callable[[], bool]]:
    """Whether the namespace at ``path`` is gone: held open meanwhile, so that its inode is
    not reused and a namespace another sandbox made in the freed slot is told apart."""
    fd = os.open(path, os.O_RDONLY)
    ours = os.fstat(fd).st_ino
    try:
        yield lambda: not path.exists() or path.stat().st_ino != ours
    finally:
        os.close(fd)


def answers(stack: SandboxStack, node: str) -> bool:
    host = stack.follower.followed[node].host if stack.follower else None
    return host is not None and ssh(host, node, "true", timeout=15).returncode == 0


def test_a_stopped_instance_keeps_its_disk_and_address_and_boots_from_them_again(
        stack: SandboxStack, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="autoscaler.sandbox")
    node, ec2 = "warm-v100-1", stack.ec2()
    iid = launch(stack, node)
    wait_until(lambda: node in read_address_file(stack.address_file), WITHIN_S, "its host")
    assert stack.follower is not None
    item = stack.follower.followed[node]
    hosts, address, upper = item.host, item.address, item.host.hosts[node].upper
    namespace = hosts.hosts[node].slot.netns
    first_boot_s = hosts.hosts[node].boot_seconds
    wait_until(lambda: answers(stack, node), WITHIN_S, "ssh")
    wait_until(lambda: node in targets(stack), WITHIN_S, "its target")
    written = ssh(hosts, node, "echo kept > /root/kept; cat /proc/sys/kernel/random/boot_id; "
                               "cat /etc/gpu-autoscaler/user-data-ran")
    assert written.returncode == 0, written.stderr
    boot_id, ran = written.stdout.split("\n", 1)
    assert ran.strip() == f"first boot {boot_id}"

    ec2.stop_instances(InstanceIds=[iid])
    wait_until(lambda: not port_open(address, hosts.port) and node_state(stack, node) == "stopped",
               WITHIN_S, "the host powered off")
    assert not hosts.running(node) and netns.pids_in(hosts.hosts[node].slot) == []
    assert node not in stack.dcgm.dcgm.nodes() and node not in stack.file_sd.read_text()
    assert read_address_file(stack.address_file) == {node: address}  # EC2 keeps the private IP
    assert (netns.NETNS_DIR / namespace).exists() and (upper / "root/kept").is_file()
    # What `sandbox down` removes after a crash (state.cleanup): the recorded namespaces and
    # the overlays under the stack's directory.
    assert namespace in read_state(stack.dir).namespaces and upper in stack.dir.glob("hosts/*/upper")

    ec2.start_instances(InstanceIds=[iid])
    started = time.monotonic()
    wait_until(lambda: answers(stack, node), WITHIN_S, "ssh after the start")
    restart_to_ssh = time.monotonic() - started
    assert stack.follower.followed[node].address == address == hosts.address_of(node)
    again = ssh(hosts, node, "cat /root/kept /proc/sys/kernel/random/boot_id "
                             "/etc/gpu-autoscaler/user-data-ran; "
                             f"systemctl show -P ConditionResult {first_boot.UNIT}")
    assert again.returncode == 0, again.stderr
    kept, new_boot_id, ran_again, condition = again.stdout.split("\n", 3)
    assert (kept, ran_again) == ("kept", f"first boot {boot_id}")  # the same disk
    assert new_boot_id != boot_id and condition.strip() == "no"  # user_data ran once only
    wait_until(lambda: node in targets(stack), WITHIN_S, "its target back")
    nspawn = hosts.node_pid(node)
    recorded = [p for p in read_state(stack.dir).children if p.pid == nspawn]
    assert recorded and alive(recorded[0]), "the new boot's nspawn is stopped by PID on down"
    said = [r.getMessage() for r in caplog.records if node in r.getMessage()]
    assert any("is stopped in moto" in m and f"address {address} are kept" in m for m in said)
    assert any("is started again" in m and "sshd answered" in m for m in said), said
    print(f"\nfirst boot to sshd: {first_boot_s:.1f} s; start_instances to ssh: "
          f"{restart_to_ssh:.1f} s (the follower polls each second)")

    ec2.stop_instances(InstanceIds=[iid])
    wait_until(lambda: node_state(stack, node) == "stopped", WITHIN_S, "stopped again")
    with held(netns.NETNS_DIR / namespace) as namespace_gone:
        ec2.terminate_instances(InstanceIds=[iid])
        wait_until(lambda: node not in stack.follower.followed
                   and read_address_file(stack.address_file) == {}, WITHIN_S, "the node gone")
        assert namespace_gone() and not upper.exists()
    assert node not in stack.dcgm.dcgm.nodes() and node not in stack.file_sd.read_text()


def test_the_sandbox_stopping_removes_a_stopped_instances_host(stack: SandboxStack) -> None:
    node = "warm-v100-2"
    iid = launch(stack, node)
    wait_until(lambda: node in read_address_file(stack.address_file), WITHIN_S, "its host")
    assert stack.follower is not None
    hosts = stack.follower.followed[node].host
    slot, upper = hosts.hosts[node].slot, hosts.hosts[node].upper
    stack.ec2().stop_instances(InstanceIds=[iid])
    wait_until(lambda: node_state(stack, node) == "stopped", WITHIN_S, "the host powered off")
    assert slot.netns_path.exists() and upper.is_dir()
    with held(slot.netns_path) as namespace_gone:
        stack.stop()
        assert namespace_gone() and not upper.exists()
    assert read_state(stack.dir).namespaces == []

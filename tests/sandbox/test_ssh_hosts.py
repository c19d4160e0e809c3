"""SSH test hosts in network namespaces: real sshd, private filesystem, clean teardown."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoscaler.sandbox import netns
from autoscaler.sandbox.ssh_hosts import SshHostError, SshHosts


def test_slots_use_their_own_slash_30_and_never_the_shared_controller_address() -> None:
    assert (netns.Slot(1).host_address, netns.Slot(1).ns_address) == ("169.254.77.1", "169.254.77.2")
    assert (netns.Slot(2).host_address, netns.Slot(2).ns_address) == ("169.254.77.5", "169.254.77.6")
    last = netns.Slot(netns.MAX_SLOT)
    assert last.ns_address == "169.254.77.250"
    # Interface names fit Linux's 15 characters.
    assert len(last.veth_host) <= 15 and len(last.veth_ns) <= 15


def test_host_names_must_be_unique(tmp_path: Path) -> None:
    with pytest.raises(SshHostError, match="unique"):
        SshHosts(["a", "a"], tmp_path)


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or (shutil.which("sshd") is None and not Path("/usr/sbin/sshd").exists()),
    reason="needs root and openssh-server")


def ssh(hosts: SshHosts, name: str, command: str, timeout: float = 20
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ssh", "-i", str(hosts.private_key), "-p", str(hosts.port), "-o", "BatchMode=yes",
         "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
         "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5", "-o", "ControlMaster=no",
         f"{hosts.user}@{hosts.address_of(name)}", command],
        capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHosts]:
    with SshHosts(["alpha", "beta"], tmp_path_factory.mktemp("ssh-hosts")) as h:
        yield h


@pytest.mark.slow
@needs_root
def test_each_host_answers_ssh_with_its_own_name_and_cgroups(hosts: SshHosts) -> None:
    for name in ("alpha", "beta"):
        address = hosts.address_of(name)
        assert address.startswith("169.254.77.")
        out = ssh(hosts, name, "hostname; test -d /sys/fs/cgroup && echo cgroup; echo $HOME")
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == [name, "cgroup", "/root"]
    assert hosts.address_of("alpha") != hosts.address_of("beta")


@pytest.mark.slow
@needs_root
def test_writes_stay_in_the_hosts_private_filesystem(hosts: SshHosts) -> None:
    marker = "/etc/gpu-autoscaler-ssh-hosts-test"
    out = ssh(hosts, "alpha", f"echo alpha-only > {marker} && cat {marker}")
    assert out.stdout.strip() == "alpha-only", out.stderr
    assert not Path(marker).exists()  # the real machine is untouched
    assert ssh(hosts, "beta", f"test -e {marker}").returncode == 1  # and so is the other host
    hosts.write_file("beta", "/usr/local/bin/hello", "#!/bin/sh\necho hi from beta\n", 0o755)
    assert ssh(hosts, "beta", "hello").stdout.strip() == "hi from beta"
    assert hosts.read_file("alpha", marker).strip() == "alpha-only"


@pytest.mark.slow
@needs_root
def test_unreachable_host_fails_fast_and_comes_back_with_its_files(hosts: SshHosts) -> None:
    ssh(hosts, "beta", "echo kept > /etc/kept")
    hosts.set_reachable("beta", False)
    try:
        out = ssh(hosts, "beta", "true", timeout=15)
        assert out.returncode == 255
        assert ssh(hosts, "alpha", "true").returncode == 0
    finally:
        hosts.set_reachable("beta", True)
    assert ssh(hosts, "beta", "cat /etc/kept").stdout.strip() == "kept"
    # Restarting sshd keeps the host's filesystem too.
    hosts.stop_sshd("beta")
    assert ssh(hosts, "beta", "true", timeout=15).returncode == 255
    hosts.start_sshd("beta")
    assert ssh(hosts, "beta", "cat /etc/kept").stdout.strip() == "kept"


@pytest.mark.slow
@needs_root
def test_teardown_removes_namespaces_veths_and_the_processes_started_inside(
        tmp_path: Path) -> None:
    h = SshHosts(["gamma"], tmp_path).start()
    slot = h.hosts["gamma"].slot
    # A daemon started over SSH (like slurmd) outlives its session.
    ssh(h, "gamma", "setsid sleep 300 >/dev/null 2>&1 < /dev/null &")
    pids = netns.pids_in(slot)
    assert len(pids) >= 3  # anchor, sshd, sleep
    h.stop()
    assert not slot.netns_path.exists()
    assert slot.veth_host not in netns.run_ip("-o", "link", "show").stdout
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or \
            Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"

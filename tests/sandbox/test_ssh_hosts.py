"""SSH test hosts: the node image booted with systemd per host, real sshd, a private overlay
that nothing of this machine's root filesystem leaks into, reboots, clean teardown."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoscaler.sandbox.hosts import cgroups, netns, node_image
from autoscaler.sandbox.hosts.overlay import NodeFile, keep_journal
from autoscaler.sandbox.hosts.procs import proc_stat
from autoscaler.sandbox.hosts.ssh_hosts import SshHost, SshHostError, SshHosts


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


def test_the_image_is_keyed_by_its_package_list(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = node_image.image_path()
    assert first.parent == tmp_path / "gpu-autoscaler" / "node-images"
    monkeypatch.setattr(node_image, "PACKAGES", (*node_image.PACKAGES, "cloud-init"))
    assert node_image.image_path() != first


def test_the_image_has_kill_for_the_kubernetes_checkpoint_exec() -> None:
    # The drainer's checkpoint path runs `kill -<SIGNAL> 1` through pods/exec: procps.
    assert "procps" in node_image.PACKAGES
    image = node_image.image_path()
    if not (image / "etc" / "gpu-autoscaler-image").is_file():
        pytest.skip("the node image is not built here")
    assert (image / "usr" / "bin" / "kill").is_file()


def test_a_missing_requirement_is_named_and_nothing_falls_back(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # no cached image there
    monkeypatch.setattr(node_image.shutil, "which", lambda name: None)
    with pytest.raises(node_image.NodeImageError) as err:
        SshHosts(["solo"], tmp_path / "hosts").start()
    assert "systemd-container" in str(err.value) and "mmdebstrap" in str(err.value)
    assert not (tmp_path / "hosts" / "solo").exists()


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("systemd-nspawn") is None,
    reason="needs root and systemd-container")


def ssh(hosts: SshHosts, name: str, command: str, timeout: float = 30
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ssh", "-i", str(hosts.private_key), "-p", str(hosts.port), "-o", "BatchMode=yes",
         "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
         "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5", "-o", "ControlMaster=no",
         f"{hosts.user}@{hosts.address_of(name)}", command],
        capture_output=True, text=True, timeout=timeout)


def baked_layer(root: Path) -> Path:
    """A baked image's layer: a file of its own, one alpha's upper overrides, a directory
    of its own mode and a whiteout (char device 0/0, as overlayfs writes) of an image file."""
    (root / "opt/baked").mkdir(parents=True)
    (root / "opt/baked").chmod(0o750)
    (root / "opt/baked/from-layer").write_text("layer\n")
    (root / "usr/local/bin").mkdir(parents=True)
    (root / "usr/local/bin/hello").write_text("#!/bin/sh\necho hi from the layer\n")
    (root / "etc").mkdir()
    os.mknod(root / "etc/motd", 0o600 | stat.S_IFCHR, os.makedev(0, 0))
    return root


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHosts]:
    files = {"alpha": [NodeFile("/etc/hostname", "alpha\n"),
                       NodeFile("/usr/local/bin/hello", "#!/bin/sh\necho hi from alpha\n", 0o755),
                       NodeFile("/opt/baked/placed", "alpha's own\n")]}
    layers = {"alpha": [baked_layer(tmp_path_factory.mktemp("baked-layer"))]}
    with SshHosts(["alpha", "beta"], tmp_path_factory.mktemp("ssh-hosts"), files=files,
                  layers=layers) as h:
        yield h


@pytest.mark.slow
@needs_root
def test_each_host_is_a_booted_debian_12_with_systemd_and_sshd(hosts: SshHosts) -> None:
    for name in ("alpha", "beta"):
        address = hosts.address_of(name)
        assert address.startswith("169.254.77.")
        out = ssh(hosts, name, "cat /proc/1/comm; systemctl is-active ssh.service; "
                               ". /etc/os-release && echo $ID-$VERSION_ID; echo $HOME")
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["systemd", "active", "debian-12", "/root"]
    assert ssh(hosts, "alpha", "hostname").stdout.strip() == "alpha"
    assert ssh(hosts, "alpha", "hello").stdout.strip() == "hi from alpha"  # placed before boot
    assert hosts.address_of("alpha") != hosts.address_of("beta")
    assert hosts.host_key("alpha") != hosts.host_key("beta")


@pytest.mark.slow
@needs_root
def test_a_host_with_a_baked_layer_sees_it_under_its_own_files(hosts: SshHosts) -> None:
    out = ssh(hosts, "alpha", "cat /opt/baked/from-layer; hello; stat -c %a /opt/baked; "
                              "test -e /etc/motd || echo whited-out")
    assert out.stdout.split("\n")[:4] == ["layer", "hi from alpha", "750", "whited-out"], out.stderr
    assert ssh(hosts, "beta", "test -e /opt/baked || test ! -e /etc/motd").returncode == 1
    mounts = hosts.read_file("alpha", "/proc/self/mountinfo")
    root = next(line for line in mounts.splitlines() if line.split()[4] == "/")
    assert f"lowerdir={hosts.hosts['alpha'].layers[0]}:{hosts.image}" in root
    assert "/opt/baked/placed" in hosts.placed("alpha") and "/etc/hostname" in hosts.placed("alpha")


@pytest.mark.slow
@needs_root
def test_nothing_comes_from_this_machines_root_filesystem(hosts: SshHosts) -> None:
    # Installed here (scripts/install.sh), absent from the node image.
    assert Path("/usr/bin/prometheus").exists()
    assert ssh(hosts, "beta", "test -e /usr/bin/prometheus").returncode == 1
    assert ssh(hosts, "beta", f"test -e {hosts.workdir}").returncode == 1
    mounts = hosts.read_file("beta", "/proc/self/mountinfo")
    root = next(line for line in mounts.splitlines() if line.split()[4] == "/")
    assert f"lowerdir={hosts.image}" in root and f"upperdir={hosts.workdir}/beta/upper" in root


@pytest.mark.slow
@needs_root
def test_writes_stay_in_the_hosts_private_overlay(hosts: SshHosts) -> None:
    marker = "/etc/gpu-autoscaler-ssh-hosts-test"
    out = ssh(hosts, "alpha", f"echo alpha-only > {marker} && cat {marker}")
    assert out.stdout.strip() == "alpha-only", out.stderr
    assert not Path(marker).exists()  # the real machine is untouched
    assert hosts.image is not None and not (hosts.image / marker.lstrip("/")).exists()
    assert (hosts.workdir / "alpha" / "upper" / marker.lstrip("/")).exists()
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
    # Stopping sshd (a systemd unit in the host) keeps the host's filesystem too.
    hosts.stop_sshd("beta")
    assert ssh(hosts, "beta", "true", timeout=15).returncode == 255
    hosts.start_sshd("beta")
    assert ssh(hosts, "beta", "cat /etc/kept").stdout.strip() == "kept"


def sshd_cgroups(hosts: SshHosts, name: str, where: cgroups.Hierarchy) -> set[Path | None]:
    """The listening daemon's cgroups: a connection's own sshd, left by an earlier test's ssh
    and still ending, sits in a session scope, and a process may end while it is read."""
    def listener(pid: int) -> bool:
        fields = proc_stat(pid)  # None: it ended since the namespace was listed
        if fields is None or fields[0] != "sshd":
            return False
        parent = proc_stat(int(fields[2]))
        return parent is None or parent[0] != "sshd"
    host = hosts.hosts[name]
    return {cgroups.cgroup_of(pid, where) for pid in netns.pids_in(host.slot) if listener(pid)}


@pytest.mark.slow
@needs_root
def test_each_boot_has_a_cgroup_of_its_own(hosts: SshHosts) -> None:
    """Hosts that shared one tree raced on each other's unit cgroups (cgroups.py)."""
    where = cgroups.hierarchies()
    assert where, "no cgroup hierarchy found"
    for name in ("alpha", "beta"):
        own = hosts.hosts[name].cgroups
        assert len(own) == len(where) and all(c.name.startswith(f"{name}.") for c in own)
        for hierarchy, mine in zip(where, own, strict=True):
            assert sshd_cgroups(hosts, name, hierarchy) == {
                mine / "payload" / "system.slice" / "ssh.service"}


@pytest.mark.slow
@needs_root
def test_a_reboot_boots_the_same_overlay_again(hosts: SshHosts) -> None:
    before = ssh(hosts, "alpha", "cat /proc/sys/kernel/random/boot_id; "
                                 "echo disk > /etc/survives; echo ram > /run/vanishes")
    boots, first = hosts.boots("alpha"), hosts.hosts["alpha"].cgroups
    ssh(hosts, "alpha", "systemctl reboot")
    hosts.wait_booted("alpha", boots + 1)
    # The ended boot's cgroups are gone; the new boot has new ones.
    assert first and not any(c.exists() for c in first)
    assert hosts.hosts["alpha"].cgroups and not set(hosts.hosts["alpha"].cgroups) & set(first)
    after = ssh(hosts, "alpha", "cat /proc/sys/kernel/random/boot_id; cat /etc/survives; "
                                "test -e /run/vanishes || echo gone")
    assert after.returncode == 0, after.stderr
    boot_id, survives, gone = after.stdout.split()
    assert boot_id != before.stdout.split()[0]
    assert (survives, gone) == ("disk", "gone")
    # The journal is kept across boots: a unit that failed before the reboot can be read.
    previous = ssh(hosts, "alpha", "journalctl -b -1 -q -n 1 --no-pager -o cat")
    assert previous.returncode == 0 and previous.stdout.strip(), previous.stderr


@pytest.mark.slow
@needs_root
def test_teardown_stops_the_container_and_removes_namespace_veth_and_overlay(
        tmp_path: Path) -> None:
    h = SshHosts(["gamma"], tmp_path).start()
    slot = h.hosts["gamma"].slot
    nspawn = h.node_pid("gamma")
    # A daemon started over SSH (like slurmd) outlives its session.
    ssh(h, "gamma", "setsid sleep 300 >/dev/null 2>&1 < /dev/null &")
    pids = netns.pids_in(slot)
    assert len(pids) >= 4  # systemd, journald, sshd, sleep, ...
    h.stop()
    assert not slot.netns_path.exists()
    assert slot.veth_host not in netns.run_ip("-o", "link", "show").stdout
    assert not (tmp_path / "gamma" / "upper").exists()
    for pid in [nspawn, *pids]:
        assert not Path(f"/proc/{pid}").exists() or \
            Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


class StubbornNode:
    """A host's nspawn whose poweroff never ends by itself: stop() returns at the deadline."""

    def __init__(self) -> None:
        self.deadlines: list[float] = []

    def stop(self, timeout: float = 10.0) -> None:
        self.deadlines.append(timeout)

    def returncode(self) -> int | None:
        return -9


def test_a_power_off_waits_for_an_orderly_poweroff_and_a_teardown_does_not(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # No real namespace: nothing of another test's slot is listed, signalled or deleted.
    monkeypatch.setattr(netns, "pids_in", lambda slot: [])
    monkeypatch.setattr(netns, "delete", lambda slot: None)
    h = SshHosts(["warm"], tmp_path)
    h.hosts["warm"] = SshHost("warm", netns.Slot(1), tmp_path / "warm")
    h.hosts["warm"].node = node = StubbornNode()  # type: ignore[assignment]
    h.power_off("warm")  # a warm node's disk boots again: its poweroff gets the full wait
    assert node.deadlines == [20.0] and h.hosts["warm"].node is None
    h.hosts["warm"].node = node  # type: ignore[assignment]
    h.stop()  # its disk is thrown away: a short wait
    assert node.deadlines[1:] == [5.0] and h.hosts == {}


@pytest.mark.parametrize("console", ["Failed to start Fake NVIDIA driver", "Started everything"])
def test_a_hosts_journal_is_kept_when_a_unit_failed_to_start(tmp_path: Path, console: str) -> None:
    directory = tmp_path / "gpu-x"
    (directory / "upper/var/log/journal/abc").mkdir(parents=True)
    (directory / "upper/var/log/journal/abc/system.journal").write_text("entries")
    (directory / "console.log").write_text(f"[  OK  ] ...\n[FAILED] {console}\n")
    keep_journal("gpu-x", directory, directory / "upper")
    kept = directory / "journal" / "abc" / "system.journal"
    assert kept.exists() is console.startswith("Failed")


def test_a_boot_cgroup_is_made_wrapped_and_removed_deepest_first(tmp_path: Path) -> None:
    fake = cgroups.Hierarchy(tmp_path / "systemd", "name=systemd")
    assert cgroups.cgroup_of(where=fake) is None  # not mounted there: nothing changes
    assert cgroups.fresh("alpha", [fake]) == []
    assert cgroups.wrap(["systemd-nspawn", "-q"], []) == ["systemd-nspawn", "-q"]
    (fake.root / "cgroup.procs").parent.mkdir(parents=True)
    (fake.root / "cgroup.procs").write_text("")
    mine = cgroups.cgroup_of(where=fake)
    if mine is None:
        pytest.skip("this machine has no name=systemd line in /proc/self/cgroup")
    [boot] = cgroups.fresh("alpha", [fake])
    assert boot.parent == mine / cgroups.PARENT and boot.name.startswith(f"alpha.{os.getpid()}.")
    wrapped = cgroups.wrap(["systemd-nspawn", "-q"], [boot])
    assert wrapped[:2] == ["/bin/sh", "-c"] and wrapped[-2:] == ["systemd-nspawn", "-q"]
    assert f'echo $$ > "{boot / "cgroup.procs"}"' in wrapped[2]
    (boot / "payload" / "system.slice" / "ssh.service").mkdir(parents=True)
    assert cgroups.remove([boot]) and not boot.exists()

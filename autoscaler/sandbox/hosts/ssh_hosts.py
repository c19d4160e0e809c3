"""SSH test hosts: one booted minimal Debian 12 container per node, in its own network namespace.

Each host (RECIPES.md, "Booted test hosts") is what a cloud instance is to the roles:

* a network namespace with a veth pair in 169.254.77.0/24 (``netns.py``), the whole range
  blackholed on the machine first so nothing can leave if a veth is missing;
* the sandbox's node image (``node_image.py``, the "baked AMI") booted by
  ``systemd-nspawn --boot`` with systemd as PID 1, joined to that namespace, through a
  private overlay whose upper layer is ``<workdir>/<name>/upper``: everything the play
  writes lands there, the image stays clean, and nothing comes from this machine's own
  root filesystem (host files nspawn would copy in, resolv.conf and the time zone, are off);
* optionally, per host, extra read-only layers between the image and the upper layer
  (``layers``: a baked image's image-time part, ``stack/baked_images.py``), booted as
  ``--overlay=<image>:<layer>...:<upper>:/`` (the left-most is the lowest): the host sees
  the layer's files and its whiteouts hide image files, its own writes still win;
* sshd as the image's ``ssh.service`` on ``port``, with the host's own key and the client's
  authorized key: both, and any ``files`` the caller passes (a fake nvidia-smi, fake GPU
  device links), are placed into the upper layer before the first boot (``overlay.py``).

Each boot runs in a cgroup of its own (``cgroups.py``: hosts sharing one tree raced on
each other's unit cgroups). ``systemctl reboot`` inside a host makes nspawn exit with
status 133; a watcher thread boots the same overlay again, as a VM reboots. ``power_off``
and ``power_on`` are a stopped and started EC2 instance: the container goes, its upper
layer (the EBS volume) and namespace (the private IP) stay for the next boot. Teardown
stops each container by its nspawn PID (SIGTERM is an orderly poweroff, SIGKILL after a
deadline: 20 s for a power_off, whose disk boots again; 5 s for a teardown, whose disk
goes), kills whatever is left in its namespace and its cgroup, deletes namespaces,
veths, cgroups and overlays, and removes the blackhole route only if this object added it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

from autoscaler.sandbox.hosts import cgroups, netns, node_image, overlay
from autoscaler.sandbox.hosts.overlay import NodeFile
from autoscaler.sandbox.hosts.procs import (
    ManagedProcess,
    ProcessError,
    child_pids,
    port_open,
    stop_pids,
    wait_until,
)

log = logging.getLogger(__name__)
SSH_PORT = 2222
SSH_USER = "root"
BOOT_TIMEOUT_S = 120.0  # systemd reaches ssh.service in ~5 s alone; many boots share 2 cores
STOP_TIMEOUT_S = 20.0
# Teardown throws the host's disk away, so its orderly poweroff buys nothing worth waiting
# for: a host still running a Slurm job (its processes outlive the shutdown's SIGTERM to
# what remains) held its poweroff past the whole 20 s at the end of the warm-pool e2e test.
TEARDOWN_TIMEOUT_S = 5.0
REBOOT_STATUS = 133  # systemd-nspawn's exit status when the container asked for a reboot
NODE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root", "LANG": "C.UTF-8"}

SSHD_DROPIN = """\
# Placed by gpu-autoscaler's sandbox: key-only root login on the sandbox's SSH port.
Port {port}
PermitRootLogin prohibit-password
# No PAM: a logind session per connection costs every Ansible task dearly.
UsePAM no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
HostKey /etc/ssh/ssh_host_ed25519_key
UseDNS no
PrintMotd no
MaxStartups 200
MaxSessions 100
"""


class SshHostError(RuntimeError):
    pass


@dataclass
class SshHost:
    name: str
    slot: netns.Slot
    directory: Path
    node: ManagedProcess | None = None  # the systemd-nspawn process
    cgroups: list[Path] = field(default_factory=list)  # this boot's own (cgroups.py says why)
    boots: int = 0
    booted_at: float = 0.0  # monotonic time nspawn was last started
    boot_seconds: float | None = None  # first boot: nspawn started -> sshd answering
    reachable: bool = True
    layers: tuple[Path, ...] = ()  # read-only, between the image and the upper (lowest first)
    placed: tuple[str, ...] = ()  # node paths of the files placed in the upper before boot

    @property
    def address(self) -> str:
        return self.slot.ns_address

    @property
    def upper(self) -> Path:
        return self.directory / "upper"


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpu-autoscaler-sandbox",
                    "-f", str(path)], check=True, capture_output=True, timeout=30)


class SshHosts:
    """N booted SSH test hosts; use as a context manager or call ``start()``/``stop()``.

    ``routes``: extra addresses routed from each namespace to the machine (e.g. the shared
    controller address slurmd reaches slurmctld on). ``files``: per host name, files placed
    in its overlay before it boots. ``layers``: per host name, read-only directories stacked
    on the image, lowest first (a baked image's layer), below the host's own upper layer.
    """

    def __init__(self, names: Sequence[str], workdir: Path, *, port: int = SSH_PORT,
                 routes: Iterable[str] = (),
                 files: Mapping[str, Sequence[NodeFile]] | None = None,
                 layers: Mapping[str, Sequence[Path]] | None = None):
        if len(set(names)) != len(names) or not names:
            raise SshHostError(f"host names must be unique and non-empty: {list(names)}")
        self.names = list(names)
        self.workdir = Path(workdir).resolve()
        self.port = port
        self.user = SSH_USER
        self.routes = list(routes)
        self.files = {n: list(f) for n, f in (files or {}).items()}
        self.layers = {n: tuple(Path(p).resolve() for p in ls) for n, ls in (layers or {}).items()}
        for name, paths in self.layers.items():
            missing = [str(p) for p in paths if not p.is_dir()]
            if ":" in "".join(map(str, paths)) or missing:
                raise SshHostError(f"layers of {name} must be directories without ':': {missing}")
        self.hosts: dict[str, SshHost] = {}
        self.image: Path | None = None
        self._route: IO[str] | None = None  # our use of the blackhole route
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None

    # ---- public API -------------------------------------------------------------------

    @property
    def private_key(self) -> Path:
        return self.workdir / "client_key"

    def address_of(self, name: str) -> str:
        """The resolver seam: node name -> the address Ansible connects to."""
        return self._host(name).address

    def host_key(self, name: str) -> str:
        """The host's public SSH key (``ssh-ed25519 AAAA...``), for a known_hosts line."""
        return (self._host(name).directory / "ssh_host_ed25519_key.pub").read_text().strip()

    def placed(self, name: str) -> tuple[str, ...]:
        """Node paths of every file placed in the host's upper layer before its first boot
        (its SSH keys and drop-in, and the caller's ``files``): the instance's, not an image's."""
        return self._host(name).placed

    def start(self) -> SshHosts:
        node_image.check_requirements()
        self.image = node_image.ensure_image(self.workdir / "node-image-build.log")
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.private_key.exists():
            _keygen(self.private_key)
        try:
            self._create_namespaces()
            for host in self.hosts.values():
                self._prepare_overlay(host)
                self._boot(host)
            for host in self.hosts.values():  # booted in parallel, waited for in turn
                self._wait_ssh(host)
                host.boot_seconds = time.monotonic() - host.booted_at
        except BaseException:
            self.stop()
            raise
        self._watcher = threading.Thread(target=self._watch, name="ssh-hosts-reboots", daemon=True)
        self._watcher.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._watcher is not None:
            self._watcher.join(timeout=10)
            self._watcher = None
        with self._lock:
            for host in self.hosts.values():
                self._stop_host(host)
            if self._route is not None:
                netns.UNREACHABLE_ROUTE.release(self._route)
                self._route = None
            self.hosts.clear()

    def __enter__(self) -> SshHosts:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def node_pid(self, name: str) -> int:
        """PID of the host's systemd-nspawn (what teardown and crash cleanup stop)."""
        node = self._host(name).node
        if node is None or not node.alive():
            raise SshHostError(f"host {name} is not running")
        return node.pid

    def boots(self, name: str) -> int:
        return self._host(name).boots

    def stop_sshd(self, name: str) -> None:
        self.run(name, ["systemctl", "stop", "ssh.service"])

    def start_sshd(self, name: str) -> None:
        self.run(name, ["systemctl", "start", "ssh.service"])
        self._wait_ssh(self._host(name))

    def running(self, name: str) -> bool:
        node = self._host(name).node
        return node is not None and node.alive()

    def power_off(self, name: str) -> float:
        """Shut the host down as EC2 stops an instance; returns the seconds it took. Its
        upper layer, namespace and address are kept for ``power_on``."""
        with self._lock:
            host = self._host(name)
            began = time.monotonic()
            status = self._halt(host, STOP_TIMEOUT_S)
            took = time.monotonic() - began
        if status == 0:
            log.info("sandbox: %s powered off in %.1f s", name, took)
        else:  # SIGKILL after STOP_TIMEOUT_S: its disk may miss what was not synced
            log.warning("sandbox: %s did not power off cleanly (nspawn exit %s) in %.1f s",
                        name, status, took)
        return took

    def power_on(self, name: str) -> float:
        """Boot a powered-off host again from its kept upper layer in its kept namespace;
        returns the seconds from nspawn's start until sshd answered."""
        with self._lock:
            host = self._host(name)
            if host.node is not None:
                raise SshHostError(f"host {name} is running; power it off first")
            if not host.slot.netns_path.exists() or not host.upper.is_dir():
                raise SshHostError(f"host {name} has no namespace or overlay left to boot")
            self._boot(host)
        self._wait_ssh(host)  # not under the lock: the watcher keeps serving the others
        return time.monotonic() - host.booted_at

    def set_reachable(self, name: str, reachable: bool) -> None:
        """Link down: connections fail at once with 'no route to host'; state is kept."""
        host = self._host(name)
        netns.set_link(host.slot, up=reachable)
        if reachable:
            netns.run_ip("addr", "replace", f"{host.slot.host_address}/30",
                         "dev", host.slot.veth_host)
            for dest in self.routes:
                netns.add_ns_route(host.slot, dest)
        host.reachable = reachable

    def wait_booted(self, name: str, boots: int, timeout: float = BOOT_TIMEOUT_S) -> None:
        """Until the host has booted ``boots`` times and answers SSH again (after a reboot)."""
        host = self._host(name)
        wait_until(lambda: host.boots >= boots and port_open(host.address, self.port), timeout,
                   f"{name} booted {boots} times")

    def run(self, name: str, argv: Sequence[str], *, input_text: str | None = None,
            timeout: float = 30.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a command inside the booted host (its namespaces and root), as root."""
        leader = self._leader(self._host(name))
        enter = ["nsenter", f"--target={leader}", "--mount", "--uts", "--ipc", "--net", "--pid",
                 "--root", "--wd"]
        proc = subprocess.run([*enter, *argv], input=input_text, capture_output=True, text=True,
                              timeout=timeout, env=NODE_ENV)
        if check and proc.returncode != 0:
            raise SshHostError(f"{name}: {shlex.join(argv)} exited {proc.returncode}: "
                               f"{proc.stderr.strip()}")
        return proc

    def write_file(self, name: str, path: str, content: str, mode: int = 0o644) -> None:
        """Write a file in a running host's filesystem (e.g. a fake kubeadm)."""
        script = f"mkdir -p {shlex.quote(os.path.dirname(path))} && cat > {shlex.quote(path)}" \
                 f" && chmod {mode:o} {shlex.quote(path)}"
        self.run(name, ["/bin/sh", "-c", script], input_text=content)

    def read_file(self, name: str, path: str) -> str:
        return self.run(name, ["/bin/cat", path]).stdout

    # ---- internals --------------------------------------------------------------------

    def _host(self, name: str) -> SshHost:
        try:
            return self.hosts[name]
        except KeyError:
            raise SshHostError(f"no SSH test host named {name!r}") from None

    def _create_namespaces(self) -> None:
        if self._route is None:
            self._route = netns.UNREACHABLE_ROUTE.acquire()
        with netns.allocation_lock():
            for name, slot in zip(self.names, netns.allocate_slots(len(self.names)), strict=True):
                netns.create(slot)
                self.hosts[name] = SshHost(name, slot, self.workdir / name,
                                           layers=self.layers.get(name, ()))
                for dest in self.routes:
                    netns.add_ns_route(slot, dest)

    def _prepare_overlay(self, host: SshHost) -> None:
        """Host key, authorized key, sshd drop-in and the caller's files, in the upper layer."""
        if self.image is None:
            raise SshHostError("the node image is not ready")
        host.directory.mkdir(parents=True, exist_ok=True)
        key = host.directory / "ssh_host_ed25519_key"
        if not key.exists():
            _keygen(key)
        files = [
            NodeFile("/etc/ssh/ssh_host_ed25519_key", key.read_text(), 0o600),
            NodeFile("/etc/ssh/ssh_host_ed25519_key.pub", key.with_suffix(".pub").read_text()),
            NodeFile("/etc/ssh/sshd_config.d/gpu-autoscaler-sandbox.conf",
                     SSHD_DROPIN.format(port=self.port), 0o644),
            NodeFile("/root/.ssh/authorized_keys",
                     self.private_key.with_suffix(".pub").read_text(), 0o600),
            *self.files.get(host.name, []),
        ]
        host.placed = overlay.prepare(host.upper, [*reversed(host.layers), self.image], files)

    def _boot(self, host: SshHost) -> None:
        if self.image is None:
            raise SshHostError("the node image is not ready")
        overlay = ":".join(map(str, [self.image, *host.layers, host.upper, "/"]))
        argv = ["systemd-nspawn", "--quiet", f"--directory={self.image}",
                f"--overlay={overlay}", "--register=no", "--keep-unit",
                "--boot", f"--network-namespace-path={host.slot.netns_path}",
                f"--machine={host.name}", "--resolv-conf=off", "--timezone=off",
                "--link-journal=no"]
        host.cgroups = cgroups.fresh(host.name)
        host.booted_at = time.monotonic()
        host.node = ManagedProcess(f"node-{host.name}", cgroups.wrap(argv, host.cgroups),
                                   host.directory / "console.log")
        host.boots += 1

    def _end_boot(self, host: SshHost) -> None:
        """What the ended boot left in its cgroups is stopped, and the cgroups removed."""
        if host.cgroups:
            stop_pids(cgroups.pids(host.cgroups), timeout=5.0)
            if not cgroups.remove(host.cgroups):
                log.warning("sandbox: %s: cgroups %s still in use", host.name, host.cgroups)
            host.cgroups = []

    def _wait_ssh(self, host: SshHost) -> None:
        if host.reachable:
            wait_until(lambda: port_open(host.address, self.port), BOOT_TIMEOUT_S,
                       f"sshd of {host.name}", proc=host.node)

    def _leader(self, host: SshHost) -> int:
        """The container's PID 1: nspawn's child in another PID namespace."""
        node = host.node
        if node is None or not node.alive():
            raise SshHostError(f"host {host.name} is not running")
        ours = os.readlink(f"/proc/{node.pid}/ns/pid")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for pid in child_pids(node.pid):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/ns/pid") != ours:
                        return pid
            time.sleep(0.1)
        raise SshHostError(f"host {host.name}: no container init under nspawn {node.pid}")

    def _watch(self) -> None:
        """Boot a host again when its systemd asked for a reboot (nspawn exit 133)."""
        while not self._stopping.wait(0.5):
            with self._lock:
                for host in self.hosts.values():
                    if self._stopping.is_set() or host.node is None or host.node.alive():
                        continue
                    status = host.node.returncode()
                    host.node.stop()
                    host.node = None
                    self._end_boot(host)
                    if status == REBOOT_STATUS:
                        log.info("sandbox: %s rebooted; booting its overlay again", host.name)
                        self._boot(host)
                    else:
                        log.warning("sandbox: %s powered off (nspawn exit %s)", host.name, status)

    def _halt(self, host: SshHost, timeout: float) -> int | None:
        """End the running boot: SIGTERM makes nspawn ask systemd for an orderly poweroff
        (exit 0), SIGKILL follows after ``timeout``. Returns nspawn's exit status."""
        status = None
        if host.node is not None:
            with contextlib.suppress(ProcessError, OSError, subprocess.SubprocessError):
                host.node.stop(timeout=timeout)
            status = host.node.returncode()
        host.node = None
        stop_pids(netns.pids_in(host.slot), timeout=5.0)  # what nspawn left behind
        self._end_boot(host)
        return status

    def _stop_host(self, host: SshHost) -> None:
        self._halt(host, TEARDOWN_TIMEOUT_S)
        netns.delete(host.slot)
        overlay.keep_journal(host.name, host.directory, host.upper)
        shutil.rmtree(host.upper, ignore_errors=True)

"""SSH test hosts in network namespaces, for running the real playbook over real SSH.

Each host (RECIPES.md, "SSH test hosts for Ansible") is:

* a network namespace with a veth pair in 169.254.77.0/24 (``netns.py``), the whole range
  blackholed on the machine first so nothing can leave if a veth is missing;
* an *anchor* process living in that namespace plus private UTS and mount namespaces: it
  sets the hostname to the node name, mounts an overlay of ``/`` whose upper layer is a
  private tmpfs, binds /proc, /sys, /dev, a fresh /run and a clean /root into it, chroots
  there and sleeps. The host's filesystem lives as long as the anchor, so roles writing
  /etc/... never touch the real machine, and sshd can be stopped and started again
  without losing what the play wrote;
* sshd (port 2222, its own host key, key-only root login) started inside the anchor's
  namespaces and root with ``nsenter``, never ``ip netns exec`` (that remounts /sys and
  services started over SSH, e.g. slurmd, would find no /sys/fs/cgroup).

Teardown stops every process left in each namespace by PID, deletes namespaces and veths,
and removes the blackhole route only if this object added it.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from autoscaler.sandbox import netns
from autoscaler.sandbox.procs import ManagedProcess, ProcessError, port_open, wait_until

SSH_PORT = 2222
SSH_USER = "root"
START_TIMEOUT_S = 20.0

SSHD_CONFIG = """\
Port {port}
ListenAddress {address}
HostKey {host_key}
PidFile none
UsePAM no
StrictModes no
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
AuthorizedKeysFile {authorized_keys}
UseDNS no
PrintMotd no
MaxStartups 200
MaxSessions 100
Subsystem sftp internal-sftp
"""


class SshHostError(RuntimeError):
    pass


@dataclass
class SshHost:
    name: str
    slot: netns.Slot
    directory: Path
    anchor: ManagedProcess | None = None
    sshd: ManagedProcess | None = None
    reachable: bool = True

    @property
    def address(self) -> str:
        return self.slot.ns_address

    @property
    def home(self) -> Path:
        return self.directory / "home"


@dataclass
class _Keys:
    private_key: Path
    public_key: Path = field(init=False)

    def __post_init__(self) -> None:
        self.public_key = self.private_key.with_suffix(".pub")


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpu-autoscaler-sandbox",
                    "-f", str(path)], check=True, capture_output=True, timeout=30)


class SshHosts:
    """N SSH test hosts; use as a context manager or call ``start()``/``stop()``.

    ``binds``: directories of the real machine bound read-write at the same path inside
    every host (e.g. a Slurm cluster's log directory). ``hidden``: directories of the real
    machine each host sees empty instead (e.g. the controller's munge socket directory, whose
    socket and lock a host's own munged must not trip over). ``routes``: extra addresses
    routed from each namespace to the machine (e.g. the shared controller address).
    """

    def __init__(self, names: Sequence[str], workdir: Path, *, port: int = SSH_PORT,
                 binds: Iterable[Path] = (), hidden: Iterable[Path] = (),
                 routes: Iterable[str] = (), overlay_size: str = "512m"):
        if len(set(names)) != len(names) or not names:
            raise SshHostError(f"host names must be unique and non-empty: {list(names)}")
        self.names = list(names)
        self.workdir = Path(workdir).resolve()
        self.port = port
        self.user = SSH_USER
        self.binds = [Path(b).resolve() for b in binds]
        self.hidden = [Path(h).resolve() for h in hidden]
        self.routes = list(routes)
        self.overlay_size = overlay_size
        self.hosts: dict[str, SshHost] = {}
        self._keys = _Keys(self.workdir / "client_key")
        self._added_route = False

    # ---- public API -------------------------------------------------------------------

    @property
    def private_key(self) -> Path:
        return self._keys.private_key

    def address_of(self, name: str) -> str:
        """The resolver seam: node name -> the address Ansible connects to."""
        return self._host(name).address

    def netns_path(self, name: str) -> Path:
        return self._host(name).slot.netns_path

    def host_side_address(self, name: str) -> str:
        """The machine's end of this host's veth (what the host sees as its gateway)."""
        return self._host(name).slot.host_address

    def anchor_pid(self, name: str) -> int:
        anchor = self._host(name).anchor
        if anchor is None or not anchor.alive():
            raise SshHostError(f"host {name} is not running")
        return anchor.pid

    def start(self) -> SshHosts:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.private_key.exists():
            _keygen(self.private_key)
        try:
            self._create_namespaces()
            for host in self.hosts.values():
                self._prepare_files(host)
                self._start_anchor(host)
                self.start_sshd(host.name)  # waits until sshd answers
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for host in self.hosts.values():
            self._stop_host(host)
        if self._added_route:
            netns.remove_unreachable_route()
            self._added_route = False
        self.hosts.clear()

    def __enter__(self) -> SshHosts:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def stop_sshd(self, name: str) -> None:
        host = self._host(name)
        if host.sshd is not None:
            host.sshd.stop()
            host.sshd = None

    def start_sshd(self, name: str) -> None:
        host = self._host(name)
        if host.sshd is not None and host.sshd.alive():
            return
        cfg = host.directory / "sshd_config"
        host.sshd = ManagedProcess(
            f"sshd-{name}", [*self._enter_argv(host), "/usr/sbin/sshd", "-D", "-e", "-f", str(cfg)],
            host.directory / "sshd.log")
        if host.reachable:
            wait_until(lambda: port_open(host.address, self.port), START_TIMEOUT_S,
                       f"sshd of {name}", proc=host.sshd)

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

    def run(self, name: str, argv: Sequence[str], *, input_text: str | None = None,
            timeout: float = 30.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a command inside the host's view (namespaces and overlay root)."""
        host = self._host(name)
        proc = subprocess.run([*self._enter_argv(host), *argv], input=input_text,
                              capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise SshHostError(f"{name}: {shlex.join(argv)} exited {proc.returncode}: "
                               f"{proc.stderr.strip()}")
        return proc

    def write_file(self, name: str, path: str, content: str, mode: int = 0o644) -> None:
        """Write a file in the host's private filesystem (e.g. a fake nvidia-smi)."""
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
        with netns.allocation_lock():
            self._added_route = netns.ensure_unreachable_route()
            for name, slot in zip(self.names, netns.allocate_slots(len(self.names)), strict=True):
                netns.create(slot)
                self.hosts[name] = SshHost(name, slot, self.workdir / name)
                for dest in self.routes:
                    netns.add_ns_route(slot, dest)

    def _prepare_files(self, host: SshHost) -> None:
        (host.home / ".ssh").mkdir(parents=True, exist_ok=True, mode=0o700)
        authorized = host.home / ".ssh" / "authorized_keys"
        authorized.write_text(self._keys.public_key.read_text())
        authorized.chmod(0o600)
        host_key = host.directory / "ssh_host_ed25519_key"
        if not host_key.exists():
            _keygen(host_key)
        (host.directory / "sshd_config").write_text(SSHD_CONFIG.format(
            port=self.port, address=host.address, host_key=host_key,
            authorized_keys=authorized))

    def _anchor_script(self, host: SshHost) -> str:
        q = shlex.quote
        layer = q(str(host.directory / "layer"))
        root = f"{layer}/root"
        lines = [
            "set -e",
            f"hostname {q(host.name)}",
            f"mkdir -p {layer}",
            f"mount -t tmpfs -o mode=755,size={q(self.overlay_size)} tmpfs {layer}",
            f"mkdir {layer}/upper {layer}/work {root}",
            f"mount -t overlay overlay -o lowerdir=/,upperdir={layer}/upper,workdir={layer}/work"
            f" {root}",
            f"mount --rbind /proc {root}/proc",
            f"mount --rbind /sys {root}/sys",
            f"mount --rbind /dev {root}/dev",
            f"mount -t tmpfs -o mode=755,size=64m tmpfs {root}/run",
            f"mkdir -m 755 {root}/run/sshd",
            f"mount --bind {q(str(host.home))} {root}/root",
        ]
        for path in [host.directory, *self.binds]:
            lines += [f"mkdir -p {q(root + str(path))}",
                      f"mount --bind {q(str(path))} {q(root + str(path))}"]
        for path in self.hidden:
            lines += [f"mkdir -p {q(root + str(path))}",
                      f"mount -t tmpfs -o mode=755,size=16m tmpfs {q(root + str(path))}"]
        lines.append(f"exec chroot {root} /bin/sleep infinity")
        return "\n".join(lines)

    def _start_anchor(self, host: SshHost) -> None:
        host.anchor = ManagedProcess(
            f"anchor-{host.name}",
            ["nsenter", f"--net={host.slot.netns_path}", "unshare", "--uts", "--mount",
             "--propagation", "private", "/bin/sh", "-c", self._anchor_script(host)],
            host.directory / "anchor.log")
        # The anchor execs `sleep` once its mounts are ready: its root then differs from ours.
        wait_until(lambda: os.readlink(f"/proc/{host.anchor.pid}/root") != "/",  # type: ignore[union-attr]
                   START_TIMEOUT_S, f"filesystem view of {host.name}", proc=host.anchor)

    def _enter_argv(self, host: SshHost) -> list[str]:
        pid = self.anchor_pid(host.name)
        return ["nsenter", f"--target={pid}", "--mount", "--uts", "--net", "--root", "--wd"]

    def _stop_host(self, host: SshHost) -> None:
        for proc in (host.sshd, host.anchor):
            if proc is not None:
                with contextlib.suppress(ProcessError, OSError, subprocess.SubprocessError):
                    proc.stop(timeout=5)
        host.sshd = host.anchor = None
        _kill_pids(netns.pids_in(host.slot))
        netns.delete(host.slot)


def _kill_pids(pids: list[int], timeout: float = 5.0) -> None:
    """Stop what the play started inside a namespace (slurmd, munged): TERM, then KILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        pids = [p for p in pids if _alive(p)]
        if not pids:
            return


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie we are not the parent of still answers kill(0); treat it as gone.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    return False

"""Network namespaces for sandbox hosts: addresses in 169.254.77.0/24 only.

Slot ``i`` (1..63) owns the /30 ``169.254.77.(4i-4)``: the host side of its veth pair is
``.(4i-3)`` and the namespace side ``.(4i-2)``. 169.254.77.254 stays free for the shared
controller address that namespaced slurmd daemons reach (see RECIPES.md). Slots are
allocated under a file lock so several sandboxes (tests, benchmarks) can coexist.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import logging
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

SANDBOX_NET = ipaddress.ip_network("169.254.77.0/24")
MAX_SLOT = 63
LOCK_FILE = Path("/run/lock/gpu-autoscaler-netns.lock")
NETNS_DIR = Path("/run/netns")
NAME_PREFIX = "gas"
CONTROLLER_ADDRESS = "169.254.77.254"  # on lo; every namespace routes it to the host


log = logging.getLogger(__name__)


class NetnsError(RuntimeError):
    pass


def run_ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


@dataclass(frozen=True)
class Slot:
    """One /30 in the sandbox range and the names derived from it."""

    index: int

    @property
    def netns(self) -> str:
        return f"{NAME_PREFIX}{self.index}"

    @property
    def veth_host(self) -> str:
        return f"{NAME_PREFIX}{self.index}h"

    @property
    def veth_ns(self) -> str:
        return f"{NAME_PREFIX}{self.index}n"

    @property
    def host_address(self) -> str:
        return str(SANDBOX_NET.network_address + 4 * self.index - 3)

    @property
    def ns_address(self) -> str:
        return str(SANDBOX_NET.network_address + 4 * self.index - 2)

    @property
    def netns_path(self) -> Path:
        return NETNS_DIR / self.netns


@contextlib.contextmanager
def allocation_lock() -> Iterator[None]:
    LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK_FILE, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _used_slots() -> set[int]:
    """Slots whose namespace, veth or host address already exists (ours or anyone's)."""
    used: set[int] = set()
    names = set(os.listdir(NETNS_DIR)) if NETNS_DIR.is_dir() else set()
    links = run_ip("-o", "link", "show").stdout
    addrs = run_ip("-o", "-4", "addr", "show").stdout
    for i in range(1, MAX_SLOT + 1):
        slot = Slot(i)
        if (slot.netns in names or f" {slot.veth_host}@" in links
                or f" {slot.host_address}/" in addrs):
            used.add(i)
    return used


def allocate_slots(count: int) -> list[Slot]:
    """Pick ``count`` free slots; call under ``allocation_lock`` and create them before unlocking."""
    free = [i for i in range(1, MAX_SLOT + 1) if i not in _used_slots()]
    if len(free) < count:
        raise NetnsError(f"need {count} sandbox network slots, only {len(free)} free")
    return [Slot(i) for i in free[:count]]


class SharedSetting:
    """A machine-wide network setting that several sandboxes use at once (tests run in
    parallel): the blackhole route, the controller address on ``lo``.

    Each user holds a shared ``flock`` on the setting's lock file for as long as it uses
    it (the kernel drops it if the user dies); the last user to leave, the one that gets
    the lock exclusively, removes the setting. Adding happens under the shared lock, so it
    never races a removal."""

    def __init__(self, name: str, present: Callable[[], bool], add: Callable[[], None],
                 remove: Callable[[], None], lock_dir: Path = LOCK_FILE.parent):
        self.lock_file = lock_dir / f"gpu-autoscaler-{name}.users"
        self._present, self._add, self._remove = present, add, remove

    @contextlib.contextmanager
    def used(self) -> Iterator[None]:
        fh = self.acquire()
        try:
            yield
        finally:
            self.release(fh)

    def acquire(self) -> IO[str]:
        """Use the setting (added if missing); hand the result to :meth:`release`."""
        self.lock_file.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.lock_file, "a")  # noqa: SIM115 - held until release()
        fcntl.flock(fh, fcntl.LOCK_SH)
        if not self._present():
            self._add()  # idempotent: two users may both find it missing
        return fh

    def release(self, fh: IO[str]) -> None:
        """Stop using it; the last user removes it."""
        try:
            fcntl.flock(fh, fcntl.LOCK_UN)
            self.remove_if_unused(fh)
        finally:
            fh.close()

    def remove_if_unused(self, fh: IO[str] | None = None) -> bool:
        """Remove the setting unless another user holds it (a crashed sandbox's cleanup
        calls this without having acquired it)."""
        if fh is None:
            self.lock_file.parent.mkdir(parents=True, exist_ok=True)
            with open(self.lock_file, "a") as own:
                return self.remove_if_unused(own)
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        try:
            if self._present():
                self._remove()
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
        return True


def _route_present() -> bool:
    return str(SANDBOX_NET) in run_ip("route", "show", "type", "unreachable").stdout.split()


def _add_route() -> None:
    run_ip("route", "replace", "unreachable", str(SANDBOX_NET))


def _remove_route() -> None:
    run_ip("route", "del", "unreachable", str(SANDBOX_NET), check=False)


# Blackholes the sandbox range so a missing veth never sends packets outside.
UNREACHABLE_ROUTE = SharedSetting("unreachable-route", _route_present, _add_route, _remove_route)


def _controller_present() -> bool:
    return f" {CONTROLLER_ADDRESS}/" in run_ip("-o", "-4", "addr", "show", "dev", "lo").stdout


def _add_controller() -> None:
    run_ip("addr", "replace", f"{CONTROLLER_ADDRESS}/32", "dev", "lo")


def _remove_controller() -> None:
    run_ip("addr", "del", f"{CONTROLLER_ADDRESS}/32", "dev", "lo", check=False)


# The shared address on lo that namespaced slurmd (and kubelets) reach the controller on.
CONTROLLER_ON_LO = SharedSetting("controller-address", _controller_present, _add_controller,
                                 _remove_controller)


def create(slot: Slot) -> None:
    """Namespace, veth pair and addresses for one slot; undone by ``delete``."""
    run_ip("netns", "add", slot.netns)
    try:
        run_ip("link", "add", slot.veth_host, "type", "veth", "peer", "name", slot.veth_ns)
        run_ip("link", "set", slot.veth_ns, "netns", slot.netns)
        run_ip("addr", "add", f"{slot.host_address}/30", "dev", slot.veth_host)
        run_ip("link", "set", slot.veth_host, "up")
        ns = ("-n", slot.netns)
        run_ip(*ns, "addr", "add", f"{slot.ns_address}/30", "dev", slot.veth_ns)
        run_ip(*ns, "link", "set", slot.veth_ns, "up")
        run_ip(*ns, "link", "set", "lo", "up")
    except NetnsError:
        delete(slot)
        raise


def add_ns_route(slot: Slot, destination: str) -> None:
    """Route ``destination`` (e.g. a shared controller address) from the namespace to the host."""
    run_ip("-n", slot.netns, "route", "replace", destination, "via", slot.host_address)


def set_link(slot: Slot, up: bool) -> None:
    """Take the host side of the veth down/up: the namespace becomes unreachable/reachable."""
    run_ip("link", "set", slot.veth_host, "up" if up else "down")


def pids_in(slot: Slot) -> list[int]:
    if not slot.netns_path.exists():
        return []
    out = run_ip("netns", "pids", slot.netns, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def delete(slot: Slot, wait_s: float = 10.0) -> None:
    """Remove the veth pair (deleting one end removes both) and the namespace. A host's
    last processes may still hold a copy of the namespace's mount for a moment after they
    were killed (its unlink is then refused, busy): tried again for up to ``wait_s``."""
    run_ip("link", "del", slot.veth_host, check=False)
    deadline = time.monotonic() + wait_s
    while slot.netns_path.exists():
        proc = run_ip("netns", "del", slot.netns, check=False)
        if not slot.netns_path.exists():
            return
        if time.monotonic() >= deadline:
            log.warning("sandbox: namespace %s not deleted: %s", slot.netns, proc.stderr.strip())
            return
        time.sleep(0.2)

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
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SANDBOX_NET = ipaddress.ip_network("169.254.77.0/24")
MAX_SLOT = 63
LOCK_FILE = Path("/run/lock/gpu-autoscaler-netns.lock")
NETNS_DIR = Path("/run/netns")
NAME_PREFIX = "gas"


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


def ensure_unreachable_route() -> bool:
    """Blackhole the sandbox range so a missing veth never sends packets outside.

    Returns True when this call added the route (so the caller removes it later).
    """
    routes = run_ip("route", "show", "type", "unreachable").stdout
    if str(SANDBOX_NET) in routes.split():
        return False
    run_ip("route", "add", "unreachable", str(SANDBOX_NET))
    return True


def remove_unreachable_route() -> None:
    """Remove the blackhole unless other sandbox veths still rely on it."""
    addrs = run_ip("-o", "-4", "addr", "show").stdout
    for line in addrs.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[1] != "lo" and fields[3].startswith("169.254.77."):
            return
    run_ip("route", "del", "unreachable", str(SANDBOX_NET), check=False)


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


def delete(slot: Slot) -> None:
    """Remove the veth pair (deleting one end removes both) and the namespace."""
    run_ip("link", "del", slot.veth_host, check=False)
    if slot.netns_path.exists():
        run_ip("netns", "del", slot.netns, check=False)

"""The sandbox's record of what it started, so ``sandbox down`` stops exactly that.

``<state dir>/sandbox.json`` holds the supervising process, every child process (by PID
*and* start time, so a PID the kernel reused for something else is never signalled), the
network namespaces of the SSH test hosts, and the routes/addresses it added. ``cleanup()``
is the safety net behind a normal stop: it works from the file alone, after the process
that wrote it died.
"""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from autoscaler.sandbox.hosts import netns
from autoscaler.sandbox.hosts.procs import child_pids, proc_stat, stop_pids

STATE_FILE = "sandbox.json"
CONTROLLER_ADDR = netns.CONTROLLER_ADDRESS


class Proc(BaseModel):
    model_config = ConfigDict(frozen=True)

    pid: int
    start: int  # /proc/<pid>/stat starttime: identifies the process, not just the number
    name: str = ""


class StackState(BaseModel):
    model_config = ConfigDict(extra="ignore")

    status: str = "starting"  # starting | ready | stopping | stopped | failed
    updated_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    supervisor: Proc | None = None
    children: list[Proc] = Field(default_factory=list)
    namespaces: list[str] = Field(default_factory=list)
    uses_route: bool = False  # the blackhole route (netns.UNREACHABLE_ROUTE)
    uses_controller_address: bool = False  # netns.CONTROLLER_ON_LO
    endpoints: dict[str, str] = Field(default_factory=dict)
    nodes: dict[str, dict[str, str]] = Field(default_factory=dict)
    error: str | None = None


def state_path(state_dir: Path) -> Path:
    return Path(state_dir) / STATE_FILE


def read_state(state_dir: Path) -> StackState | None:
    try:
        return StackState.model_validate_json(state_path(state_dir).read_text())
    except (OSError, ValueError):
        return None


def write_state(state_dir: Path, state: StackState) -> None:
    path = state_path(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(state.model_copy(update={"updated_at": datetime.now(UTC)})
                   .model_dump_json(indent=1))
    tmp.replace(path)


def proc_of(pid: int) -> Proc | None:
    fields = proc_stat(pid)
    if fields is None:
        return None
    return Proc(pid=pid, start=int(fields[20]), name=fields[0])


def children_of(pid: int) -> list[Proc]:
    """Live direct children of ``pid`` (each ManagedProcess leads its own process group)."""
    return [p for p in map(proc_of, child_pids(pid)) if p is not None]


def alive(proc: Proc) -> bool:
    """The same process is still running (same PID and same start time, not a zombie)."""
    fields = proc_stat(proc.pid)
    return fields is not None and int(fields[20]) == proc.start and fields[1] != "Z"


def stop_procs(procs: list[Proc], timeout: float = 10.0) -> list[Proc]:
    """SIGTERM each recorded process group, then SIGKILL what is left; returns survivors."""
    by_pid = {p.pid: p for p in procs}
    left = stop_pids(list(by_pid), timeout, alive=lambda pid: alive(by_pid[pid]), groups=True)
    return [by_pid[pid] for pid in left]


def remove_namespace(name: str) -> None:
    """Kill what runs in a recorded namespace and delete it with its veth pair."""
    if not name.startswith(netns.NAME_PREFIX) or not name[len(netns.NAME_PREFIX):].isdigit():
        return  # only ever touch our own naming scheme
    slot = netns.Slot(int(name[len(netns.NAME_PREFIX):]))
    stop_pids(netns.pids_in(slot), timeout=0.5)
    netns.delete(slot)


def cleanup(state_dir: Path, timeout: float = 10.0) -> list[str]:
    """Stop every recorded process and remove every recorded namespace; returns notes."""
    state = read_state(state_dir)
    if state is None:
        return [f"no sandbox state in {state_dir}"]
    notes = []
    procs = [p for p in [state.supervisor, *state.children] if p is not None]
    left = stop_procs([p for p in procs if alive(p) and p.pid != os.getpid()], timeout)
    notes += [f"could not stop pid {p.pid} ({p.name})" for p in left]
    for name in state.namespaces:
        if (netns.NETNS_DIR / name).exists():
            remove_namespace(name)
            notes.append(f"removed namespace {name}")
    # The test hosts' overlays (their containers are gone with their namespaces).
    for upper in Path(state_dir).glob("hosts/*/upper"):
        shutil.rmtree(upper, ignore_errors=True)
        notes.append(f"removed overlay {upper}")
    # The crashed process no longer holds its share: remove unless another sandbox does.
    if state.uses_controller_address:
        netns.CONTROLLER_ON_LO.remove_if_unused()
    if state.uses_route:
        netns.UNREACHABLE_ROUTE.remove_if_unused()
    write_state(state_dir, state.model_copy(update={"status": "stopped", "children": [],
                                                    "namespaces": []}))
    return notes

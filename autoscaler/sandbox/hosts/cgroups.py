"""A cgroup of its own for each boot of a test host.

``systemd-nspawn --keep-unit`` runs a container in the cgroup of whoever started it and
puts the container's systemd in ``<that cgroup>/payload``. Every host started from one
process therefore shared one tree: all their systemds created and removed the same
``payload/system.slice/<unit>`` directories (one ``ssh.service`` cgroup held the sshd of
six hosts). When two hosts started a unit of one name at the same moment (the fake NVIDIA
driver, after the driver reboot Ansible does on all hosts together), one host's systemd
removed the empty directory the other's was about to join, and the unit failed: "Failed
to attach to cgroup /system.slice/gpu-autoscaler-fake-nvidia-driver.service: No such file
or directory", "Failed at step CGROUP spawning /bin/sh" (a host's kept journal from a CI
run, 2026-12-02). More load made the window wider, so it failed only in full runs.

Each boot now starts nspawn in a fresh child of the caller's cgroup, removed after the
boot ends, in every hierarchy nspawn places itself by: the unified one (cgroup v2, which
nspawn reads its own cgroup from even where only v1 controllers are mounted; mounted once
at ``CGROUP2_MOUNT`` when the machine has it nowhere) and systemd's v1 ``name=systemd``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

SYSTEMD_V1 = Path("/sys/fs/cgroup/systemd")
CGROUP2_MOUNT = Path("/run/gpu-autoscaler-sandbox/cgroup2")
PARENT = "gpu-autoscaler-hosts"
_serial = itertools.count(1)


@dataclass(frozen=True)
class Hierarchy:
    root: Path  # where it is mounted
    key: str  # its field in /proc/<pid>/cgroup: "" for v2, "name=systemd"


def cgroup2_root() -> Path | None:
    """Where the unified hierarchy is mounted, mounting it at CGROUP2_MOUNT if nowhere."""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            return Path(fields[1])
    if os.geteuid() != 0:
        return None
    CGROUP2_MOUNT.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "cgroup2", "none", str(CGROUP2_MOUNT)],
                          capture_output=True, text=True, timeout=30, check=False)
    return CGROUP2_MOUNT if done.returncode == 0 else None


def hierarchies() -> list[Hierarchy]:
    out = []
    v2 = cgroup2_root()
    if v2 is not None:
        out.append(Hierarchy(v2, ""))
    if (SYSTEMD_V1 / "cgroup.procs").exists():
        out.append(Hierarchy(SYSTEMD_V1, "name=systemd"))
    return out


def cgroup_of(pid: int | str = "self", where: Hierarchy = Hierarchy(SYSTEMD_V1, "name=systemd")
              ) -> Path | None:
    """A process's directory in one hierarchy, or None without it."""
    if not (where.root / "cgroup.procs").exists():
        return None
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        _, key, path = line.split(":", 2)
        if key == where.key:
            return where.root / path.lstrip("/")
    return None


def fresh(name: str, where: list[Hierarchy] | None = None) -> list[Path]:
    """New, empty cgroups for one boot of host ``name``, one per hierarchy."""
    out = []
    serial = next(_serial)
    for hierarchy in hierarchies() if where is None else where:
        base = cgroup_of(where=hierarchy)
        if base is not None:
            path = base / PARENT / f"{name}.{os.getpid()}.{serial}"
            path.mkdir(parents=True)
            out.append(path)
    return out


def wrap(argv: list[str], cgroups: list[Path]) -> list[str]:
    """``argv`` started inside ``cgroups``: a shell moves itself there, then execs it (the
    PID stays the one the caller stops)."""
    if not cgroups:
        return argv
    moves = " && ".join(f'echo $$ > "{path / "cgroup.procs"}"' for path in cgroups)
    return ["/bin/sh", "-c", f'{moves} && exec "$@"', "sh", *argv]


def pids(cgroups: list[Path]) -> list[int]:
    """Every process left anywhere in the trees (the boot's strays, to stop)."""
    out: set[int] = set()
    for cgroup in cgroups:
        for procs in cgroup.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                out.update(int(p) for p in procs.read_text().split())
    return sorted(out)


def remove(cgroups: list[Path]) -> bool:
    """Remove the boot's trees, deepest first (a cgroup goes only when no process is in
    it); False when some of them stay."""
    for cgroup in cgroups:
        if cgroup.exists():
            dirs = sorted((p for p in cgroup.rglob("*") if p.is_dir()),
                          key=lambda p: -len(p.parts))
            for path in [*dirs, cgroup]:
                with contextlib.suppress(OSError):
                    path.rmdir()
    return not any(c.exists() for c in cgroups)

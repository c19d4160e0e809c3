"""SIGKILL a child service process with everything it started (terraform runs in its own
session), and read what moto ever launched: shared by the crash tests on real Terraform."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.sandbox.services.moto_server import MotoSandbox


def descendants(pid: int) -> list[int]:
    """``pid`` and everything it started."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo += children.get(current, [])
    return out


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def kill_tree(pid: int, killed: list[int]) -> None:
    """SIGKILL ``pid`` and its descendants (children first, so none is re-parented and
    missed), recording every PID in ``killed``; bounded wait until all are gone."""
    victims = descendants(pid)
    killed += victims
    for victim in reversed(victims):
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)
    wait_until(lambda: all(gone(p) for p in victims), 30, "the killed processes to exit")


def every_instance(moto: MotoSandbox, pool: str) -> dict[str, list[str]]:
    """Node tag -> instance ids of ``pool``, terminated ones included."""
    out: dict[str, list[str]] = {}
    pages = moto.client().get_paginator("describe_instances").paginate(
        Filters=[{"Name": "tag:pool", "Values": [pool]}])
    for page in pages:
        for reservation in page["Reservations"]:
            for inst in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
                out.setdefault(tags.get("node", "?"), []).append(inst["InstanceId"])
    return out


@pytest.fixture
def child_pids() -> Iterator[list[int]]:
    """Processes the test SIGKILLs; anything still alive at the end is killed by PID."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

"""The baked-image scenario on the sandbox stack, shared by its e2e test and
``benchmarks/bench_warm.py``: a team with a baked pool and a base pool of the same type on
one Slurm partition, the ``gpu-autoscaler image`` CLI against the stack's service config,
and what each bootstrap run did (its tags, the tasks that ran); and the e2e loop woken when
an operation ends (``WakingLoop``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from autoscaler.catalog import default_catalog
from autoscaler.fleet.store import FleetStore
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.snapshot import Snapshot
from autoscaler.policy import load_dir
from autoscaler.policy.models import TeamPolicy
from autoscaler.sandbox.stack.local import SandboxStack
from autoscaler.service.executor.advance import AdvanceReport
from autoscaler.service.executor.operations import WorkerPools
from tests.e2e.test_lifecycle_e2e import Loop

S = NodeState
_POOL = """\
  - name: {name}
    cloud: aws
    region: us-east-1
    instance_types: [g4dn.xlarge]
    capacity: {{on_demand_base: 1, spot_percent: 0}}
    min_nodes: {floor}
    max_nodes: {most}
    scale_up: {{pending_jobs: {pending}}}
    scale_down: {{gpu_utilization_below: 10, idle_for: {idle_for}, cooldown: 1s, max_draining_percent: 100}}
    bootstrap: {{timeout: 6m{bootstrap}}}
    cluster: {{kind: slurm, partition: gpu}}
"""


def pool_yaml(name: str, floor: int, *, most: int = 1, pending: bool = False, idle_for: str = "1s",
              bootstrap: str = "") -> str:
    """One on-demand g4dn.xlarge pool of team e2e on the sandbox's Slurm partition
    (``bootstrap``: more keys of its bootstrap block, after a comma)."""
    return _POOL.format(name=name, floor=floor, most=most, pending=str(pending).lower(),
                        idle_for=idle_for, bootstrap=bootstrap)


# Tasks of the image-time part only: a node from the baked image never runs them.
IMAGE_ONLY = {"Pin the NVIDIA driver to its branch", "Blacklist the nouveau driver",
              "Write the dcgm-exporter counters", "Reboot to load the NVIDIA driver"}
# Node-time tasks outside the start part: a warm node runs them before it is stopped, never
# again when it starts.
PREPARED = {"Declare the directories slurmd and munged need",
            "Create the Slurm configuration directory", "Write the slurmd options"}
# Start-part tasks: the health check and the join, never before a warm node is stopped.
STARTED = {"Query every GPU with nvidia-smi", "Install the cluster's slurm.conf",
           "Configure slurmd's unit", "Wait until slurmctld hears from slurmd"}


def write_policy(directory: Path, floor: int, prepull: Iterable[str] = ()) -> dict[str, TeamPolicy]:
    """The team's policy file; ``prepull``: the baked pool's ``bootstrap.prepull``."""
    directory.mkdir(parents=True, exist_ok=True)
    pulls = f", prepull: [{', '.join(prepull)}]" if prepull else ""
    text = "apiVersion: gpu-autoscaler/v1\nteam: e2e\npriority: high\npools:\n" + "".join(
        pool_yaml(name, floor, bootstrap=extra) for name, extra in (
            ("baked", ", image: baked, images_kept: 1" + pulls), ("cold", "")))
    (directory / "e2e.yaml").write_text(text)
    policies, errors = load_dir(directory, default_catalog())
    assert not errors, errors
    return policies


class WakingLoop(Loop):
    """The lifecycle e2e's ``Loop``, woken as the service's tick is: when an apply, an Ansible
    batch or a drain step ends, the next tick starts at once (its node's next step: the
    bootstrap after the apply, the stop after the warm part, READY after the join) instead
    of after the rest of the loop's 2 s wait; so does a tick that moved a node (the engine
    sees a node READY only at the next tick: the warm pool's refill). Otherwise it waits
    2 s, as ``Loop`` does."""

    def __init__(self, stack: SandboxStack, policies: dict[str, TeamPolicy]):
        super().__init__(stack, policies)
        self.woken = threading.Event()
        runner = self.executor.runner
        assert isinstance(runner, WorkerPools), runner
        runner.on_done = lambda what, report: self.woken.set()
        advance = self.executor.advance

        def advance_and_wake(snapshot: Snapshot | None = None) -> AdvanceReport:
            report = advance(snapshot)
            if report.changes:  # a node moved (READY, say): the engine sees it next tick
                self.woken.set()
            return report

        self.executor.advance = advance_and_wake  # type: ignore[method-assign]

    def until(self, done: Callable[[], bool], timeout: float, what: str,
              during: Callable[[], None] | None = None) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; "
                                     f"fleet {self.states()}; log tail: {self.log[-12:]}")
            self.woken.clear()  # before the tick: what ends or moves during it wakes the next
            self.tick()
            if during is not None:
                during()
            self.woken.wait(2)


def cli(stack: SandboxStack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autoscaler.cli", "image", *args, "e2e/baked",
                           "--config", str(stack.config_file)],
                          env={**os.environ, **stack.env(), "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=600)


def task_events(run_dir: Path) -> Iterator[dict[str, Any]]:
    """The per-host task results of a kept bootstrap run (its ``runner_on_*`` job events):
    each event's ``event_data`` (host, task, duration, ...)."""
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        data = event.get("event_data") or {}
        if data.get("task") and event.get("event", "").startswith("runner_on_"):
            yield data


def runs(stack: SandboxStack) -> dict[str, dict[str, Any]]:
    """Node -> its bootstrap run: the tags and part it ran with and the tasks that ran on it. Of a
    node's runs (a retried attempt, periodic health checks), the one that ran most tasks."""
    out: dict[str, dict[str, Any]] = {}
    for run_dir in sorted((stack.dir / "ansible-runs").glob("*/results.json")):
        result = json.loads(run_dir.read_text())
        run_dir = run_dir.parent
        tasks = {data["task"] for data in task_events(run_dir)}
        for node in result["hosts"]:
            if len(tasks) >= len(out.get(node, {}).get("tasks", ())):
                out[node] = {"tags": result.get("tags"), "part": result.get("part"),
                             "tasks": tasks, "dir": run_dir}
    return out


def runs_by_part(stack: SandboxStack) -> dict[str, dict[str, set[str]]]:
    """Node -> part it ran (``results.json``'s part: warm, start, full, ...) -> the tasks that
    ran in that part's runs: a warm node's entry and start apart."""
    out: dict[str, dict[str, set[str]]] = {}
    for path in sorted((stack.dir / "ansible-runs").glob("*/results.json")):
        result = json.loads(path.read_text())
        events = list(task_events(path.parent))
        for node in result["hosts"]:
            out.setdefault(node, {}).setdefault(result.get("part") or "", set()).update(
                data["task"] for data in events if data.get("host") == node)
    return out


def boot_to_ready(store: FleetStore, names: Iterable[str]) -> dict[str, dict[str, float]]:
    """Per node, seconds since REQUESTED of its PROVISIONING, BOOTSTRAPPING and READY, and
    ``boot_to_ready``: from the instance's creation (BOOTSTRAPPING) to READY (the Terraform
    apply before it is the same for a baked and a cold node). The newest life of each name."""
    at = {(t.node, t.to_state): t.at for t in store.transitions()}
    out = {}
    for n in names:
        steps = {s: round((at[(n, s)] - at[(n, "REQUESTED")]).total_seconds(), 1)
                 for s in ("PROVISIONING", "BOOTSTRAPPING", "READY")}
        out[n] = {**steps, "boot_to_ready": round(steps["READY"] - steps["BOOTSTRAPPING"], 1)}
    return out


__all__ = ["IMAGE_ONLY", "PREPARED", "STARTED", "S", "WakingLoop", "boot_to_ready", "cli", "runs",
           "runs_by_part", "task_events", "write_policy"]

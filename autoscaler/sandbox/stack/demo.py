"""The demo scenario: the sandbox, the real service loop and a scripted load.

Phases (each waits for the fleet to reach its goal, with a deadline):

1. **warm-up**: the demo policy's ``min_nodes: 1`` launches one spot node: planned,
   previewed ($/h delta), applied by Terraform (moto), bootstrapped by Ansible over SSH in
   its network namespace, joined to Slurm, READY once Slurm and Prometheus see it;
2. **load**: every GPU at 95% (> 80% for the 10 s window): the engine adds spot nodes;
3. **quiet**: load 0% and the policy file edited to ``min_nodes: 0`` (hot reload): idle
   nodes are drained in Slurm and destroyed by Terraform until no instance is left.

``DemoRun`` is what ``gpu-autoscaler demo`` shows live and what the end-to-end test runs.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoscaler.model.lifecycle import NodeState
from autoscaler.sandbox.stack.local import SandboxStack, StackOptions
from autoscaler.service.app import Service
from autoscaler.service.config.load import load_config
from autoscaler.service.wiring import build_service

log = logging.getLogger(__name__)
DEMO_POLICIES = Path(__file__).resolve().parents[3] / "examples" / "demo" / "policies"
# Executor timings for a sandbox whose "instances" boot in seconds.
DEMO_EXECUTOR = {"bootstrap_retry_backoff": "5s", "ready_wait_timeout": "3m",
                 "state_check_interval": "30s", "advance_budget": "3m"}
S = NodeState


class DemoError(RuntimeError):
    pass


@dataclass
class Phase:
    name: str
    description: str
    enter: Callable[[], None]
    done: Callable[[], bool]
    timeout_s: float


@dataclass
class DemoResult:
    completed: list[str] = field(default_factory=list)
    failed: str | None = None
    seconds: float = 0.0
    phase_seconds: dict[str, float] = field(default_factory=dict)


class DemoRun:
    def __init__(self, directory: Path, *, load: float = 95.0, tick: str = "5s",
                 phase_timeout_s: float = 300.0, policies: Path = DEMO_POLICIES):
        self.dir = Path(directory).resolve()
        self.load, self.tick, self.phase_timeout_s = load, tick, phase_timeout_s
        self.source_policies = policies
        self.policies_dir = self.dir / "policies"
        self.stack: SandboxStack | None = None
        self.service: Service | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.phase: Phase | None = None
        self.current_load = 0.0
        self._empty_since_tick: int | None = None
        self.started = time.monotonic()
        self._saved_env: dict[str, str | None] = {}

    # -- setup and teardown -------------------------------------------------------------
    def start(self) -> DemoRun:
        self.dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.policies_dir, ignore_errors=True)
        shutil.copytree(self.source_policies, self.policies_dir)  # the demo edits its copy
        for stale in ("fleet.db", "fleet.db-wal", "fleet.db-shm"):
            (self.dir / stale).unlink(missing_ok=True)
        # A new store hands out the old node names again: their pinned host keys go too.
        shutil.rmtree(self.dir / "ansible-runs" / "known_hosts.d", ignore_errors=True)
        (self.dir / "ansible-runs" / "known_hosts").unlink(missing_ok=True)  # before known_hosts.d
        shutil.rmtree(self.dir / "terraform", ignore_errors=True)
        options = StackOptions(policies_dir=self.policies_dir, util=0.0, tick_interval=self.tick,
                               executor=dict(DEMO_EXECUTOR))
        self.stack = SandboxStack(self.dir, options)
        if not self.stack.privileged:
            raise DemoError("the demo needs root and the packages of ./scripts/install.sh: its "
                            "nodes are SSH hosts in network namespaces that join a real Slurm")
        self.stack.start()
        env = self.stack.env()  # fake AWS keys for moto, the sandbox munge key
        self._saved_env = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        self.service = build_service(load_config(self.stack.config_file))
        self._thread = threading.Thread(target=self.service.run, args=(self._stop,),
                                        name="service", daemon=True)
        self._thread.start()
        self.started = time.monotonic()
        return self

    def stop(self) -> None:
        """Stop the service (its current step finishes), then the whole sandbox."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=600)
            self._thread = None
        if self.stack is not None:
            self.stack.stop()
        for key, value in self._saved_env.items():  # leave the caller's environment as it was
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env = {}

    def __enter__(self) -> DemoRun:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the scenario ---------------------------------------------------------------------
    def phases(self) -> list[Phase]:
        t = self.phase_timeout_s
        return [
            Phase("warm-up", "min_nodes 1: one spot node is planned, previewed, applied by "
                  "Terraform, bootstrapped by Ansible and joins Slurm",
                  lambda: self.set_load(0.0), lambda: self.count(S.READY) >= 1, t),
            Phase("load", f"every GPU at {self.load:.0f}% (> 80% for 10s): spot nodes are added",
                  lambda: self.set_load(self.load), lambda: self.count(S.READY) >= 2, t),
            Phase("quiet", "load 0% and min_nodes 0 (policy file edited, hot reload): idle "
                  "nodes are drained and destroyed", self._quiet, self.empty, t),
        ]

    def run(self, on_wait: Callable[[DemoRun], None] | None = None) -> DemoResult:
        result = DemoResult()
        for phase in self.phases():
            self.phase = phase
            log.info("demo phase %s: %s", phase.name, phase.description)
            began = time.monotonic()
            phase.enter()
            while not phase.done():
                if time.monotonic() - began > phase.timeout_s:
                    result.failed = f"{phase.name}: not done after {phase.timeout_s:.0f}s"
                    result.seconds = time.monotonic() - self.started
                    return result
                if on_wait is not None:
                    on_wait(self)
                time.sleep(1.0)
            result.phase_seconds[phase.name] = round(time.monotonic() - began, 1)
            result.completed.append(phase.name)
        result.seconds = round(time.monotonic() - self.started, 1)
        return result

    def set_load(self, util: float) -> None:
        if self.stack is not None:
            self.stack.set_load(util)
        self.current_load = util

    def _quiet(self) -> None:
        self.set_load(0.0)
        path = self.policies_dir / "demo.yaml"
        path.write_text(re.sub(r"\bmin_nodes: 1\b", "min_nodes: 0", path.read_text(), count=1))

    # -- what the phases and the view look at ---------------------------------------------------
    def status(self) -> dict[str, Any]:
        if self.service is None:
            return {}
        return self.service.status()

    def count(self, state: NodeState) -> int:
        if self.service is None:
            return 0
        return len(self.service.store.nodes(states=[state]))

    def empty(self) -> bool:
        """The fleet is empty, moto runs no instance, and the service has ticked since: the
        destroy ran in an actuation worker, and the next tick reports what it did."""
        if self.service is None or self.stack is None:
            return False
        ticks = self.service.loop.state.ticks
        if self.service.store.nodes() or self.stack.running_instances() != 0:
            self._empty_since_tick = None
            return False
        if self._empty_since_tick is None:
            self._empty_since_tick = ticks
        return ticks > self._empty_since_tick

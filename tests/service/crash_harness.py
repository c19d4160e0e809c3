"""Stop the executor at every store write and every side effect, restart it, check it converges.

Proxies around the store, the provisioner, the bootstrapper and the drainers call
``faults.hit(point)`` just before and just after each write or side effect; a fault plan
raises :class:`Crash` (a BaseException, like a SIGKILL nothing catches) at the points it
chooses. :class:`Scenario` plays the service loop (reconcile -> decide -> record ->
submit -> advance, the clock moving 30 s per tick) through a goal, and after a crash it
"restarts": it closes the store, opens the same SQLite file again and builds a new
executor and reconciler (no in-memory state survives). The world (cloud, Terraform
state, scheduler) is shared across restarts, as it would be.

Operations run inline (each advance does everything), deferred (one tick late: a crash
hits an operation in flight, deterministically) or on the service's real
:class:`WorkerPools` (``operations="workers"``: what ``terraform_world`` runs in a child
process that a test SIGKILLs while an apply or a bootstrap runs in a worker).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from autoscaler.catalog import default_catalog
from autoscaler.engine import decide
from autoscaler.engine.pricing import Prices
from autoscaler.fleet.store import FleetStore
from autoscaler.model.changes import Adopt, Create, Move, NodeChange
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.model.snapshot import GpuMetrics, NodeObservation, RunningJob, SchedulerNode, Snapshot
from autoscaler.policy.models import TeamPolicy, pool_key
from autoscaler.service.control import warm
from autoscaler.service.control.interruptions import InterruptionIntake, InterruptionSource
from autoscaler.service.control.reconciler import Reconciler
from autoscaler.service.executor import AdvanceReport, Executor, ExecutorSettings
from autoscaler.service.executor.operations import Inline, Kind, Operation, Runner, Work, WorkerPools

S = NodeState
STORE_WRITES = ("apply", "set_action_status", "record_plan", "audit")


class Crash(BaseException):
    def __init__(self, point: str):
        super().__init__(point)
        self.point = point


class Faults:
    """Base plan: never crash; count the points seen.

    A crash kills the whole "process": until the restart every thread of it (the tick and
    the operation workers) raises at its next store write or side effect, as a SIGKILL
    stops them all at once."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.armed = True
        self.dead: str | None = None  # the point the process died at, until the restart
        self._lock = threading.Lock()  # the tick and the workers hit points concurrently

    def hit(self, point: str) -> None:
        if not self.armed:
            return
        with self._lock:
            if self.dead is not None:
                raise Crash(self.dead)
            self.seen.append(point)
            if self.should_crash(point):
                self.dead = point
                raise Crash(point)

    def should_crash(self, point: str) -> bool:
        return False


class CrashAt(Faults):
    """Crash once, at the ``index``-th point of the run (0-based)."""

    def __init__(self, index: int):
        super().__init__()
        self.index = index

    def should_crash(self, point: str) -> bool:
        return len(self.seen) - 1 == self.index


class CrashOncePerPoint(Faults):
    """Crash the first time each distinct point is reached (``key`` maps a point to its
    identity), so one run with restarts covers them all."""

    def __init__(self, key: Callable[[str], str] = lambda p: p):
        super().__init__()
        self.key = key
        self.crashed: list[str] = []

    def should_crash(self, point: str) -> bool:
        ident = self.key(point)
        if ident in self.crashed:
            return False
        self.crashed.append(ident)
        return True


class _Proxy:
    """Forwards everything; ``wrapped`` methods hit the fault plan around the call."""

    wrapped: tuple[str, ...] = ()

    def __init__(self, inner: Any, faults: Faults, label: str):
        self._inner, self._faults, self._label = inner, faults, label

    def _detail(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        return ""

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        return f"{name}{self._detail(name, args, kwargs)}"

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in self.wrapped or not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            point = f"{self._label}.{self._call(name, args, kwargs)}"
            self._faults.hit(f"before {point}")
            out = attr(*args, **kwargs)
            self._faults.hit(f"after {point}")
            return out

        return call


class CrashingStore(_Proxy):
    wrapped = STORE_WRITES

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """A write of the one node door is named by its changes: ``move(n -> READY)``,
        ``create(team/pool)``, ``patch(n: progress,replacement_requested)``; a batch by
        its kinds of change, once each (``create(team/pool)+patch(n: ...)`` for a launch
        of five that flags the node it replaces: one write, all or nothing)."""
        if name != "apply":
            return super()._call(name, args, kwargs)
        kinds: dict[str, str] = {}
        for change in args[0]:
            label = _change(change)
            kinds.setdefault(node_of(label), label)
        return "+".join(kinds.values())

    def _detail(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        return f"({args[1]})" if name == "set_action_status" else ""


def _change(change: NodeChange) -> str:
    if isinstance(change, Move):
        return f"move({change.node} -> {change.to})"
    if isinstance(change, Create):
        return f"create({change.team}/{change.pool})"
    if isinstance(change, Adopt):
        return f"adopt({change.node.name})"
    written = [*change.fields.given(), *(["progress"] if change.progress is not None else [])]
    return f"patch({change.node}: {','.join(sorted(written))})"


class CrashingProvisioner(_Proxy):
    wrapped = ("apply", "mark_stale")

    def _detail(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        return f"({args[0].key}: {','.join(sorted(args[1])) if name == 'apply' else ''})"


class CrashingBootstrapper(_Proxy):
    wrapped = ("bootstrap",)

    def _detail(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        return f"({','.join(n.name for n in args[0])})"


class CrashingDrainer(_Proxy):
    wrapped = ("step", "cancel", "forget")

    def _detail(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        phase = f" {args[1].phase}" if name == "step" else ""
        return f"({args[0].name}{phase})"


def node_of(point: str) -> str:
    """A point's identity without node names: one crash per kind of point."""
    return re.sub(r"[a-z]+-[a-z0-9]+-\d+", "<node>", point)


def coarse(point: str) -> str:
    """A point's kind without node names nor the node lists of applies and batches."""
    kind = node_of(point)
    for call in ("terraform.apply", "ansible.bootstrap"):
        if call in kind:
            return kind.split("(")[0]
    return kind


class Deferred(Inline):
    """Operations run one tick late, at the start of the next advance, into its report:
    the worker pools' interleaving (decide and submit while an apply, a bootstrap batch
    or a drain step is in flight, its nodes' progress already written) made
    deterministic, so a crash can hit a running operation at any point. What is queued
    is lost with the process, as a worker's operation is by a SIGKILL."""

    def __init__(self, clock: Callable[[], datetime]):
        super().__init__(clock)
        self.queued: list[tuple[Operation, Work]] = []

    def start(self, kind: Kind, keys: Sequence[str], what: str, work: Work,
              report: AdvanceReport) -> bool:
        op = self._keys.take(kind, keys, what)
        if op is None:
            return False
        self.queued.append((op, work))
        return True

    def collect(self, into: AdvanceReport) -> None:
        queued, self.queued = self.queued, []
        for op, work in queued:
            try:
                work(into)
            finally:
                self._keys.give_back(op)


@dataclass
class World:
    """What survives a restart: everything outside the executor's process."""

    url: str
    policies: dict[str, TeamPolicy]
    provisioner: Any
    bootstrapper: Any
    drainers: dict[str, Any]
    address_of: Callable[[Node], str | None]
    clouds: Callable[[str, str], Any]
    sources: Sequence[InterruptionSource] = ()
    operations: Literal["inline", "deferred", "workers"] = "inline"
    jobs: Callable[[str], list[str]] = lambda name: []
    settings: ExecutorSettings = field(default_factory=ExecutorSettings)


@dataclass
class Scenario:
    world: World
    faults: Faults
    now: datetime
    step_s: float = 30.0
    crashes: list[str] = field(default_factory=list)
    ticks: int = 0

    def __post_init__(self) -> None:
        self._open()

    def _open(self) -> None:
        w, f = self.world, self.faults
        self.raw_store = FleetStore(w.url)
        self.store = CrashingStore(self.raw_store, f, "store")
        provisioner = CrashingProvisioner(w.provisioner, f, "terraform")
        drainers = {k: CrashingDrainer(d, f, k) for k, d in w.drainers.items()}
        self.executor = Executor(self.store, lambda: w.policies, provisioner,  # type: ignore[arg-type]
                                 CrashingBootstrapper(w.bootstrapper, f, "ansible"), drainers,
                                 w.address_of, w.settings, default_catalog(), self.clock,
                                 runner=self._runner())
        intake = InterruptionIntake(self.store, w.sources, w.settings, self.clock,  # type: ignore[arg-type]
                                    lambda: w.policies) if w.sources else None
        self.reconciler = Reconciler(self.store, provisioner, w.clouds, w.settings,  # type: ignore[arg-type]
                                     self.clock, policies=lambda: w.policies, interruptions=intake,
                                     repair=self.executor.repair)

    def _runner(self) -> Runner | None:
        if self.world.operations == "deferred":
            return Deferred(self.clock)
        if self.world.operations == "workers":
            return WorkerPools(self.clock, {"apply": 2, "bootstrap": 2, "drain": 2})
        return None

    def clock(self) -> datetime:
        return self.now

    def restart(self) -> None:
        # Workers still running reach their next point and die there (Faults.dead).
        assert self.executor.wait(30), "a worker outlived the crash"
        self.executor.close()
        self.raw_store.close()
        self.faults.dead = None
        self._open()

    def snapshot(self) -> Snapshot:
        nodes = {}
        for node in self.raw_store.nodes(states=[S.READY, S.DRAINING, S.INTERRUPTED]):
            jobs = [RunningJob(id=j, gpus=1, started_at=self.now) for j in self.world.jobs(node.name)]
            nodes[node.name] = NodeObservation(
                metrics=GpuMetrics(util_mean=50, util_max_idle_window=50, util_max=50,
                                   gpus_reporting=1, sample_age_s=5),
                scheduler=SchedulerNode(state="allocated" if jobs else "idle", gpus_total=1,
                                        gpus_allocated=len(jobs), jobs=jobs))
        return Snapshot(taken_at=self.now, nodes=nodes)

    def tick(self) -> None:
        self.ticks += 1
        self.now += timedelta(seconds=self.step_s)
        self.reconciler.run()
        # The service's decide: the warm pools out of decide()'s fleet, then their step.
        fleet, warm_nodes = warm.split(self.raw_store.fleet_view())
        snapshot = self.snapshot()
        plan = decide(self.world.policies, fleet, snapshot, self.now, catalog=default_catalog())
        plan = warm.apply(plan, self.world.policies, fleet, warm_nodes,
                          Prices(default_catalog(), snapshot, self.now), {},
                          lambda policies: {pool_key(t, p.name): "h1" for t, pol in policies.items()
                                            for p in pol.pools if p.warm_pool}, self.now)
        plan_id = self.store.record_plan(plan)
        self.executor.submit(plan, plan_id)
        self.executor.advance()

    def run_until(self, done: Callable[[], bool], max_ticks: int = 80,
                  between: Callable[[], None] | None = None) -> None:
        for _ in range(max_ticks):
            if done():
                return
            try:
                self.tick()
                if self.world.operations == "workers":  # what the tick handed over runs
                    self.executor.wait(30)
            except Crash as crash:
                self.crashes.append(self.faults.dead or crash.point)
                self.restart()
            if self.faults.dead is not None:  # a worker died: so did the process
                self.crashes.append(self.faults.dead)
                self.restart()
            if between is not None:
                between()
        raise AssertionError(f"no convergence after {max_ticks} ticks; fleet: "
                             f"{[(n.name, n.state.value) for n in self.raw_store.nodes()]}")

    def states(self) -> dict[str, NodeState]:
        return {n.name: n.state for n in self.raw_store.nodes(include_terminated=True)}

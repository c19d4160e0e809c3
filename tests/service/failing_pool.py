"""A pool whose bootstrap always fails, driven tick by tick on the fakes (executor inline,
backoffs read from the store into the engine's snapshot as the service loop does); used by
test_backoff.py and benchmarks/bench_loop.py."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from autoscaler.actuators.ansible import BootstrapRun, HostStatus
from autoscaler.catalog import default_catalog
from autoscaler.engine import decide
from autoscaler.model.node import Node
from autoscaler.model.plan import Hold, Launch
from autoscaler.model.snapshot_parts import Observed, assemble
from autoscaler.policy.models import TeamPolicy
from autoscaler.service.control.backoff import delay, launch_backoffs
from tests.fakes import FakeAnsible
from tests.service.executor_rig import Rig, make_rig, slurm_policy

TASK = "nvidia driver"


class FailingAnsible(FakeAnsible):
    """Every run fails on every host at the same task (a broken driver build)."""

    def bootstrap(self, nodes: Sequence[Node], policies: Mapping[str, TeamPolicy], *,
                  secrets: Mapping[str, str] | None = None) -> BootstrapRun:
        for node in nodes:
            self.fail[node.name] = (HostStatus.FAILED, TASK, "dkms build failed")
        return super().bootstrap(nodes, policies, secrets=secrets)


def floor_policy(**kw: Any) -> TeamPolicy:
    return slurm_policy(min_nodes=1, instance_types=["p3.2xlarge"], **kw)


def tick(rig: Rig) -> tuple[list[Launch], list[Hold]]:
    """One service tick on the fakes: backoffs into the snapshot, decide, submit, advance."""
    now = rig.clock()
    backoffs = launch_backoffs(rig.store, rig.policies, now)
    snapshot = assemble(Observed(taken_at=now), backoffs=[b.as_capacity_error() for b in backoffs])
    plan = decide(rig.policies, rig.store.fleet_view(), snapshot, now, catalog=default_catalog())
    rig.executor().submit(plan, rig.store.record_plan(plan))
    rig.advance()
    return ([a for a in plan.actions if isinstance(a, Launch)],
            [a for a in plan.actions if isinstance(a, Hold)])


def allowed_launches(minutes: float) -> int:
    """Launches the rule allows in ``minutes`` if every launch failed at once."""
    at, count = 0.0, 0
    while at < minutes:
        count += 1
        at += delay(count).total_seconds() / 60
    return count


def failing_rig(tmp_path: Path) -> Rig:
    tmp_path.mkdir(parents=True, exist_ok=True)
    return make_rig(tmp_path, policies={"vision": floor_policy()}, ansible=FailingAnsible())


def drive(rig: Rig, minutes: float, tick_s: float = 30) -> tuple[int, list[str]]:
    """Launches into the pool over ``minutes`` of ticks, and the backoff holds seen."""
    launches, holds = 0, []
    started = rig.clock()
    while rig.clock() - started < timedelta(minutes=minutes):
        launched, held = tick(rig)
        launches += sum(a.count for a in launched)
        holds += [h.reason for h in held if "launch-backoff" in h.reason]
        rig.clock.tick(tick_s)
    return launches, holds

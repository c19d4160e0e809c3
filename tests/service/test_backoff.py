"""Launch backoff: repeated failures of one cause hold a pool's launches (5 min doubling
to 30 min), the engine's Hold names the cause, count and next try, a success or a policy
change resets it, and a pool whose bootstrap always fails launches only as often as the
rule allows."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from autoscaler.actuators.ansible import BootstrapRun, HostStatus
from autoscaler.catalog import default_catalog
from autoscaler.engine import decide
from autoscaler.engine.plan import Hold, Launch
from autoscaler.engine.snapshot import Snapshot
from autoscaler.fleet.lifecycle import NodeState
from autoscaler.fleet.node import Node
from autoscaler.policy.models import Market, TeamPolicy
from autoscaler.service.backoff import cause_of, delay, fingerprint, launch_backoffs, with_backoffs
from tests.fakes import FakeAnsible
from tests.service.executor_rig import Rig, make_rig, slurm_policy

S = NodeState
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


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = make_rig(tmp_path, policies={"vision": floor_policy()}, ansible=FailingAnsible())
    yield r
    r.store.close()


def tick(rig: Rig) -> tuple[list[Launch], list[Hold]]:
    """One service tick on the fakes: backoffs into the snapshot, decide, submit, advance."""
    now = rig.clock()
    snapshot = with_backoffs(Snapshot(taken_at=now), launch_backoffs(rig.store, rig.policies, now))
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


def test_the_rule() -> None:
    assert [delay(n) for n in (1, 2, 3, 4, 9)] == [timedelta(minutes=m) for m in (5, 10, 20, 30, 30)]
    assert allowed_launches(30) == 3  # at 0, 5 and 15 min; the next would be at 35
    assert cause_of("bootstrap", "bootstrap failed 3 time(s); last: failed at task 'x y': boom") \
        == "bootstrap failed at task 'x y'"
    assert cause_of("provision", "terraform apply failed: InsufficientInstanceCapacity: no p3") \
        == "provision failed: InsufficientInstanceCapacity"


def test_always_failing_bootstrap_is_bounded_by_the_rule_and_the_hold_says_why(rig: Rig) -> None:
    launches, holds = 0, []
    started = rig.clock()
    while rig.clock() - started < timedelta(minutes=30):
        launched, held = tick(rig)
        launches += sum(a.count for a in launched)
        holds += held
        rig.clock.tick(30)
    assert 2 <= launches <= allowed_launches(30), launches
    reasons = [h.reason for h in holds if "launch-backoff" in h.reason]
    assert reasons, [h.reason for h in holds]
    last = reasons[-1]
    assert f"bootstrap failed at task '{TASK}'" in last and "time(s) in a row" in last
    assert "next try" in last
    [backoff] = launch_backoffs(rig.store, rig.policies, rig.clock())
    assert backoff.pool == "vision/gpu" and backoff.count == launches
    assert backoff.next_try == backoff.last_at + delay(backoff.count)


def outcome(rig: Rig, to: NodeState, reason: str = "") -> None:
    """A node of the pool launched under the current policy that ends in ``to``."""
    pool = rig.policies["vision"].pools[0]
    node = rig.store.create_node(team="vision", pool="gpu", cloud="aws", region="us-east-1",
                                 zone=None, instance_type="p3.2xlarge", market=Market.ON_DEMAND,
                                 now=rig.clock(), reason="test", meta={"policy": fingerprint(pool)})
    path = {S.READY: [S.PROVISIONING, S.BOOTSTRAPPING, S.READY],
            S.BOOTSTRAP_FAILED: [S.PROVISIONING, S.BOOTSTRAPPING, S.BOOTSTRAP_FAILED],
            S.PROVISION_FAILED: [S.PROVISIONING, S.PROVISION_FAILED]}[to]
    for state in path:
        rig.store.transition(node.name, state, rig.clock(), reason if state is to else "step")
    rig.clock.tick(60)


def test_counting_same_cause_in_a_row_success_and_policy_change_reset(rig: Rig) -> None:
    broken = f"bootstrap failed 3 time(s); last: failed at task '{TASK}': dkms"
    outcome(rig, S.BOOTSTRAP_FAILED, broken)
    outcome(rig, S.BOOTSTRAP_FAILED, broken)
    [b] = launch_backoffs(rig.store, rig.policies, rig.clock())
    assert b.count == 2 and b.next_try == b.last_at + timedelta(minutes=10)
    outcome(rig, S.PROVISION_FAILED, "terraform apply failed: InsufficientInstanceCapacity: none")
    [b] = launch_backoffs(rig.store, rig.policies, rig.clock())
    assert (b.count, b.cause) == (1, "provision failed: InsufficientInstanceCapacity")  # new cause
    outcome(rig, S.READY)
    assert launch_backoffs(rig.store, rig.policies, rig.clock()) == []  # a success resets
    outcome(rig, S.BOOTSTRAP_FAILED, broken)
    [b] = launch_backoffs(rig.store, rig.policies, rig.clock())
    assert b.count == 1
    rig.policies = {"vision": floor_policy(bootstrap={"timeout": "11m"})}  # the team fixed it
    assert launch_backoffs(rig.store, rig.policies, rig.clock()) == []

"""Launch backoff: repeated failures of one cause hold a pool's launches (5 min doubling
to 30 min), the engine's Hold names the cause, count and next try, a success or a policy
change resets it, and a pool whose bootstrap always fails launches only as often as the
rule allows."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from autoscaler.model import lifecycle
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.progress import NodeProgress
from autoscaler.policy.models import Market
from autoscaler.service.control.backoff import FAILED, cause_of, delay, fingerprint, launch_backoffs
from tests.fleet.writes import create_node, transition
from tests.service.executor_rig import Rig
from tests.service.failing_pool import TASK, allowed_launches, drive, failing_rig, floor_policy

S = NodeState


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = failing_rig(tmp_path)
    yield r
    r.store.close()


def test_the_rule() -> None:
    assert set(FAILED) == lifecycle.FAILED  # every failed state has a kind, and only those
    assert [delay(n) for n in (1, 2, 3, 4, 9, 250, 10**6)] == [
        timedelta(minutes=m) for m in (5, 10, 20, 30, 30, 30, 30)]  # 2^249 x 5 min overflowed
    assert allowed_launches(30) == 3  # at 0, 5 and 15 min; the next would be at 35
    assert cause_of("bootstrap", "bootstrap failed 3 time(s); last: failed at task 'x y': boom") \
        == "bootstrap failed at task 'x y'"
    assert cause_of("provision", "terraform apply failed: InsufficientInstanceCapacity: no p3") \
        == "provision failed: InsufficientInstanceCapacity"


def test_always_failing_bootstrap_is_bounded_by_the_rule_and_the_hold_says_why(rig: Rig) -> None:
    launches, holds = drive(rig, 30)
    assert 2 <= launches <= allowed_launches(30), launches
    assert holds
    assert f"bootstrap failed at task '{TASK}'" in holds[-1] and "time(s) in a row" in holds[-1]
    assert "next try" in holds[-1]
    [backoff] = launch_backoffs(rig.store, rig.policies, rig.clock())
    assert backoff.pool == "vision/gpu" and backoff.count == launches
    assert backoff.next_try == backoff.last_at + delay(backoff.count)


def outcome(rig: Rig, to: NodeState, reason: str = "", market: Market = Market.ON_DEMAND) -> None:
    """A node of the pool launched under the current policy that ends in ``to``."""
    pool = rig.policies["vision"].pools[0]
    node = create_node(rig.store, cooldown="up", now=rig.clock(), market=market,
                       progress=NodeProgress(policy=fingerprint(pool)))
    path = {S.READY: [S.PROVISIONING, S.BOOTSTRAPPING, S.READY],
            S.BOOTSTRAP_FAILED: [S.PROVISIONING, S.BOOTSTRAPPING, S.BOOTSTRAP_FAILED],
            S.PROVISION_FAILED: [S.PROVISIONING, S.PROVISION_FAILED]}[to]
    for state in path:
        transition(rig.store, node.name, state, rig.clock(), reason if state is to else "step")
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


def test_spot_out_of_stock_is_left_to_the_pools_capacity_error_backoff(rig: Rig) -> None:
    """A dry spot zone is the spot strategy's to retry (capacity_error_backoff, fallback,
    return to spot): refusals for want of stock never build a launch backoff; a spot quota
    error, and the same refusal on-demand, still do."""
    for code in ("InsufficientInstanceCapacity", "OperationDenied.NoStock"):
        for _ in range(3):
            outcome(rig, S.PROVISION_FAILED, f"terraform apply failed: {code}: none", Market.SPOT)
    assert launch_backoffs(rig.store, rig.policies, rig.clock()) == []
    outcome(rig, S.PROVISION_FAILED, "terraform apply failed: MaxSpotInstanceCountExceeded: x", Market.SPOT)
    [b] = launch_backoffs(rig.store, rig.policies, rig.clock())
    assert (b.market, b.cause) == (Market.SPOT, "provision failed: MaxSpotInstanceCountExceeded")
    outcome(rig, S.PROVISION_FAILED, "terraform apply failed: InsufficientInstanceCapacity: none")
    assert {(b.market, b.count) for b in launch_backoffs(rig.store, rig.policies, rig.clock())} == {
        (Market.SPOT, 1), (Market.ON_DEMAND, 1)}


def test_the_nodes_of_one_failed_batch_are_one_failure(rig: Rig) -> None:
    """A 250-node apply that fails writes 250 failures within moments of each other: one
    failure, held 5 minutes (counting each node took the count to 250 and crashed the tick
    on a 5 min x 2^249 delay, at 1,000 nodes)."""
    pool = rig.policies["vision"].pools[0]
    for _ in range(40):
        node = create_node(rig.store, cooldown="up", now=rig.clock(),
                           progress=NodeProgress(policy=fingerprint(pool)))
        transition(rig.store, node.name, S.PROVISIONING, rig.clock(), "step")
        transition(rig.store, node.name, S.PROVISION_FAILED, rig.clock(),
                   "terraform apply failed: InsufficientInstanceCapacity: none")
        rig.clock.tick(0.5)
    [b] = launch_backoffs(rig.store, rig.policies, rig.clock())
    assert b.count == 1 and b.next_try == b.last_at + delay(1)
    rig.clock.tick(60)
    outcome(rig, S.PROVISION_FAILED, "terraform apply failed: InsufficientInstanceCapacity: none")
    [b] = launch_backoffs(rig.store, rig.policies, rig.clock())
    assert b.count == 2  # a later apply's failure is the next one in a row


@pytest.mark.parametrize(("priority", "fallback", "counted"), [
    ("high", "on-demand", True),  # max_wait 0: the jobs go on-demand at once
    ("medium", "on-demand", False),  # max_wait 10 min: the jobs wait for spot first
    ("high", "none", False),  # spot only: the jobs can only wait
])
def test_spot_out_of_stock_escalates_only_where_the_pool_goes_on_demand_at_once(
        rig: Rig, priority: str, fallback: str, counted: bool) -> None:
    """model/backoff.refusal_escalates, the rule the simulator replays: where a refused
    zone's jobs go on-demand at once, refusals in a row hold it 5, 10, 20 min..., and a
    spot node of the key reaching READY resets the count."""
    rig.policies = {"vision": floor_policy(priority=priority, capacity={
        "on_demand_base": 0, "spot_percent": 100, "spot_fallback": fallback})}
    refused = "terraform apply failed: InsufficientInstanceCapacity: none"
    outcome(rig, S.PROVISION_FAILED, "terraform apply failed: OperationDenied.NoStock: none", Market.SPOT)
    assert bool(launch_backoffs(rig.store, rig.policies, rig.clock())) is counted
    for _ in range(3):
        outcome(rig, S.PROVISION_FAILED, refused, Market.SPOT)
    backoffs = launch_backoffs(rig.store, rig.policies, rig.clock())
    if not counted:
        assert backoffs == []
        return
    [b] = backoffs
    assert (b.market, b.count, b.cause) == (Market.SPOT, 3, "provision failed: InsufficientInstanceCapacity")
    assert b.next_try == b.last_at + timedelta(minutes=20)
    outcome(rig, S.READY, market=Market.SPOT)
    assert launch_backoffs(rig.store, rig.policies, rig.clock()) == []


def test_a_failure_stamped_before_a_backward_clock_step_holds_nothing_and_a_ready_resets_it(
        rig: Rig) -> None:
    """NTP steps the clock back 5 h after a failure: the failure reads as 5 h ahead. Held
    until its stamp plus 5 min, it stopped the key's launches for 5 h (audit 8, F2): it now
    counts toward the streak but holds nothing by itself; the next failure holds as usual.
    A READY written after the step, though stamped earlier than the failures, still resets
    the count (outcomes come in the order they were written)."""
    broken = f"bootstrap failed 3 time(s); last: failed at task '{TASK}': dkms"
    outcome(rig, S.BOOTSTRAP_FAILED, broken)
    rig.clock.now -= timedelta(hours=5)
    assert launch_backoffs(rig.store, rig.policies, rig.clock()) == []
    rig.clock.tick(60)
    failed_at = rig.clock()
    outcome(rig, S.BOOTSTRAP_FAILED, broken)  # the next attempt fails, stamped on time
    [b] = launch_backoffs(rig.store, rig.policies, rig.clock())
    assert (b.count, b.last_at, b.next_try) == (2, failed_at, failed_at + delay(2))
    outcome(rig, S.READY)
    assert launch_backoffs(rig.store, rig.policies, rig.clock()) == []

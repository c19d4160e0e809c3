"""READY nodes that broke: unusable to the scheduler, silent, or with memory faults, each
replaced after its grace; and the fleet-wide budget that stops replacing when too many
look broken at once (the observer is then the likelier fault)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from autoscaler.engine import Hold, Replace, decide
from autoscaler.engine.settings import EngineSettings
from autoscaler.model.snapshot import GpuMetrics, NodeObservation, SchedulerNode
from tests.builders import NOW, busy, fleet, make_node, make_policy, snapshot


def plan_of(obs: dict[str, NodeObservation], nodes: int | None = None, *, missing: list[str] | None = None,
            settings: EngineSettings | None = None, **policy_kw: object):
    """A pool of p3.8xlarge (4 GPUs) nodes n0..n{k-1}: busy unless ``obs`` says otherwise."""
    count = nodes if nodes is not None else len(obs)
    names = [f"n{i}" for i in range(count)]
    seen = {n: obs.get(n, busy(gpus=4)) for n in names}
    policy = make_policy(instance_types=["p3.8xlarge"], max_nodes=100, **policy_kw)
    return decide({"vision": policy},
                  fleet(*(make_node(n, instance_type="p3.8xlarge") for n in names)),
                  snapshot(seen, missing=missing or []), NOW, settings=settings)


def replaced(plan) -> dict[str, str]:
    return {a.node: a.reason for a in plan.actions if isinstance(a, Replace)}


def unusable(said: str, since: timedelta | None, gpus: float = 4) -> NodeObservation:
    base = busy(gpus=4)
    assert base.scheduler is not None
    return dataclasses.replace(base, scheduler=SchedulerNode(
        state="down", ready=False, gpus_total=gpus, unusable=said,
        unusable_since=NOW - since if since is not None else None))


def silent(age_s: float | None) -> NodeObservation:
    """No fresh sample: ``age_s`` since the newest (None: none in the lookback)."""
    base = busy(gpus=4)
    metrics = None if age_s is None else GpuMetrics(sample_age_s=age_s, gpus_reporting=4)
    return NodeObservation(metrics=metrics, metrics_missing="no sample", metrics_silent=True,
                           scheduler=base.scheduler)


# -- the scheduler says unusable ------------------------------------------------------

@pytest.mark.parametrize("said", ["NOT_RESPONDING: Not responding", "DOWN by root: bad gpu",
                                  "DRAIN by alice: rma", "NotReady: KubeletNotReady"])
def test_unusable_past_its_grace_is_replaced_with_the_evidence(said: str) -> None:
    reasons = replaced(plan_of({"n0": unusable(said, timedelta(minutes=12))}, 10))
    assert list(reasons) == ["n0"]
    assert f"the scheduler says {said} for 12m > unready_grace 10m" in reasons["n0"]


def test_unusable_within_its_grace_or_without_a_time_is_kept() -> None:
    assert not replaced(plan_of({"n0": unusable("DOWN: x", timedelta(minutes=9))}, 10))
    assert not replaced(plan_of({"n0": unusable("NOT_RESPONDING", None)}, 10))


def test_unusable_since_before_the_node_was_created_counts_from_ready() -> None:
    """Said of the name before this machine existed (a DOWN slurmctld kept from an earlier
    machine): the nodes are 2h old and READY for 30m, the scheduler says unusable for 3h."""
    obs = {"n0": unusable("DOWN by slurm: Not responding", timedelta(hours=3))}
    assert not replaced(plan_of(obs, 10, health={"unready_grace": "45m"}))
    reasons = replaced(plan_of(obs, 10, health={"unready_grace": "20m"}))
    assert "Not responding for 30m since READY (its time predates this machine) > unready_grace 20m" \
        in reasons["n0"]
    # after its creation: believed as said, even before READY
    obs = {"n0": unusable("DOWN by slurm: Not responding", timedelta(minutes=50))}
    assert "Not responding for 50m > unready_grace 45m" in replaced(
        plan_of(obs, 10, health={"unready_grace": "45m"}))["n0"]


def test_the_grace_is_the_pools_and_the_cause_can_be_turned_off() -> None:
    obs = {"n0": unusable("DOWN: x", timedelta(minutes=3))}
    assert replaced(plan_of(obs, 10, health={"unready_grace": "2m"}))
    assert not replaced(plan_of(obs, 10, health={"unready_grace": "2m", "replace_when_unusable": False}))


def test_fewer_gpus_advertised_needs_dcgm_to_agree() -> None:
    base = busy(gpus=4)
    short = SchedulerNode(state="allocated", gpus_total=3, gpus_allocated=3)
    agreeing = NodeObservation(metrics=dataclasses.replace(base.metrics, gpus_reporting=3),
                               scheduler=short)
    reasons = replaced(plan_of({"n0": agreeing}, 10, health={"unready_grace": "20m"}))
    assert "advertises 3 of its type's 4 GPUs and DCGM reports 3, READY for 30m > unready_grace 20m" \
        in reasons["n0"]
    plugin_restart = NodeObservation(metrics=base.metrics, scheduler=short)  # DCGM still sees 4
    assert not replaced(plan_of({"n0": plugin_restart}, 10, health={"unready_grace": "20m"}))


# -- silent nodes --------------------------------------------------------------------

def test_a_silent_node_is_replaced_while_the_rest_report() -> None:
    reasons = replaced(plan_of({"n0": silent(420)}, 15))
    assert "no GPU metrics for 7m (newest sample) > silent_grace 5m while 14 of 15 READY nodes report" \
        in reasons["n0"]


def test_a_node_silent_beyond_the_lookback_counts_from_ready() -> None:
    reasons = replaced(plan_of({"n0": silent(None)}, 15))
    assert "no GPU metrics for 30m (none since READY)" in reasons["n0"]


def test_a_silent_node_within_its_grace_is_kept() -> None:
    assert not replaced(plan_of({"n0": silent(200)}, 15))


def test_impossible_metrics_are_not_silence() -> None:
    garbage = NodeObservation(metrics_missing="the metrics report util_mean=1e9", metrics_silent=False)
    assert not replaced(plan_of({"n0": garbage}, 15))


def test_prometheus_down_for_everyone_freezes_instead_of_replacing() -> None:
    everyone = {f"n{i}": silent(None) for i in range(15)}
    plan = plan_of(everyone, missing=["prometheus"])
    assert not replaced(plan)
    assert any(isinstance(a, Hold) and "scale-down frozen: Prometheus could not be read" in a.reason
               for a in plan.actions)


def test_too_few_others_reporting_is_no_comparison_and_says_so() -> None:
    # two of three silent: one reporter is below silent_min_reporting (3)
    plan = plan_of({"n0": silent(None), "n1": silent(None)}, 3)
    assert not replaced(plan)
    [held] = [a.reason for a in plan.actions if isinstance(a, Hold)]
    assert held == ("vision/gpu: 2 node(s) without GPU metrics past silent_grace 5m kept (n0, n1): "
                    "1 of 3 READY nodes report, fewer than silent_min_reporting 3, so the "
                    "observer is the likelier fault")
    # within the grace there is nothing to explain yet
    within = plan_of({"n0": silent(200), "n1": silent(200)}, 3)
    assert not [a for a in within.actions if isinstance(a, Hold | Replace)]


# -- memory faults ---------------------------------------------------------------------

@pytest.mark.parametrize(("field", "needle"), [
    ("ecc_dbe_errors", "2 uncorrectable (double-bit) ECC error(s)"),
    ("row_remap_failures", "2 GPU(s) with a failed row remapping"),
    ("retired_pages_pending", "2 GPU(s) with a page retirement pending"),
])
def test_dcgm_memory_faults_are_replaced_at_once(field: str, needle: str) -> None:
    base = busy(gpus=4)
    faulty = dataclasses.replace(base, metrics=dataclasses.replace(base.metrics, **{field: 2}))
    assert f"DCGM reports {needle}" in replaced(plan_of({"n0": faulty}, 10))["n0"]
    assert not replaced(plan_of({"n0": faulty}, 10, health={"replace_on_ecc": False}))


# -- the fleet-wide budget -------------------------------------------------------------

def test_one_broken_of_twenty_is_replaced() -> None:
    assert list(replaced(plan_of({"n3": silent(None)}, 20))) == ["n3"]


def test_three_broken_of_four_is_within_ok_unready_count() -> None:
    """Cluster Autoscaler's rule: held only above ok-total-unready-count AND above the share."""
    down = {f"n{i}": unusable("DOWN: x", timedelta(hours=1)) for i in range(3)}
    # The pool's own budget (max_draining_percent, 20% by default) is lifted to see the
    # fleet-wide rule alone; test_health_broken_budget.py has the pool's budget.
    assert len(replaced(plan_of(down, 4, scale_down={"max_draining_percent": 100}))) == 3


def test_four_broken_of_five_is_held_with_the_numbers() -> None:
    down = {f"n{i}": unusable("DOWN: x", timedelta(hours=1)) for i in range(4)}
    plan = plan_of(down, 5)
    assert not replaced(plan)
    (hold,) = [a for a in plan.actions if isinstance(a, Hold) and "broken" in a.reason]
    assert ("4 broken node(s) kept (n0, n1, n2, n3): 4 of 5 READY nodes look broken, more than "
            "ok_unready_count 3 and more than max_unready_percent 45% (2 nodes)") in hold.reason


def test_the_budget_is_fleet_settings() -> None:
    down = {f"n{i}": unusable("DOWN: x", timedelta(hours=1)) for i in range(2)}
    strict = EngineSettings(ok_unready_count=1, max_unready_percent=10)
    assert not replaced(plan_of(down, 5, settings=strict))
    assert len(replaced(plan_of(down, 5, scale_down={"max_draining_percent": 100}))) == 2

"""The next step of a request from its nodes' states, and held nodes kept by decide()."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from autoscaler.engine import decide
from autoscaler.engine.request_progress import progress
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.plan import Drain, Hold
from autoscaler.model.progress import NodeProgress
from autoscaler.model.request_spec import Condition, RequestSpec, RequestView
from tests.builders import NOW, fleet, idle, make_node, make_policy, snapshot

S = NodeState
LABEL = "request ci-4711 (team vision, atomic, 2 x 4 GPUs)"


def view(condition=Condition.ACCEPTED, nodes=("vision-gpu-1", "vision-gpu-2"), **kw):
    body = {"name": "ci-4711", "node_sets": [{"gpu_model": "V100", "gpus": 4, "nodes": 2}], **kw}
    return RequestView(id="req-1", team="vision", spec=RequestSpec.model_validate(body),
                       condition=condition, reason="", created_at=NOW, updated_at=NOW,
                       provisioned_at=NOW if condition is Condition.PROVISIONED else None,
                       nodes={n: None for n in nodes})


def states(*pairs, **kw):
    return {name: make_node(name, state=st, address=f"10.0.0.{i}", **kw)
            for i, (name, st) in enumerate(pairs, 1)}


def test_launch_then_wait_then_provisioned():
    assert progress(view(nodes=()), {}, NOW).kind == "launch"
    booting = states(("vision-gpu-1", S.READY), ("vision-gpu-2", S.BOOTSTRAPPING))
    assert progress(view(), booting, NOW).kind == "wait"
    ready = states(("vision-gpu-1", S.READY), ("vision-gpu-2", S.READY))
    step = progress(view(), ready, NOW)
    assert step.kind == "provisioned" and step.nodes == ("vision-gpu-1", "vision-gpu-2")
    assert step.addresses == {"vision-gpu-1": "10.0.0.1", "vision-gpu-2": "10.0.0.2"}


def test_atomic_failure_rolls_back_the_others_with_the_reason():
    nodes = states(("vision-gpu-1", S.READY), ("vision-gpu-2", S.PROVISION_FAILED))
    nodes["vision-gpu-2"] = dataclasses.replace(nodes["vision-gpu-2"], reason="InsufficientInstanceCapacity in us-east-1a")
    step = progress(view(), nodes, NOW)
    assert step.kind == "fail" and step.nodes == ("vision-gpu-1",)
    assert step.reason == (f"{LABEL} failed: vision-gpu-2 PROVISION_FAILED: "
                           "InsufficientInstanceCapacity in us-east-1a; rolling back 1 other "
                           "node(s) (all or none)")
    failed = view(condition=Condition.FAILED)
    assert progress(failed, nodes, NOW).kind == "remove"
    in_flight = states(("vision-gpu-1", S.PROVISIONING), ("vision-gpu-2", S.PROVISION_FAILED))
    step = progress(view(), in_flight, NOW)
    assert step.kind == "fail" and step.nodes == ()  # its apply settles first
    assert progress(failed, in_flight, NOW).kind == "wait"
    gone = states(("vision-gpu-1", S.DRAINING), ("vision-gpu-2", S.TERMINATED))
    assert progress(failed, gone, NOW).kind == "wait"


def test_a_failed_node_already_cleaned_up_still_says_why_it_failed():
    """The engine terminates a PROVISION_FAILED node at once: the keeper may first see it
    TERMINATED, and the request's reason still names the failure (its progress keeps it)."""
    nodes = states(("vision-gpu-1", S.READY), ("vision-gpu-2", S.TERMINATED))
    nodes["vision-gpu-2"] = dataclasses.replace(
        nodes["vision-gpu-2"], reason="instance (none) destroyed by terraform",
        progress=NodeProgress(failure="PROVISION_FAILED: InsufficientInstanceCapacity"))
    step = progress(view(), nodes, NOW)
    assert step.kind == "fail" and step.reason == (
        f"{LABEL} failed: vision-gpu-2 PROVISION_FAILED: InsufficientInstanceCapacity; "
        "rolling back 1 other node(s) (all or none)")


def test_best_effort_keeps_what_became_ready():
    nodes = states(("vision-gpu-1", S.READY), ("vision-gpu-2", S.PROVISION_FAILED))
    step = progress(view(**{"class": "best-effort"}), nodes, NOW)
    assert step.kind == "provisioned" and step.nodes == ("vision-gpu-1",)
    assert "1 of 2 nodes" in step.reason


def test_ttl_valid_until_and_linked_job_release():
    held = view(condition=Condition.PROVISIONED, ttl="2h", link={"slurm_job": "4711"})
    assert progress(held, {}, NOW + timedelta(hours=1)).kind == "wait"
    step = progress(held, {}, NOW + timedelta(hours=2))
    assert step.kind == "ttl" and "ttl 2h reached" in step.reason
    step = progress(held, {}, NOW, ended=frozenset({"slurm_job=4711"}))
    assert step.kind == "release" and "linked Slurm job 4711 has ended" in step.reason
    pods = view(condition=Condition.PROVISIONED, link={"kubernetes_selector": "app=ci,run=7"})
    assert progress(pods, {}, NOW, ended=frozenset({"slurm_job=4711"})).kind == "wait"
    step = progress(pods, {}, NOW, ended=frozenset({"kubernetes_selector=app=ci,run=7"}))
    assert step.reason.endswith("its linked Kubernetes pods with labels app=ci,run=7 has ended")
    late = view(valid_until=(NOW - timedelta(minutes=1)).isoformat())
    step = progress(late, states(("vision-gpu-1", S.BOOTSTRAPPING)), NOW)
    assert step.kind == "fail" and "valid_until" in step.reason and step.nodes == ("vision-gpu-1",)


def test_a_request_past_valid_until_fails_before_launching_anything():
    """Launched, its nodes would be bought and rolled back at the next tick."""
    for until in ("1970-01-01T00:00:00Z", (NOW - timedelta(seconds=1)).isoformat()):
        step = progress(view(nodes=(), valid_until=until), {}, NOW)
        assert (step.kind, step.nodes) == ("fail", ())
        assert step.reason.startswith(f"{LABEL} failed: not met by valid_until ")
    assert progress(view(nodes=(), valid_until=NOW.isoformat()), {}, NOW).kind == "launch"


def test_decide_keeps_held_idle_nodes_and_names_the_request():
    nodes = [make_node("vision-gpu-1"), make_node("vision-gpu-2")]
    policy = {"vision": make_policy(min_nodes=0)}
    obs = {n.name: idle() for n in nodes}
    free = decide(policy, fleet(*nodes), snapshot(obs), NOW + timedelta(hours=3))
    assert [a.node for a in free.actions if isinstance(a, Drain)] == ["vision-gpu-1"]
    plan = decide(policy, fleet(*nodes), snapshot(obs, held={"vision-gpu-1": LABEL}),
                  NOW + timedelta(hours=3))
    # The drain budget it would have used stays spent this tick (the safe side).
    assert [a.node for a in plan.actions if isinstance(a, Drain)] == []
    kept = [a.reason for a in plan.actions if isinstance(a, Hold)]
    assert any(r.startswith(f"vision-gpu-1 kept: {LABEL} holds it") for r in kept)


def test_booking_expired_resumes_the_expiry():
    """A crash between the expiry's two writes (BookingExpired, then Released) leaves the
    request BookingExpired: the next step finishes it rather than waiting forever."""
    nodes = states(("vision-gpu-1", S.READY), ("vision-gpu-2", S.READY))
    step = progress(view(Condition.BOOKING_EXPIRED), nodes, NOW)
    assert step.kind == "expire" and step.reason == f"{LABEL} released: booking expired (resumed)"

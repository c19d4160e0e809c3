"""Capacity requests: closed syntax, conditions in the store, idempotency, fencing, audit."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from autoscaler.fleet.lease import LeaseToken
from autoscaler.fleet.requests import IdempotencyConflict, RequestBook, held_nodes
from autoscaler.fleet.store import Fenced, FleetStore
from autoscaler.model.request_spec import Condition, IllegalConditionError, RequestSpec
from tests.builders import NOW

BODY = {"name": "ci-4711", "class": "atomic", "node_sets": [{"gpu_model": "V100", "gpus": 4,
                                                            "nodes": 2}]}


@pytest.fixture
def store(tmp_path):
    s = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}")
    yield s
    s.close()


def spec(**kw):
    return RequestSpec.model_validate({**BODY, **kw})


def test_defaults_and_shape():
    s = spec()
    assert s.ttl == timedelta(hours=24) and s.total_gpus == 8 and s.shape() == "2 x 4 GPUs"
    assert s.request_class.value == "atomic" and not s.dry_run
    assert spec(ttl="2h").ttl == timedelta(hours=2)


@pytest.mark.parametrize("bad", [
    {"name": "ci 4711"}, {"name": "$(reboot)"}, {"name": "a" * 80},
    {"node_sets": [{"gpu_model": "V100;rm", "gpus": 4}]},
    {"node_sets": [{"gpu_model": "V100", "instance_type": "p3.8xlarge", "gpus": 4}]},
    {"node_sets": [{"gpus": 4}]},
    {"node_sets": [{"gpu_model": "V100", "gpus": 4, "nodes": 1000}]},
    {"node_sets": []},
    {"class": "whatever"}, {"ttl": "1s"}, {"ttl": "30d"}, {"ttl": "1h; reboot"},
    {"valid_until": "2026-12-01T10:00:00"},
    {"link": {"slurm_job": "12; scancel -u root"}},
    {"link": {"slurm_job": "12", "kubernetes_pod": "ci/pod-1"}},
    {"link": {"kubernetes_selector": "app=x y"}},
    {"idempotency_key": "short"}, {"idempotency_key": "key with spaces 123"},
    {"team": "other"},  # the team comes from the token, never the body
])
def test_every_field_has_a_closed_syntax(bad):
    with pytest.raises(ValidationError):
        spec(**bad)


def test_links_accept_what_the_schedulers_name():
    assert spec(link={"slurm_job": "4711_3"}).link.slurm_job == "4711_3"
    assert spec(link={"kubernetes_job": "ci/train-42"}).link.kubernetes_job == "ci/train-42"
    assert spec(link={"kubernetes_selector": "app=train,run=42"}).link is not None


def test_lifecycle_with_reasons_and_audit(store):
    book = RequestBook(store)
    made = book.create("vision", spec(), NOW)
    assert made.created and made.request.condition is Condition.PENDING
    rid = made.request.id
    book.set_condition(rid, Condition.ACCEPTED, NOW, "fits the quota")
    view = book.set_condition(rid, Condition.PROVISIONED, NOW, "2 nodes ready",
                              nodes={"vision-gpu-1": "10.0.0.1", "vision-gpu-2": "10.0.0.2"})
    assert view.provisioned_at == NOW and view.holds_nodes
    assert held_nodes(book.list()) == {"vision-gpu-1": rid, "vision-gpu-2": rid}
    with pytest.raises(IllegalConditionError):
        book.set_condition(rid, Condition.FAILED, NOW, "a held request ends Released")
    book.set_condition(rid, Condition.RELEASED, NOW, "DELETE by team vision")
    assert held_nodes(book.list()) == {}
    events = [(a.event, a.detail) for a in store.audit_log()]
    assert [e for e, _ in events] == ["request_created", "request_accepted",
                                      "request_provisioned", "request_released"]
    assert events[-1][1] == f"{rid}: DELETE by team vision"
    assert book.list(include_final=False) == []


def test_idempotency_key_makes_one_request_per_team(store):
    book = RequestBook(store)
    first = book.create("vision", spec(idempotency_key="pipeline-99-step-3"), NOW)
    again = book.create("vision", spec(idempotency_key="pipeline-99-step-3"), NOW)
    assert first.created and not again.created and again.request.id == first.request.id
    assert len(book.list("vision")) == 1
    other_team = book.create("nlp", spec(idempotency_key="pipeline-99-step-3"), NOW)
    assert other_team.created and other_team.request.id != first.request.id
    with pytest.raises(IdempotencyConflict, match="different body"):
        book.create("vision", spec(idempotency_key="pipeline-99-step-3", name="ci-other"), NOW)


def test_a_deposed_leader_cannot_write_requests(store):
    assert store.try_lease("gpu-autoscaler", "a", timedelta(seconds=30)) is not None
    store.set_fence(lambda: LeaseToken("gpu-autoscaler", "b", 1))
    with pytest.raises(Fenced):
        RequestBook(store).create("vision", spec(), NOW)


def _launch(book, rid, count=2):
    from autoscaler.model.changes import Create
    from autoscaler.model.progress import LaunchSpec, NodeProgress
    from autoscaler.policy.models import Market

    launch = LaunchSpec(pool="vision/gpu", instance_type="p3.8xlarge", market=Market.ON_DEMAND,
                        reason="test")
    return book.launch(rid, [Create("vision", "gpu", "aws", "us-east-1", launch,
                                    NodeProgress(request=rid))] * count, NOW)


def test_launch_writes_the_nodes_and_the_request_together_once(store):
    book = RequestBook(store)
    rid = book.create("vision", spec(), NOW).request.id
    assert _launch(book, rid) == []  # Pending: nothing launches
    book.set_condition(rid, Condition.ACCEPTED, NOW, "fits the quota")
    made = _launch(book, rid)
    assert sorted(book.get(rid).nodes) == sorted(n.name for n in made) and len(made) == 2
    assert all(store.meta(n.name)["request"] == rid for n in made)
    assert _launch(book, rid) == []  # recorded already: never a second set
    book.set_condition(rid, Condition.RELEASED, NOW, "DELETE")
    other = book.create("vision", spec(name="ci-4712"), NOW).request.id
    book.set_condition(other, Condition.ACCEPTED, NOW, "fits")
    book.set_condition(other, Condition.RELEASED, NOW, "DELETE before the launch")
    assert _launch(book, other) == [] and len(store.nodes()) == 2


def test_unsettled_is_what_has_not_ended_or_still_names_a_node_not_terminated(store):
    from autoscaler.model.lifecycle import NodeState as S
    from tests.fleet.writes import walk

    book = RequestBook(store)
    ids = {}
    for name in ("live", "owing", "settled", "never-launched"):
        ids[name] = book.create("vision", spec(name=name), NOW).request.id
        book.set_condition(ids[name], Condition.ACCEPTED, NOW, "fits")
    for name in ("live", "owing", "settled"):
        _launch(book, ids[name])
    for name in ("owing", "settled", "never-launched"):
        book.set_condition(ids[name], Condition.RELEASED, NOW, "DELETE")
    first, second = sorted(book.get(ids["settled"]).nodes)
    walk(store, first, NOW, S.TERMINATING, S.TERMINATED)
    walk(store, second, NOW, S.PROVISIONING, S.PROVISION_FAILED)
    assert {v.id for v in book.unsettled()} == {ids["live"], ids["owing"], ids["settled"]}
    # a failed node may still be retried or cleaned up: only TERMINATED has no exit
    walk(store, second, NOW, S.TERMINATING, S.TERMINATED)
    assert {v.id for v in book.unsettled()} == {ids["live"], ids["owing"]}
    assert len(book.list()) == 4  # the status API still shows them all

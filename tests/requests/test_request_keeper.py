"""Requests through a built service's ticks: launched, Provisioned, released and drained,
an atomic request rolled back after a capacity error, ttl expiry (fake executor)."""

from __future__ import annotations

import logging

from autoscaler.fleet.requests import RequestBook
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.plan import Drain, Terminate
from autoscaler.model.request_spec import Condition
from autoscaler.model.snapshot import ImageObservation
from tests.fleet.writes import create_node, transition
from tests.requests.conftest import BODY, VISION
from tests.requests.test_requests_api import call
from tests.service.service_fakes import write_policy

S = NodeState


def submitted(service, kind):
    return [a for plan, _ in service.loop.executor.submitted for a in plan.actions
            if isinstance(a, kind)]


def test_atomic_request_provisioned_then_delete_drains_and_terminates(service):
    url = service.api.url + "/v1/requests"
    rid = call(url, "POST", VISION, BODY)[1]["id"]
    service.tick()  # the keeper launches 2 nodes; the executor makes them READY
    book = RequestBook(service.store)
    names = sorted(book.get(rid).nodes)
    assert len(names) == 2
    nodes = {n.name: n for n in service.store.nodes()}
    assert all(service.store.meta(n)["request"] == rid for n in names)
    first = service.store.transitions(names[0])[0]
    assert first.to_state == "REQUESTED" and first.reason.endswith("GPUs): node 1 of 2")
    assert nodes[names[0]].instance_type == "p3.8xlarge"
    service.tick()
    code, got = call(f"{url}/{rid}", token=VISION)
    assert code == 200 and got["condition"] == "Provisioned" and sorted(got["nodes"]) == names
    assert service.loop.last_snapshot.held == {n: book.get(rid).label() for n in names}
    assert call(f"{url}/{rid}", "DELETE", VISION)[1]["condition"] == "Released"
    for _ in range(3):
        service.tick()
    assert sorted(a.node for a in submitted(service, Drain)) == names
    assert {a.trigger for a in submitted(service, Drain)} == {"released"}
    assert {service.store.get(n).state for n in names} == {S.TERMINATED}
    assert service.loop.last_snapshot.held == {}


def test_a_request_launch_leaves_the_pools_scale_up_cooldown_alone(service):
    """A capacity request's node is not the pool scaling up (fleet/intents.py): it must not
    hold back the pool's own scale-up for pending jobs for a cooldown."""
    url = service.api.url + "/v1/requests"
    rid = call(url, "POST", VISION, BODY)[1]["id"]
    service.keeper.run()  # launch only: both nodes REQUESTED
    names = sorted(RequestBook(service.store).get(rid).nodes)
    assert len(names) == 2
    pool = service.store.get(names[0]).pool_key
    history = service.store.fleet_view().history.get(pool)
    assert history is None or history.last_scale_up_at is None, history


def test_atomic_request_rolled_back_when_one_node_hits_a_capacity_error(service):
    url = service.api.url + "/v1/requests"
    rid = call(url, "POST", VISION, BODY)[1]["id"]
    service.keeper.run()  # launch only: both nodes REQUESTED
    first, second = sorted(RequestBook(service.store).get(rid).nodes)
    transition(service.store, second, S.PROVISION_FAILED, service.loop.clock(),
                             "InsufficientInstanceCapacity: no p3.8xlarge in us-east-1a")
    service.tick()
    view = RequestBook(service.store).get(rid)
    assert view.condition is Condition.FAILED
    assert view.reason == (f"{view.label()} failed: {second} PROVISION_FAILED: "
                           "InsufficientInstanceCapacity: no p3.8xlarge in us-east-1a; rolling "
                           "back 1 other node(s) (all or none)")
    assert [a.node for a in submitted(service, Terminate)][:1] == [first]
    service.tick()
    assert service.store.get(first).state is S.TERMINATED
    assert [a.event for a in service.store.audit_log()].count("request_failed") == 1


def test_ttl_expiry_releases_and_drains(service):
    url = service.api.url + "/v1/requests"
    rid = call(url, "POST", VISION, {**BODY, "ttl": "1h"})[1]["id"]
    service.tick()
    service.tick()
    assert RequestBook(service.store).get(rid).condition is Condition.PROVISIONED
    service.loop.clock.advance(minutes=59)
    service.tick()
    assert RequestBook(service.store).get(rid).condition is Condition.PROVISIONED
    service.loop.clock.advance(minutes=2)
    service.tick()
    view = RequestBook(service.store).get(rid)
    assert view.condition is Condition.RELEASED and "ttl 1h reached" in view.reason
    drains = submitted(service, Drain)
    assert len(drains) == 2 and {a.trigger for a in drains} == {"ttl"}


def test_a_ttl_drain_signals_at_once_a_delete_waits_drain_timeout():
    from datetime import timedelta

    from autoscaler.service.executor.advance import new_drain
    from autoscaler.service.executor.settings import ExecutorSettings
    from tests.builders import NOW, make_policy

    pool = make_policy().pools[0]
    ttl = new_drain(ExecutorSettings(), pool, "ttl reached", NOW, "ttl")
    assert ttl.deadline == NOW and ttl.grace == pool.scale_down.checkpoint_grace
    released = new_drain(ExecutorSettings(), pool, "DELETE", NOW, "released")
    assert released.deadline == NOW + pool.scale_down.drain_timeout > NOW + timedelta(0)


def test_a_request_whose_linked_slurm_job_ended_is_released(service):
    url = service.api.url + "/v1/requests"
    rid = call(url, "POST", VISION, {**BODY, "link": {"slurm_job": "4711"}})[1]["id"]
    seen: list[list[str]] = []
    job_ended = [False]

    def ended(links):
        seen.append([link.slurm_job for link in links])
        return frozenset({"slurm_job=4711"}) if job_ended[0] else frozenset()

    service.keeper.ended_links = ended
    service.tick()
    service.tick()  # Provisioned: from now on its job is asked about
    service.tick()  # still running
    assert RequestBook(service.store).get(rid).condition is Condition.PROVISIONED
    asked_while_running = len(seen)
    assert asked_while_running >= 1
    job_ended[0] = True
    service.tick()
    view = RequestBook(service.store).get(rid)
    assert view.condition is Condition.RELEASED and "linked Slurm job 4711 has ended" in view.reason
    assert len(seen) == asked_while_running + 1 and all(s == ["4711"] for s in seen)


def test_an_accepted_request_whose_pool_was_removed_fails(service, tmp_path):
    url = service.api.url + "/v1/requests"
    rid = call(url, "POST", VISION, BODY)[1]["id"]
    (tmp_path / "policies" / "vision.yaml").unlink()
    service.loop.reloader.refresh()
    assert set(service.loop.policies()) == {"nlp"}
    service.keeper.run()
    view = RequestBook(service.store).get(rid)
    assert view.condition is Condition.FAILED and "no longer has a pool" in view.reason
    assert view.nodes == {}


def test_booking_expires_only_on_evidence_that_no_job_used_the_nodes(service):
    from autoscaler.model.snapshot import NodeObservation, RunningJob, SchedulerNode, Snapshot

    url = service.api.url + "/v1/requests"
    unused = call(url, "POST", VISION, {**BODY, "booking": "10m"})[1]["id"]
    used = call(url, "POST", VISION, {**BODY, "name": "ci-4712", "node_sets": [
        {"gpu_model": "V100", "gpus": 4, "nodes": 1}]})[1]["id"]
    service.tick()
    service.tick()
    book = RequestBook(service.store)
    assert {book.get(r).condition for r in (unused, used)} == {Condition.PROVISIONED}
    idle = SchedulerNode(state="idle", gpus_total=4)
    busy = SchedulerNode(state="allocated", gpus_total=4, gpus_allocated=4,
                         jobs=[RunningJob(id="77", gpus=4)])
    observed: dict = {"snap": None}
    service.keeper.observed = lambda: observed["snap"]
    service.loop.clock.advance(minutes=11)
    service.keeper.run()  # no scheduler data: no evidence, nothing expires
    assert book.get(unused).condition is Condition.PROVISIONED
    nodes = {n: NodeObservation(scheduler=idle) for n in book.get(unused).nodes}
    nodes |= {n: NodeObservation(scheduler=busy) for n in book.get(used).nodes}
    observed["snap"] = Snapshot(taken_at=service.loop.clock(), nodes=nodes)
    service.keeper.run()
    gone, kept = book.get(unused), book.get(used)
    assert gone.condition is Condition.RELEASED and "booking expired" in gone.reason
    assert kept.condition is Condition.PROVISIONED and kept.claimed_at is not None
    events = [a.event for a in service.store.audit_log()]
    assert "request_bookingexpired" in events


def test_an_ended_requests_nodes_stay_held_until_the_keeper_drains_them(service):
    # A DELETE between the keeper's run and the tick's read must not hand the idle nodes to
    # this tick's scale-down: the keeper drains them, with the release's drain trigger.
    url = service.api.url + "/v1/requests"
    rid = call(url, "POST", VISION, BODY)[1]["id"]
    service.tick()
    service.tick()
    names = sorted(RequestBook(service.store).get(rid).nodes)
    assert call(f"{url}/{rid}", "DELETE", VISION)[1]["condition"] == "Released"
    loop = service.loop
    snap = loop.read_snapshot(loop.reloader.policies, service.store.fleet_view(), loop.clock())
    assert sorted(snap.held) == names
    assert all(why.endswith("ended: the keeper drains it") for why in snap.held.values())
    service.tick()
    assert {a.trigger for a in submitted(service, Drain)} == {"released"}
    snap = loop.read_snapshot(loop.reloader.policies, service.store.fleet_view(), loop.clock())
    assert snap.held == {}  # leaving now: nothing to hold


def test_the_keeper_reads_its_requests_nodes_not_every_node_the_store_ever_held(service,
                                                                                 monkeypatch):
    """It used to load every node ever stored (TERMINATED ones too), twice a tick: a read
    that grew with the fleet's history (benchmarks/bench_surfaces.py)."""
    url = service.api.url + "/v1/requests"
    rid = call(url, "POST", VISION, BODY)[1]["id"]
    service.tick()
    names = sorted(RequestBook(service.store).get(rid).nodes)
    for _ in range(5):  # history that is not the request's
        node = create_node(service.store, team="nlp", pool="train", now=service.loop.clock())
        for state in (S.PROVISIONING, S.PROVISION_FAILED, S.TERMINATING, S.TERMINATED):
            transition(service.store, node.name, state, service.loop.clock())
    read: list[list[str]] = []
    nodes = service.store.nodes

    def spy(*args, **kwargs):
        found = nodes(*args, **kwargs)
        read.append([n.name for n in found])
        return found

    monkeypatch.setattr(service.store, "nodes", spy)
    service.keeper.run()
    assert read == [names]
    assert RequestBook(service.store).get(rid).condition is Condition.PROVISIONED


class StaleImages:
    """The loop's image reader: every pool named has this image."""

    def __init__(self, found):
        self.found = found

    def observe(self, policies):
        return self.found


def test_a_request_in_a_baked_pool_whose_image_is_stale_waits_with_when_stale_hold(
        service, tmp_path, caplog):
    write_policy(tmp_path / "policies", "vision", name="train", max_nodes=4,
                 bootstrap={"image": "baked", "when_stale": "hold"})
    stale = ImageObservation(hash="0123456789ab")
    service.loop.images = StaleImages({"vision/train": stale})
    service.tick()  # the baked policy is loaded and the stale image seen
    assert service.loop.last_snapshot.pools["vision/train"].image == stale
    url = service.api.url + "/v1/requests"
    rid = call(url, "POST", VISION, BODY)[1]["id"]
    with caplog.at_level(logging.INFO, logger="autoscaler.service.control.request_keeper"):
        service.tick()
        service.tick()
    book = RequestBook(service.store)
    assert book.get(rid).nodes == {} and book.get(rid).condition is Condition.ACCEPTED
    waits = [r.getMessage() for r in caplog.records if "waits" in r.getMessage()]
    assert len(waits) == 1  # logged when the wait starts
    assert "vision/train: stale image: no image has bootstrap hash 0123456789ab" in waits[0]
    service.loop.images = StaleImages({"vision/train": ImageObservation(
        hash="0123456789ab", image_id="ami-0abc1234")})
    service.tick()  # the loop sees the image; the keeper ran on the last tick's snapshot
    service.tick()
    assert len(book.get(rid).nodes) == 2

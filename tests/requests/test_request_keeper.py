"""Requests through a built service's ticks: launched, Provisioned, released and drained,
an atomic request rolled back after a capacity error, ttl expiry (fake executor)."""

from __future__ import annotations

import logging
from contextlib import contextmanager

import pytest
from sqlalchemy import event

from autoscaler.fleet.requests import RequestBook
from autoscaler.fleet.tables import RequestRow
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.plan import Drain, Terminate
from autoscaler.model.request_spec import Condition, RequestSpec
from autoscaler.model.snapshot import ImageObservation
from autoscaler.service.control.request_keeper import held_by_requests
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


def test_a_request_that_ends_while_its_launch_waits_is_forgotten(service, tmp_path):
    """The keeper kept the logged wait of a request that ended while waiting, for ever."""
    write_policy(tmp_path / "policies", "vision", name="train", max_nodes=4,
                 bootstrap={"image": "baked", "when_stale": "hold"})
    service.loop.images = StaleImages({"vision/train": ImageObservation(hash="0123456789ab")})
    service.tick()
    url = service.api.url + "/v1/requests"
    rids = [call(url, "POST", VISION, {**BODY, "name": f"ci-{i}"})[1]["id"] for i in range(2)]
    service.tick()
    assert set(service.keeper._waiting) == set(rids)
    assert call(f"{url}/{rids[0]}", "DELETE", VISION)[1]["condition"] == "Released"
    service.tick()
    assert set(service.keeper._waiting) == {rids[1]}, "the ended request is forgotten"


class Crash(BaseException):
    """The process dies (SIGKILL): nothing after it runs, not even an except clause."""


def _accepted(service):
    book = RequestBook(service.store)
    rid = book.create("vision", RequestSpec.model_validate(BODY), service.loop.clock()).request.id
    book.set_condition(rid, Condition.ACCEPTED, service.loop.clock(), "admitted")
    return book, rid


def _tagged(service, rid):
    return sorted(n.name for n in service.store.nodes(include_terminated=True)
                  if n.progress.request == rid)


@pytest.mark.parametrize("write", [1, 2])
@pytest.mark.parametrize("committed", [False, True], ids=["before-commit", "after-commit"])
def test_a_crash_in_a_launch_never_doubles_nor_shortens_the_requests_nodes(
        service, monkeypatch, write, committed):
    """Whichever store write of the launch the process dies at, the restarted keeper ends
    with exactly the request's 2 nodes, all recorded on it: not a second set (3 nodes),
    not an atomic request Provisioned with 1."""
    book, rid = _accepted(service)
    store, real, writes = service.store, service.store._write, []

    @contextmanager
    def dying(**kwargs):
        writes.append(1)
        with real(**kwargs) as s:
            yield s
            if len(writes) == write and not committed:
                raise Crash  # the transaction never commits
        if len(writes) == write:
            raise Crash

    monkeypatch.setattr(store, "_write", dying)
    try:
        service.keeper.run()
    except Crash:
        pass
    else:
        assert write > 1, "the launch writes at least once"
    monkeypatch.setattr(store, "_write", real)  # the restart: same store
    assert sorted(book.get(rid).nodes) == _tagged(service, rid)  # none made, or all recorded
    for _ in range(3):
        service.tick()
    view = book.get(rid)
    assert view.condition is Condition.PROVISIONED
    assert sorted(view.nodes) == _tagged(service, rid) and len(view.nodes) == 2


def test_an_expiry_interrupted_after_booking_expired_resumes_and_releases(service):
    book, rid = _accepted(service)
    service.tick()
    service.tick()
    assert book.get(rid).condition is Condition.PROVISIONED
    # the expiry's first write; the process dies before its second (Released)
    book.set_condition(rid, Condition.BOOKING_EXPIRED, service.loop.clock(), "booking expired")
    service.tick()
    view = book.get(rid)
    assert view.condition is Condition.RELEASED
    assert view.reason.endswith("booking expired (resumed)")
    assert sorted(a.node for a in submitted(service, Drain)) == sorted(view.nodes)
    service.tick()
    assert service.loop.last_snapshot.held == {}


def test_the_keeper_reads_no_ended_request_whose_nodes_are_all_terminated(service,
                                                                           monkeypatch):
    """The history of requests is not read each tick: an ended request whose every node is
    TERMINATED has no step left. One that still names a live node is read (and drained)."""
    url = service.api.url + "/v1/requests"
    settled = [call(url, "POST", VISION, {**BODY, "name": f"ci-{i}"})[1]["id"] for i in range(5)]
    service.tick()
    service.tick()
    for rid in settled:
        call(f"{url}/{rid}", "DELETE", VISION)
    for _ in range(3):
        service.tick()
    book = RequestBook(service.store)
    assert all(service.store.get(n).state is S.TERMINATED
               for rid in settled for n in book.get(rid).nodes)
    live = call(url, "POST", VISION, {**BODY, "name": "ci-live"})[1]["id"]
    service.tick()
    service.tick()
    owing = call(url, "POST", VISION, {**BODY, "name": "ci-owing",
                                       "node_sets": [{"gpu_model": "V100", "gpus": 4}]})[1]["id"]
    service.tick()
    service.tick()
    assert call(f"{url}/{owing}", "DELETE", VISION)[1]["condition"] == "Released"
    loaded: list[str] = []

    def load(target, _context):
        loaded.append(target.id)

    event.listen(RequestRow, "load", load)
    read: list[str] = []
    nodes = service.store.nodes

    def spy(*args, **kwargs):
        found = nodes(*args, **kwargs)
        read.extend(n.name for n in found)
        return found

    monkeypatch.setattr(service.store, "nodes", spy)
    try:
        service.keeper.run()
        held = held_by_requests(book, nodes(), service.loop.clock())
    finally:
        event.remove(RequestRow, "load", load)
    assert sorted(set(loaded)) == sorted([live, owing])  # no row of the 5 settled ones
    assert sorted(read) == sorted([*book.get(live).nodes, *book.get(owing).nodes])
    assert {a.node for a in submitted(service, Drain)} >= set(book.get(owing).nodes)
    assert sorted(held) == sorted(book.get(live).nodes)  # the owing one's node is draining
    assert len(book.list()) == 7  # what the status API lists is unchanged

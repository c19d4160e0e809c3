"""The Kubernetes drainer against the project's fake API server (official client):
cordon, evictions with PDB 429 retries, do-not-disrupt pods, the timeout, uncordon."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from autoscaler.actuators.drain import DrainOutcome, DrainPhase, DrainProgress, PhasedDrainer
from autoscaler.actuators.drain.base import DrainError
from autoscaler.actuators.drain.kubernetes import DO_NOT_DISRUPT, REPLICAS, KubernetesOps
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.sandbox.fakes.kube import FakeKube
from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.schedulers.kubernetes.client import KubernetesConfig
from autoscaler.schedulers.kubernetes.objects import TYPE
from autoscaler.signals.kubernetes import KubernetesReader
from tests.builders import NOW, make_node

NAME = "vision-gpu-1"


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as k:
        k.add_node(NAME, gpus=4)
        k.add_node("vision-gpu-2", gpus=4)
        k.add_pod("train-0", "vision", node=NAME, gpus=2, labels={"app": "train"})
        k.add_pod("train-1", "vision", node=NAME, gpus=1, labels={"app": "train"})
        k.add_pod("elsewhere", "vision", node="vision-gpu-2", gpus=1)
        yield k


@pytest.fixture
def drainer(kube: FakeKube) -> PhasedDrainer:
    # Through the config, as the service builds it (host URL, no token, fail fast).
    return PhasedDrainer(KubernetesOps(config=KubernetesConfig(host=kube.url)))


def node(name: str = NAME) -> Node:
    return make_node(name, state=NodeState.DRAINING)


def progress(deadline_in: float = 600, grace: float = 60) -> DrainProgress:
    return DrainProgress(reason="idle", started_at=NOW, deadline=NOW + timedelta(seconds=deadline_in),
                         grace=timedelta(seconds=grace))


def protect(kube: FakeKube, key: str) -> None:
    kube.pods[key]["metadata"]["annotations"] = {DO_NOT_DISRUPT: "true"}


def test_cordon_evict_and_done(kube: FakeKube, drainer: PhasedDrainer) -> None:
    step = drainer.step(node(), progress(), NOW)
    assert kube.cordoned(NAME) and not kube.cordoned("vision-gpu-2")
    assert sorted(kube.evicted) == ["vision/train-0", "vision/train-1"]
    assert step.outcome is DrainOutcome.RETRY  # the pods were there when it looked
    step = drainer.step(node(), step.progress, NOW + timedelta(seconds=10))
    assert step.outcome is DrainOutcome.DONE
    assert "vision/elsewhere" in kube.pods and not drainer.readiness(node()).ready
    drainer.cancel(node())
    assert not kube.cordoned(NAME) and drainer.readiness(node()).ready


def test_pdb_refusals_are_retried(kube: FakeKube, drainer: PhasedDrainer) -> None:
    kube.refuse_evictions("vision/train-0", times=2)
    step = drainer.step(node(), progress(), NOW)
    assert step.outcome is DrainOutcome.RETRY and "eviction(s) refused" in step.message
    assert "disruption budget" in step.message
    step = drainer.step(node(), step.progress, NOW + timedelta(seconds=10))
    assert "vision/train-0" in kube.pods
    step = drainer.step(node(), step.progress, NOW + timedelta(seconds=20))
    assert "vision/train-0" not in kube.pods
    assert drainer.step(node(), step.progress, NOW + timedelta(seconds=30)).outcome is DrainOutcome.DONE
    evictions = [r for r in kube.requests if r == ("POST", "/api/v1/namespaces/vision/pods/train-0/eviction")]
    assert len(evictions) == 3


@pytest.mark.parametrize("annotation", [DO_NOT_DISRUPT, "karpenter.sh/do-not-disrupt"])
def test_do_not_disrupt_pods_hold_the_drain_until_the_deadline(kube: FakeKube, drainer: PhasedDrainer,
                                                               annotation: str) -> None:
    kube.pods["vision/train-0"]["metadata"]["annotations"] = {annotation: "true"}
    step = drainer.step(node(), progress(deadline_in=600), NOW)
    assert kube.evicted == ["vision/train-1"] and "1 marked do-not-disrupt" in step.message
    step = drainer.step(node(), step.progress, NOW + timedelta(seconds=300))
    assert step.outcome is DrainOutcome.RETRY and "vision/train-0" in kube.pods
    at_deadline = NOW + timedelta(seconds=600)
    step = drainer.step(node(), step.progress, at_deadline)
    assert step.progress.phase is DrainPhase.SIGNALLING
    step = drainer.step(node(), step.progress, at_deadline)  # signalled, then evicted
    assert step.progress.phase is DrainPhase.SIGNALLED and "vision/train-0" not in kube.pods
    assert kube.execs == [("vision/train-0", "main", ["kill", "-USR1", "1"])]
    assert drainer.step(node(), step.progress, at_deadline).outcome is DrainOutcome.DONE


def test_a_pdb_that_never_allows_is_overridden_after_timeout_and_grace(kube: FakeKube,
                                                                        drainer: PhasedDrainer) -> None:
    kube.add_pdb("train-pdb", "vision", {"app": "train"}, min_available=2)
    p = progress(deadline_in=60, grace=30)
    step = drainer.step(node(), p, NOW)
    assert step.outcome is DrainOutcome.RETRY and kube.evicted == []
    t = NOW + timedelta(seconds=60)
    step = drainer.step(node(), step.progress, t)
    step = drainer.step(node(), step.progress, t)
    assert step.progress.phase is DrainPhase.SIGNALLED and kube.evicted == []
    t += timedelta(seconds=31)
    step = drainer.step(node(), step.progress, t)
    assert step.progress.phase is DrainPhase.REQUEUEING
    step = drainer.step(node(), step.progress, t)
    assert step.progress.phase is DrainPhase.REQUEUED
    assert not [k for k in kube.pods if k.startswith("vision/train")]  # deleted past the PDB
    assert drainer.step(node(), step.progress, t).outcome is DrainOutcome.DONE


def test_daemonset_and_mirror_pods_stay(kube: FakeKube, drainer: PhasedDrainer) -> None:
    kube.add_pod("dcgm-exporter-x", "gpu-operator", node=NAME, gpus=0)
    kube.pods["gpu-operator/dcgm-exporter-x"]["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "dcgm-exporter", "uid": "u1"}]
    kube.add_pod("static-web", "kube-system", node=NAME, gpus=0)
    kube.pods["kube-system/static-web"]["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "x"}
    step = drainer.step(node(), progress(), NOW)
    step = drainer.step(node(), step.progress, NOW + timedelta(seconds=10))
    assert step.outcome is DrainOutcome.DONE
    assert "gpu-operator/dcgm-exporter-x" in kube.pods and "kube-system/static-web" in kube.pods


def test_unknown_node_and_unreachable_api(kube: FakeKube, drainer: PhasedDrainer) -> None:
    step = drainer.step(node("vision-gpu-9"), progress(), NOW)
    assert step.outcome is DrainOutcome.DONE and "does not know" in step.message
    assert "has no node" in drainer.readiness(node("vision-gpu-9")).why
    down = PhasedDrainer(KubernetesOps(config=KubernetesConfig(host="http://127.0.0.1:9", timeout="2s")))
    step = down.step(node(), progress(), NOW)
    assert step.outcome is DrainOutcome.ERROR and "unreachable" in step.message


def test_many_nodes_are_read_in_one_list_with_the_same_answers(kube: FakeKube,
                                                               drainer: PhasedDrainer) -> None:
    """promote asks for every booting node at once (a GET each took 424 s at 1,000 nodes):
    the one LIST answers what a GET per node answers, and no answer is unknown, not 'no'."""
    drainer.step(node("vision-gpu-2"), progress(), NOW)  # cordoned: not ready
    nodes = [node(), node("vision-gpu-2"), node("vision-gpu-9")]
    many = drainer.readiness_many(nodes)
    assert many == {n.name: drainer.readiness(n) for n in nodes}
    assert [(r.ready, r.known) for r in many.values()] == [(True, True), (False, True),
                                                            (False, True)]
    assert "cordoned" in many["vision-gpu-2"].why and "has no node" in many["vision-gpu-9"].why
    down = PhasedDrainer(KubernetesOps(config=KubernetesConfig(host="http://127.0.0.1:9",
                                                               timeout="2s")))
    assert {(r.ready, r.known) for r in down.readiness_many(nodes).values()} == {(False, False)}
    assert not down.readiness(node()).known


def test_booting_nodes_are_read_from_the_signal_readers_watch_cache_without_a_list(
        kube: FakeKube, drainer: PhasedDrainer) -> None:
    """The service hands the drainer the signal reader's node cache: promote's readiness
    of every booting node makes no API call, answers what the LIST answers, sees a change
    on the watch, and falls back to the LIST while the cache cannot be trusted."""
    kube.add_node("vision-gpu-3", gpus=2, labels={TYPE: "g4dn.12xlarge"})  # 4 GPUs: not yet
    kube.add_node("vision-gpu-4", gpus=4, labels={TYPE: "g4dn.12xlarge", REPLICAS: "x"})
    reader = KubernetesReader(KubernetesConfig(host=kube.url))
    try:
        cached = PhasedDrainer(KubernetesOps(config=KubernetesConfig(host=kube.url),
                                             cached=reader.node_records))
        assert reader.node_records() is None  # nothing listed yet: the LIST answers
        nodes = [node(), node("vision-gpu-2"), node("vision-gpu-3"), node("vision-gpu-4"),
                 node("vision-gpu-9")]
        assert cached.readiness_many(nodes) == drainer.readiness_many(nodes)
        assert reader.read([]).error is None
        drainer.step(node("vision-gpu-2"), progress(), NOW)  # cordoned
        wait_until(lambda: (reader.node_records() or {}).get("vision-gpu-2", None) is not None
                   and reader.node_records()["vision-gpu-2"].cordoned,  # type: ignore[index]
                   10, "the cordon on the watch")
        before = len(kube.requests)
        many = cached.readiness_many(nodes)
        assert kube.requests[before:] == []  # no LIST, no GET
        assert many == drainer.readiness_many(nodes)
        assert [(r.ready, r.known) for r in many.values()] == [
            (True, True), (False, True), (False, True), (False, True), (False, True)]
        assert "cordoned" in many["vision-gpu-2"].why
        assert "advertises 2 nvidia.com/gpu; g4dn.12xlarge has 4" in many["vision-gpu-3"].why
        assert "nvidia.com/gpu.replicas='x' is not a number" in many["vision-gpu-4"].why
        assert "has no node" in many["vision-gpu-9"].why
    finally:
        reader.close()
    assert reader.node_records() is None  # closed: no cache to trust


def test_signal_jobs_execs_kill_into_each_container(kube: FakeKube) -> None:
    ops = KubernetesOps(config=KubernetesConfig(host=kube.url))
    assert ops.signal_jobs(NAME, ["vision/train-1", "vision/gone"], "SIGUSR2")
    assert kube.execs == [("vision/train-1", "main", ["kill", "-USR2", "1"])]
    kube.exec_exit_codes["vision/train-1"] = 1  # no such process / no kill in the image
    with pytest.raises(DrainError, match="exited 1"):
        ops.signal_jobs(NAME, ["vision/train-1"], "USR1")
    with pytest.raises(DrainError, match="not a signal name"):
        ops.signal_jobs(NAME, ["vision/train-1"], "USR1 1; true")


def test_an_exec_does_not_take_other_threads_calls_over_its_websocket(kube: FakeKube) -> None:
    """Drains signal jobs on workers while the tick reads readiness: with one shared
    client, a call made while stream() had swapped its transport failed ("0 Handshake
    status 200 OK", seen at 1,000 nodes)."""
    ops = KubernetesOps(config=KubernetesConfig(host=kube.url))
    stop = threading.Event()

    def signal_forever() -> None:
        while not stop.is_set():
            ops.signal_jobs(NAME, ["vision/train-1"], "SIGUSR2")

    worker = threading.Thread(target=signal_forever)
    worker.start()
    try:
        answers = [ops.readiness(name) for _ in range(40) for name in (NAME, "vision-gpu-2")]
    finally:
        stop.set()
        worker.join(timeout=30)
    assert len(kube.execs) > 1  # the exec ran alongside
    assert {(a.ready, a.known, a.why) for a in answers} == {(True, True, "node Ready, GPUs advertised")}


def test_forget_deletes_the_node_object(kube: FakeKube, drainer: PhasedDrainer) -> None:
    drainer.forget(node())
    assert NAME not in kube.nodes
    drainer.forget(node())  # already gone: fine


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


@pytest.mark.parametrize(("labels", "resources", "ready_why"), [
    ({"node.kubernetes.io/instance-type": "p3.8xlarge"}, {"nvidia.com/gpu": 4}, None),
    ({"node.kubernetes.io/instance-type": "p3.8xlarge"}, {"nvidia.com/gpu": 3},
     "node Ready but it advertises 3 nvidia.com/gpu; p3.8xlarge has 4 GPU(s)"),
    ({"node.kubernetes.io/instance-type": "g4dn.12xlarge", "nvidia.com/gpu.replicas": "4"},
     {"nvidia.com/gpu.shared": 16}, None),
    ({"node.kubernetes.io/instance-type": "p4de.24xlarge"}, {"nvidia.com/mig-3g.40gb": 16}, None),
    ({"node.kubernetes.io/instance-type": "p4de.24xlarge"}, {"nvidia.com/mig-3g.40gb": 15},
     "node Ready but it advertises 15 nvidia.com/mig-3g.40gb: not the same MIG slices on each "
     "of the 8 GPUs of p4de.24xlarge"),
])
def test_readiness_needs_the_types_gpus_advertised(labels: dict[str, str], resources: dict[str, int],
                                                   ready_why: str | None) -> None:
    clock = Clock()
    with FakeKube(clock=clock) as kube:
        kube.add_node("n", labels=labels, resources=resources, advertise_after=60)
        drainer = PhasedDrainer(KubernetesOps(config=KubernetesConfig(host=kube.url)))
        before = drainer.readiness(node("n"))
        assert (before.ready, before.why) == (
            False, "node Ready but its device plugin advertises no GPUs yet")
        clock.now += timedelta(seconds=59)
        assert not drainer.readiness(node("n")).ready
        clock.now += timedelta(seconds=1)
        after = drainer.readiness(node("n"))
        assert (after.ready, after.why) == ((True, "node Ready, GPUs advertised") if ready_why is None
                                            else (False, ready_why))


def test_the_drainer_keeps_nothing_per_pod(kube: FakeKube) -> None:
    """Evictions, deletions and signals leave no record in the service's one drainer."""
    ops = KubernetesOps(config=KubernetesConfig(host=kube.url))

    def held() -> int:
        return sum(len(v) for v in vars(ops).values() if isinstance(v, list | dict | set))

    first = -1
    for i in range(20):
        kube.add_pod(f"job-{i}", "vision", node=NAME, gpus=1)
        work = [w for w in ops.workload(NAME) if w.id == f"vision/job-{i}"]
        ops.checkpoint(NAME, work, "USR1")  # signalled, then evicted
        kube.add_pod(f"job-{i}", "vision", node=NAME, gpus=1)
        ops.evacuate(NAME, work)
        first = held() if first < 0 else first
    assert len(kube.execs) == len(kube.evicted) == 20 and held() == first

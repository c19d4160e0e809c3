"""Long jobs released (lifetime.action: release): one checkpoint signal, the pool's
checkpoint_grace, one requeue (Slurm) or eviction (Kubernetes, through the project's API
server); refusals retried later; a requeued job's next run reported afresh."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from autoscaler.actuators.drain import PhasedDrainer
from autoscaler.actuators.drain.kubernetes import KubernetesOps
from autoscaler.model.plan import ReportJob
from autoscaler.sandbox.fakes.kube import FakeKube
from autoscaler.schedulers.kubernetes.client import KubernetesConfig
from tests.service.executor_rig import Rig, launch, make_rig, slurm_policy

RELEASE = {"max_job_runtime": "2h", "action": "release"}


def report(node: str, job: str = "4242", started_at: datetime | None = None,
           release: bool = True) -> ReportJob:
    return ReportJob(pool="vision/gpu", node=node, job=job, release=release, started_at=started_at,
                     reason=f"vision/gpu: job {job} on {node} has run 2h5m, past max_job_runtime "
                            "2h: checkpoint signal USR2, requeue after 1m grace")


def calls(rig: Rig, kind: str) -> list[tuple[object, ...]]:
    return [c for c in rig.slurm.calls if c[0] == kind]


def audits(rig: Rig, event: str) -> list[str]:
    return [a.detail for a in rig.store.audit_log() if a.event == event]


def test_slurm_job_signalled_then_requeued_once_after_the_grace(rig: Rig) -> None:
    rig.policies = {"vision": slurm_policy(lifetime=RELEASE)}  # grace 1m, signal USR2
    [name] = rig.ready_nodes()
    rig.slurm.scheduler.run(name, "4242")
    started = rig.clock() - timedelta(hours=2, minutes=5)
    rig.submit(report(name, started_at=started))
    rig.advance()
    assert calls(rig, "signal") == [("signal", name, ["4242"], "USR2")]
    for _ in range(2):  # the engine repeats the report; the grace is not over
        rig.clock.tick(25)
        rig.submit(report(name, started_at=started))
        rig.advance()
    assert calls(rig, "release") == []
    rig.clock.tick(15)  # 65s after the signal
    rig.advance()
    rig.clock.tick(30)
    rig.submit(report(name, started_at=started))  # a snapshot from before the requeue
    rig.advance()
    assert calls(rig, "signal") == [("signal", name, ["4242"], "USR2")]
    assert calls(rig, "release") == [("release", name, ["4242"])]
    assert rig.slurm.scheduler.work[name] == []  # the GPUs are free; the node stays
    entry = rig.store.meta(name)["long_jobs"]["4242"]
    assert entry["outcome"] == "requeued after 1m5s" and entry["released_at"] is not None
    assert audits(rig, "long-job-release") == [
        f"job 4242 on {name}: requeued 1m5s after its checkpoint signal (checkpoint_grace 1m); "
        "its GPUs are free"]
    assert rig.state(name).value == "READY"


def test_a_requeued_job_that_runs_past_the_limit_again_is_a_new_run(rig: Rig) -> None:
    rig.policies = {"vision": slurm_policy(lifetime=RELEASE)}
    [name] = rig.ready_nodes()
    first = rig.clock() - timedelta(hours=3)
    rig.submit(report(name, started_at=first))
    rig.advance()
    rig.clock.tick(61)
    rig.advance()
    rig.clock.tick(2 * 3600)
    rig.submit(report(name, started_at=first + timedelta(hours=1)))  # restarted here
    rig.advance()
    assert len(calls(rig, "signal")) == 2 and len(audits(rig, "long-job")) == 2
    rig.clock.tick(61)
    rig.advance()
    assert calls(rig, "release") == [("release", name, ["4242"])] * 2


def test_report_only_jobs_and_exempt_ones_are_never_released(rig: Rig) -> None:
    rig.policies = {"vision": slurm_policy(lifetime=RELEASE)}
    [name] = rig.ready_nodes()
    rig.submit(report(name, release=False))  # what decide() sends for an exempt team
    for _ in range(3):
        rig.advance()
        rig.clock.tick(600)
    assert calls(rig, "signal") == [] and calls(rig, "release") == []
    assert rig.store.meta(name)["long_jobs"]["4242"]["outcome"] is None


def test_a_policy_turned_to_release_releases_the_job_already_reported(rig: Rig) -> None:
    [name] = rig.ready_nodes()
    at = rig.clock() - timedelta(hours=3)
    rig.submit(report(name, started_at=at, release=False))
    rig.advance()
    rig.submit(report(name, started_at=at, release=True))
    rig.advance()
    rig.clock.tick(61)
    rig.advance()
    assert len(calls(rig, "signal")) == 1 and len(calls(rig, "release")) == 1
    assert len(audits(rig, "long-job")) == 1


def test_a_failed_requeue_is_tried_again_later_not_at_every_advance(rig: Rig) -> None:
    [name] = rig.ready_nodes()
    rig.submit(report(name))
    rig.advance()
    rig.clock.tick(61)
    rig.slurm.next_error = RuntimeError("scontrol: Unable to contact slurm controller")
    rig.advance()
    entry = rig.store.meta(name)["long_jobs"]["4242"]
    assert entry["released_at"] is None and "Unable to contact" in entry["outcome"]
    rig.clock.tick(30)
    rig.advance()  # before the retry time (the grace, 1m)
    assert len(calls(rig, "release")) == 1
    rig.clock.tick(31)
    rig.advance()
    assert len(calls(rig, "release")) == 2
    assert rig.store.meta(name)["long_jobs"]["4242"]["outcome"].startswith("requeued")
    [refused, done] = audits(rig, "long-job-release")
    assert "requeue refused" in refused and "tried again at" in refused and "requeued" in done


# ---------------------------------------------------------------- Kubernetes, real API server


@pytest.fixture
def kube_rig(tmp_path: Path) -> Iterator[tuple[Rig, FakeKube]]:
    with FakeKube() as kube:
        kube.add_node("vision-gpu-1", gpus=1)
        kube.add_pod("train-0", "vision", node="vision-gpu-1", gpus=1)
        rig = make_rig(tmp_path, policies={"vision": slurm_policy(
            cluster={"kind": "kubernetes"}, lifetime=RELEASE)})
        rig.slurm = PhasedDrainer(KubernetesOps(  # type: ignore[assignment]
            config=KubernetesConfig(host=kube.url)))
        yield rig, kube
        rig.store.close()


def test_kubernetes_pod_signalled_then_evicted_after_the_grace(kube_rig: tuple[Rig, FakeKube]) -> None:
    rig, kube = kube_rig
    [name] = rig.submit(launch())
    rig.advance()
    rig.advance()  # the node object is Ready with its GPU: READY
    assert name == "vision-gpu-1" and rig.state(name).value == "READY"
    kube.refuse_evictions("vision/train-0", times=1)  # a PodDisruptionBudget, once
    rig.submit(report(name, job="vision/train-0"))
    rig.advance()
    assert kube.execs == [("vision/train-0", "main", ["kill", "-USR2", "1"])]
    rig.clock.tick(30)
    rig.advance()
    assert "vision/train-0" in kube.pods and kube.evicted == []  # the grace is 1m
    rig.clock.tick(31)
    rig.advance()
    assert "vision/train-0" in kube.pods  # the budget said no: retried, never forced
    entry = rig.store.meta(name)["long_jobs"]["vision/train-0"]
    assert "evict refused" in entry["outcome"] and "disruption budget" in entry["outcome"]
    rig.clock.tick(61)
    rig.advance()
    assert kube.evicted == ["vision/train-0"] and "vision/train-0" not in kube.pods
    assert rig.store.meta(name)["long_jobs"]["vision/train-0"]["outcome"] == "evicted after 2m2s"
    assert not kube.cordoned(name) and rig.state(name).value == "READY"
    assert len(kube.execs) == 1  # one signal, whatever the retries


def test_a_job_whose_signal_failed_is_still_released_and_the_audit_says_so(rig: Rig) -> None:
    [name] = rig.ready_nodes()
    rig.slurm.next_error = RuntimeError("scancel: Unable to contact slurm controller")
    rig.submit(report(name))
    rig.advance()
    rig.clock.tick(61)
    rig.advance()
    assert len(calls(rig, "signal")) == 1 and len(calls(rig, "release")) == 1
    [audit] = audits(rig, "long-job-release")
    assert audit.endswith("; the signal was not sent (SIGUSR2 failed: scancel: Unable to "
                          "contact slurm controller)")

"""Linked objects ended, read through the real kubernetes client from the project's fake
API server (pods, batch/v1 jobs, label selectors) and through the real scontrol parser:
only an answer that says "ended" counts."""

from __future__ import annotations

import time

import pytest

from autoscaler.model.request_spec import Link
from autoscaler.sandbox.fakes.kube import FakeKube
from autoscaler.schedulers.kubernetes.client import KubernetesConfig
from autoscaler.signals.request_links import KubeLinks, LinkWatcher
from tests.trickle import trickling


@pytest.fixture
def kube():
    with FakeKube() as k:
        yield k


def watcher(kube: FakeKube) -> LinkWatcher:
    cfg = KubernetesConfig(host=kube.url, timeout="5s")
    return LinkWatcher(kube=KubeLinks.connect(cfg))


def test_pods_jobs_and_selectors_end_only_on_evidence(kube):
    pod, job = Link(kubernetes_pod="ci/train-7"), Link(kubernetes_job="ci/train-8")
    sel, missing = Link(kubernetes_selector="app=ci,run=9"), Link(kubernetes_pod="ci/nothere")
    empty = Link(kubernetes_selector="app=none")
    kube.add_pod("train-7", "ci", node="n1")
    kube.add_job("train-8", "ci")
    kube.add_pod("w-1", "ci", node="n1", labels={"app": "ci", "run": "9"})
    kube.add_pod("w-2", "ci", node="n2", labels={"app": "ci", "run": "9"})
    kube.add_pod("other", "ci", node="n2", labels={"app": "ci", "run": "10"})
    ended = watcher(kube)
    links = [pod, job, sel, missing, empty]
    assert ended(links) == frozenset()
    kube.finish_pod("ci/train-7")
    kube.finish_job("ci/train-8", "Failed")
    kube.finish_pod("ci/w-1")
    assert ended(links) == {pod.key(), job.key()}  # w-2 still runs
    kube.finish_pod("ci/w-2", "Failed")
    assert ended(links) == {pod.key(), job.key(), sel.key()}
    kube.delete_pod("ci/train-7")  # gone is no evidence, but the others still count
    assert ended(links) == {job.key(), sel.key()}


def test_an_unreachable_api_server_is_no_evidence(kube):
    ended = watcher(kube)
    kube.stop()
    assert ended([Link(kubernetes_pod="ci/train-7")]) == frozenset()


def test_slurm_links_go_to_scontrol(tmp_path):
    from autoscaler.schedulers.slurm.client import SlurmConfig

    fake = tmp_path / "scontrol"
    fake.write_text("#!/bin/sh\n[ \"$4\" = 41 ] && echo 'JobId=41 JobState=COMPLETED' "
                    "|| echo 'JobId=42 JobState=RUNNING'\n")
    fake.chmod(0o755)
    slurm = SlurmConfig(bin_dir=tmp_path)
    got = LinkWatcher(slurm=slurm)([Link(slurm_job="41"), Link(slurm_job="42")])
    assert got == {"slurm_job=41"}


@pytest.mark.timeout(30)
def test_an_api_server_that_trickles_its_answers_is_no_evidence_within_the_call_limit():
    """The client bounds each read, not the answer: the first check overruns its limit
    (2 x the 0.5 s timeout), the others fail at once while it still runs (the tick waits
    for one stuck call, not one per link)."""
    links = [Link(kubernetes_pod="ci/train-7"), Link(kubernetes_job="ci/train-8"),
             Link(kubernetes_selector="app=ci")]
    with trickling() as trickle:
        ended = LinkWatcher(kube=KubeLinks.connect(KubernetesConfig(host=trickle.url,
                                                                    timeout="0.5s")))
        started = time.monotonic()
        assert ended(links) == frozenset()
        assert time.monotonic() - started < 1.0 + 1.5
        started = time.monotonic()
        assert ended(links) == frozenset()
        assert time.monotonic() - started < 0.5
        assert trickle.requests == 1

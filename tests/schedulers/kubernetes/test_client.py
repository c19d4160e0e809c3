"""Clients built from the config bound each whole call (``bounded_api``): the drainer's
steps and readiness reads end within the limit against an API server that trickles its
answers, as an unreachable API server (the step is an error, retried on the next one)."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest

from autoscaler.actuators.drain import DrainOutcome, DrainProgress, PhasedDrainer
from autoscaler.actuators.drain.kubernetes import KubernetesOps
from autoscaler.model.lifecycle import NodeState
from autoscaler.sandbox.fakes.kube import FakeKube
from autoscaler.schedulers.kubernetes.bounded_api import BoundedApiClient, call_limit
from autoscaler.schedulers.kubernetes.client import KubernetesConfig, connect
from tests.builders import NOW, make_node
from tests.trickle import trickling


@pytest.mark.timeout(30)
def test_a_drain_step_against_a_trickling_api_server_is_an_error_within_the_limit() -> None:
    with trickling() as trickle:
        ops = KubernetesOps(config=KubernetesConfig(host=trickle.url, timeout="0.5s"))
        drainer = PhasedDrainer(ops)
        ops.api()  # built beforehand: loading the CA bundle is no part of the call
        node = make_node("gpu-1", state=NodeState.DRAINING)
        progress = DrainProgress(reason="idle", started_at=NOW, deadline=NOW + timedelta(hours=1),
                                 grace=timedelta(seconds=60))
        started = time.monotonic()
        step = drainer.step(node, progress, NOW)  # the cordon overruns its 2 x 0.5 s
        assert time.monotonic() - started < 1.0 + 1.5
        assert step.outcome is DrainOutcome.ERROR
        assert step.message == "kubernetes: patch node gpu-1: API unreachable (ApiCallOverran)"
        started = time.monotonic()
        again = drainer.step(node, step.progress, NOW + timedelta(seconds=10))
        ready = drainer.readiness_many([node, make_node("gpu-2", state=NodeState.BOOTSTRAPPING)])
        assert time.monotonic() - started < 0.5  # while the first still runs: nothing sent
        assert again.outcome is DrainOutcome.ERROR
        assert {r.known for r in ready.values()} == {False}
        assert "list nodes: API unreachable (ApiCallOverran)" in ready["gpu-1"].why
        assert trickle.requests == 1


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "%s"}}]
users: [{name: u, user: {token: not-a-secret}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_a_kubeconfig_client_is_bounded_too(tmp_path: Path) -> None:
    with FakeKube() as kube:
        kube.add_node("gpu-1", gpus=4)
        path = tmp_path / "kubeconfig"
        path.write_text(KUBECONFIG % kube.url)
        api = connect(KubernetesConfig(kubeconfig=path, timeout="2s"))
        assert isinstance(api.api_client, BoundedApiClient)
        assert api.api_client.configuration.host == kube.url
        # No retries, as a host client: one attempt, so the whole-call limit is 2 x 2 s.
        assert api.api_client.configuration.retries is False
        assert call_limit(None, 2.0, api.api_client.configuration.retries) == 4.0
        assert api.read_node("gpu-1", _request_timeout=2).metadata.name == "gpu-1"


@pytest.mark.timeout(30)
def test_an_exec_whose_handshake_is_never_answered_is_a_drain_error_within_the_limit() -> None:
    """The checkpoint signal's WebSocket handshake has no time limit of its own: an API
    server that accepts and never answers held the drain step for ever."""
    from autoscaler.actuators.drain.base import DrainError

    with trickling(silent=True) as silent:
        ops = KubernetesOps(config=KubernetesConfig(host=silent.url, timeout="0.5s"))
        ops.api()
        started = time.monotonic()
        with pytest.raises(DrainError, match=r"^kubernetes: exec in ml/train-0 failed "
                                             r"\(ApiCallOverran\)$"):
            ops._exec("ml/train-0", "main", ["kill", "-USR1", "1"])
        assert time.monotonic() - started < 1.5 + 1.5  # 3 x the timeout
        started = time.monotonic()
        with pytest.raises(DrainError):  # while the first still runs: nothing sent
            ops._exec("ml/train-1", "main", ["kill", "-USR1", "1"])
        assert time.monotonic() - started < 0.5 and silent.requests == 1

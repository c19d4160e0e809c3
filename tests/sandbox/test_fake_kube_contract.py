"""The fake API server against the real clients: the official ``kubernetes`` client's own
watch and exec helpers, and ``kubectl`` (get, --watch, cordon, drain) on loopback."""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Iterator

import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream

from autoscaler.sandbox.fakes.kube import FakeKube

KUBECTL = shutil.which("kubectl")


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube(bookmark_s=0.2) as k:
        k.add_node("gpu-1", gpus=4)
        k.add_pod("train-0", "vision", node="gpu-1", gpus=2, labels={"app": "train"})
        yield k


def test_official_watch_streams_events_and_bookmarks(kube: FakeKube) -> None:
    api = kube.core_v1()
    version = api.list_namespaced_pod("vision").metadata.resource_version
    threading.Timer(0.3, lambda: (kube.add_pod("late", "vision", gpus=1),
                                  kube.finish_pod("vision/train-0"))).start()
    seen = []
    w = watch.Watch()
    for event in w.stream(api.list_namespaced_pod, "vision", resource_version=version,
                          field_selector="status.phase!=Succeeded", allow_watch_bookmarks=True,
                          timeout_seconds=2):
        seen.append((event["type"], event["object"].metadata.name if event["type"] != "BOOKMARK"
                     else "-"))
        if ("DELETED", "train-0") in seen and ("BOOKMARK", "-") in seen:
            w.stop()
    changes = [e for e in seen if e[0] != "BOOKMARK"]
    assert changes == [("ADDED", "late"), ("DELETED", "train-0")]  # train-0 left the selection
    assert ("BOOKMARK", "-") in seen


def test_old_resource_version_is_410_gone(kube: FakeKube) -> None:
    api = kube.core_v1()
    version = api.list_node().metadata.resource_version
    kube.compact()
    with pytest.raises(ApiException) as gone:
        for _ in watch.Watch().stream(api.list_node, resource_version=version, timeout_seconds=2):
            pass
    assert gone.value.status == 410
    fresh = api.list_node().metadata.resource_version  # a new list can be watched again
    kube.set_node_ready("gpu-1", False)
    event = next(iter(watch.Watch().stream(api.list_node, resource_version=fresh, timeout_seconds=2)))
    assert event["type"] == "MODIFIED"


def test_official_exec_stream(kube: FakeKube) -> None:
    api = kube.core_v1()
    ws = stream(api.connect_get_namespaced_pod_exec, "train-0", "vision", command=["kill", "-USR1", "1"],
                container="main", stdin=False, stdout=True, stderr=True, tty=False,
                _preload_content=False)
    ws.run_forever(timeout=5)
    assert ws.returncode == 0
    assert kube.execs == [("vision/train-0", "main", ["kill", "-USR1", "1"])]
    with pytest.raises(ApiException) as missing:
        stream(api.connect_get_namespaced_pod_exec, "nope", "vision", command=["true"],
               stdout=True, stderr=True, stdin=False, tty=False)
    assert "404" in str(missing.value.reason)  # the client reports a failed upgrade as status 0


def kubectl(kube: FakeKube, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None, "kubectl is installed by scripts/install.sh"
    return subprocess.run([KUBECTL, "--server", kube.url, *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_kubectl_get_watch_cordon_and_drain(kube: FakeKube) -> None:
    kube.add_pod("train-1", "vision", node="gpu-1", gpus=1, labels={"app": "train"})
    got = kubectl(kube, "get", "nodes")
    assert got.returncode == 0 and "gpu-1" in got.stdout, got.stderr
    got = kubectl(kube, "get", "pods", "-A", "-o", "name")
    assert got.stdout.split() == ["pod/train-0", "pod/train-1"]
    threading.Timer(1.0, lambda: kube.add_pod("late", "vision", gpus=1)).start()
    watched = kubectl(kube, "get", "pods", "-n", "vision", "--watch", "--request-timeout=3s")
    assert watched.returncode == 0, watched.stderr
    assert [line.split()[0] for line in watched.stdout.splitlines()[1:]] == [
        "train-0", "train-1", "late"]
    kube.refuse_evictions("vision/train-0", times=1)  # a PDB says no once
    drained = kubectl(kube, "drain", "gpu-1", "--force", "--timeout=30s", timeout=60)
    assert drained.returncode == 0, drained.stderr
    assert "node/gpu-1 drained" in drained.stdout
    assert "disruption budget" in drained.stderr  # the 429 was retried
    assert kube.cordoned("gpu-1") and sorted(kube.evicted) == ["vision/train-0", "vision/train-1"]
    assert kubectl(kube, "uncordon", "gpu-1").returncode == 0 and not kube.cordoned("gpu-1")

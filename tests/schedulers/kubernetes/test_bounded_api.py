"""The bounded Kubernetes client: each whole call (its answer's body included) within a
limit derived from its timeouts, an overrun is a urllib3 HTTPError, and one stuck call per
client at most. Against a real 127.0.0.1 server that trickles its answers."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from kubernetes import client
from urllib3.exceptions import HTTPError
from urllib3.util.retry import Retry

from autoscaler.sandbox.fakes.kube import FakeKube
from autoscaler.schedulers.kubernetes.bounded_api import (
    ApiCallOverran,
    BoundedApiClient,
    attempts,
    call_limit,
)
from autoscaler.schedulers.kubernetes.client import KubernetesConfig, api_client, connect
from tests.trickle import trickling


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as k:
        k.add_node("n1", gpus=4)
        yield k


def test_the_limit_is_two_timeouts_per_attempt() -> None:
    assert call_limit(10, 99, False) == 20  # the call's own timeout: connect + headers, body
    assert call_limit(None, 10, False) == 20  # none given: the configured one
    assert call_limit((1, 2), 10, 0) == 1 + 2 * 2
    assert call_limit(10, 10, None) == 4 * 20  # kubeconfig clients: urllib3's 3 retries
    assert [attempts(r) for r in (False, 0, 2, None, True, Retry(5), Retry(total=False))] == \
        [1, 1, 3, 4, 4, 6, 1]


def test_calls_that_end_answer_as_before(kube: FakeKube) -> None:
    api = connect(KubernetesConfig(host=kube.url, timeout="2s"))
    assert isinstance(api.api_client, BoundedApiClient)
    assert api.read_node("n1", _request_timeout=2).metadata.name == "n1"
    raw = api.list_node(_preload_content=False, _request_timeout=2)  # the body read, kept
    assert [n["metadata"]["name"] for n in json.loads(raw.data)["items"]] == ["n1"]
    with pytest.raises(client.ApiException) as refused:
        api.read_node("absent", _request_timeout=2)
    assert refused.value.status == 404
    # The reader's watch caches keep a plain client: a watch's stream stays open.
    assert type(api_client(KubernetesConfig(host=kube.url), bounded=False)) is client.ApiClient


@pytest.mark.timeout(30)
@pytest.mark.parametrize("preload", [True, False])
def test_a_trickled_answer_overruns_and_the_next_call_fails_at_once(preload: bool) -> None:
    with trickling() as trickle:
        api = connect(KubernetesConfig(host=trickle.url, timeout="0.5s"))
        started = time.monotonic()
        with pytest.raises(ApiCallOverran, match=r"kubernetes GET /api/v1/nodes/n1: did not "
                                                 r"finish its answer within 1s") as first:
            api.read_node("n1", _preload_content=preload, _request_timeout=0.5)
        assert 1.0 <= time.monotonic() - started < 1.0 + 1.5
        assert isinstance(first.value, HTTPError) and not first.value.still_running
        started = time.monotonic()
        with pytest.raises(ApiCallOverran, match="still runs: nothing sent") as second:
            api.patch_node("n1", {"spec": {"unschedulable": True}}, _request_timeout=0.5)
        assert time.monotonic() - started < 0.5 and second.value.still_running
        assert trickle.requests == 1

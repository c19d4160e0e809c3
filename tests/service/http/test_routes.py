"""Malformed and coerced requests to /v1/requests and /ui/login, on the API as the service
starts it: each is 400/411/413/422 with a one-line reason (401/403 where the caller is
the problem), never a 500, and no traceback reaches the log. Bodies and headers are also
generated (hypothesis); the table and the strategies are shared with the benchmark."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings

from autoscaler.service.app import Service
from tests.requests.conftest import BODY
from tests.service.http.hostile import (
    BODIES,
    CASES,
    HEADER_NAME,
    HEADER_VALUE,
    LENGTH,
    MALFORMED,
    NOT_A_BOOL,
    NOT_A_GPU_COUNT,
    PATHS,
    Answer,
    Malformed,
    exchange,
    no_tracebacks,
    one_line_reason,
    post_spec,
    request,
    running_service,
    with_header,
    with_length,
    with_node_set,
)

HYPOTHESIS = settings(max_examples=60, deadline=None,
                      suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_service(tmp_path_factory.mktemp("routes")) as svc:
        yield svc


@pytest.fixture
def send(service: Service, caplog: pytest.LogCaptureFixture) -> Iterator[Any]:
    caplog.set_level(logging.DEBUG)
    assert service.api is not None
    address = service.api.address
    yield lambda data: exchange(address, data)
    no_tracebacks(caplog)
    assert exchange(address, request("GET", "/healthz")).code in (200, 503)  # still serving


def refused(answer: Answer, *codes: int) -> str:
    reason = one_line_reason(answer, codes)
    assert reason is not None, (answer.code, answer.body[:300])
    return reason


@pytest.mark.exhausts_stack
@pytest.mark.parametrize("case", CASES, ids=[c.case for c in CASES])
def test_malformed_requests_are_4xx_with_a_one_line_reason(send, case: Malformed):
    assert case.says in refused(send(case.data), case.code)


def test_the_token_is_checked_before_the_body(send):
    bad = request("POST", "/v1/requests", b"[" * 5000, {"Authorization": "Bearer nope"})
    assert refused(send(bad), 401).startswith("a team's bearer token")


@HYPOTHESIS
@given(body=BODIES)
@example(body=b'{"\\n": null}')  # an unknown key is echoed as the field: escaped, one line
def test_generated_bodies_are_refused_as_data(send, body):
    refused(send(post_spec(body)), 400, 422)


@HYPOTHESIS
@given(gpus=NOT_A_GPU_COUNT, dry_run=NOT_A_BOOL)
def test_nothing_is_coerced(send, gpus, dry_run):
    """Only a JSON integer is a GPU count and only true/false a dry run: ``"4"``, ``4.0``,
    ``true``, ``"yes"`` and ``1`` are refused, not read as what they resemble."""
    assert "gpus" in refused(send(post_spec(with_node_set(gpus=gpus))), 422)
    body = json.dumps({**BODY, "dry_run": dry_run}).encode()
    assert "dry_run" in refused(send(post_spec(body)), 422)


@HYPOTHESIS
@given(name=HEADER_NAME, value=HEADER_VALUE, path=PATHS)
def test_generated_headers_never_reach_a_500(send, name, value, path):
    answer = send(with_header(path, name, value))
    assert answer.code < 500, answer
    if answer.code in MALFORMED:
        refused(answer, *MALFORMED)


@HYPOTHESIS
@given(length=LENGTH, path=PATHS)
def test_generated_content_lengths_are_refused_or_read_exactly(send, length, path):
    """A Content-Length that is not a number is 400, one too large 413 before reading, a
    short one frames the body: the rest is never read as a request."""
    answer = send(with_length(path, length))
    assert answer.code < 500, answer
    if answer.code in MALFORMED:
        refused(answer, *MALFORMED)

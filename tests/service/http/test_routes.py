"""Malformed and coerced requests to /v1/requests and /ui/login, on the API as the service
starts it: each is 400/411/413/422 with a one-line reason (401/403 where the caller is
the problem), never a 500, and no traceback reaches the log. Bodies and headers are also
generated (hypothesis)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.service.app import Service
from autoscaler.service.http.requests_api import MAX_BODY
from autoscaler.service.http.ui import MAX_FORM
from tests.requests.conftest import BODY, VISION
from tests.service.http.hostile import Answer, exchange, no_tracebacks, request, running_service

AUTH = {"Authorization": f"Bearer {VISION}"}
MALFORMED = (400, 411, 413, 422)
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
    assert answer.code in codes, (answer.code, answer.body[:300])
    reason = answer.reason()
    assert reason and "\n" not in reason, reason
    return reason


def post_spec(body: bytes, **kw: Any) -> bytes:
    return request("POST", "/v1/requests", body, {**AUTH, "Content-Type": "application/json"}, **kw)


def with_node_set(**changes: Any) -> bytes:
    return json.dumps({**BODY, "node_sets": [{**BODY["node_sets"][0], **changes}]}).encode()


@pytest.mark.parametrize(("data", "code", "says"), [
    (post_spec(b"[" * 5000 + b"]" * 5000), 400, "recursion limit"),
    (post_spec(b'{"name": "ci-\xff\xfe"}'), 400, "not JSON"),
    (post_spec(b'{"name": "ci-1", "node_sets": [{"gpus": ' + b"9" * 5001 + b"}]}"), 400, "not JSON"),
    (post_spec(b"[]"), 422, "(body)"),
    (post_spec(with_node_set(gpus="4")), 422, "node_sets.0.gpus"),
    (post_spec(with_node_set(gpus=True)), 422, "node_sets.0.gpus"),
    (post_spec(b'{"name": "ci-1", "node_sets": [{"gpu_model": "V100", "gpus": 4.0}]}'), 422, "gpus"),
    (post_spec(json.dumps({**BODY, "dry_run": "yes"}).encode()), 422, "dry_run"),
    (post_spec(json.dumps({**BODY, "ttl": 3600}).encode()), 422, "ttl"),
    (post_spec(json.dumps({**BODY, "valid_until": 1893456000}).encode()), 422, "valid_until"),
    (post_spec(b"{}", length="\u00b2"), 400, "Invalid HTTP request"),
    (post_spec(b"{}", length="-1"), 400, "Invalid HTTP request"),
    (post_spec(b""), 400, "not JSON"),
    (request("POST", "/v1/requests", None, AUTH), 411, "Content-Length"),
    (request("POST", "/v1/requests", None, {**AUTH, "Transfer-Encoding": "chunked"})
     + b"2\r\n{}\r\n0\r\n\r\n", 411, "Content-Length"),
    (post_spec(b"", length=str(MAX_BODY + 1)), 413, "larger than"),
    (post_spec(b"", length="9" * 5001), 400, "Invalid HTTP request"),
    (request("POST", "/ui/login", b"token=x", length="abc"), 400, "Invalid HTTP request"),
    (request("POST", "/ui/login", b"token=x", length="\u00b2"), 400, "Invalid HTTP request"),
    (request("POST", "/ui/login", b"", length=str(MAX_FORM + 1)), 413, "larger than"),
    (request("POST", "/ui/login"), 411, "Content-Length"),
    (b"GET /v1/requests HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n", 400, "Invalid HTTP request"),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400, "Invalid HTTP request"),  # TLS hello
], ids=["nested-5000", "invalid-utf8", "5001-digits", "not-an-object", "gpus-string",
        "gpus-true", "gpus-float", "dry-run-yes", "ttl-seconds", "valid-until-timestamp",
        "length-superscript", "length-negative", "empty", "no-length", "chunked", "too-large",
        "length-5001-digits", "login-length-abc", "login-length-superscript", "login-too-large",
        "login-no-length", "nul-in-header", "tls"])
def test_malformed_requests_are_4xx_with_a_one_line_reason(send, data, code, says):
    assert says in refused(send(data), code)


def test_the_token_is_checked_before_the_body(send):
    bad = request("POST", "/v1/requests", b"[" * 5000, {"Authorization": "Bearer nope"})
    assert refused(send(bad), 401).startswith("a team's bearer token")


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                    | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=20)


@HYPOTHESIS
@given(body=st.binary(max_size=512) | JSON.map(lambda v: json.dumps(v).encode()))
def test_generated_bodies_are_refused_as_data(send, body):
    refused(send(post_spec(body)), 400, 422)


NOT_A_GPU_COUNT = (st.text(max_size=5) | st.booleans() | st.none() | st.floats(allow_nan=False)
                   | st.integers().filter(lambda n: not 1 <= n <= 16) | st.lists(st.integers(1, 4)))


@HYPOTHESIS
@given(gpus=NOT_A_GPU_COUNT, dry_run=st.none() | st.text(max_size=5) | st.integers() | st.floats())
def test_nothing_is_coerced(send, gpus, dry_run):
    """Only a JSON integer is a GPU count and only true/false a dry run: ``"4"``, ``4.0``,
    ``true``, ``"yes"`` and ``1`` are refused, not read as what they resemble."""
    assert "gpus" in refused(send(post_spec(with_node_set(gpus=gpus))), 422)
    body = json.dumps({**BODY, "dry_run": dry_run}).encode()
    assert "dry_run" in refused(send(post_spec(body)), 422)


FRAMING = {"host", "connection", "content-length", "transfer-encoding", "expect"}
HEADER_NAME = st.text("abcdefghijklmnopqrstuvwxyz-_.!#$%&'*+^`|~0123456789", min_size=1,
                      max_size=20).filter(lambda n: n.lower() not in FRAMING)
HEADER_VALUE = st.binary(max_size=60).filter(lambda v: b"\r" not in v and b"\n" not in v)


@HYPOTHESIS
@given(name=HEADER_NAME, value=HEADER_VALUE, path=st.sampled_from(["/v1/requests", "/ui/login"]))
def test_generated_headers_never_reach_a_500(send, name, value, path):
    head = request("POST", path, None, AUTH, length="2")[:-2]
    answer = send(head + name.encode() + b": " + value + b"\r\n\r\n{}")
    assert answer.code < 500, answer
    if answer.code in MALFORMED:
        refused(answer, *MALFORMED)


LENGTH = (st.text(st.characters(blacklist_characters="\r\n"), min_size=1, max_size=12)
          .filter(lambda t: not (t.strip().isascii() and t.strip().isdigit()))
          | st.integers(MAX_BODY + 1, 10**30).map(str) | st.integers(0, 6).map(str))


@HYPOTHESIS
@given(length=LENGTH, path=st.sampled_from(["/v1/requests", "/ui/login"]))
def test_generated_content_lengths_are_refused_or_read_exactly(send, length, path):
    """A Content-Length that is not a number is 400, one too large 413 before reading, a
    short one frames the body: the rest is never read as a request."""
    answer = send(request("POST", path, b"token=", {**AUTH, "Origin": "http://127.0.0.1"},
                          length=length))
    assert answer.code < 500, answer
    if answer.code in MALFORMED:
        refused(answer, *MALFORMED)

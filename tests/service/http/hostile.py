"""What the hostile-input tests of the HTTP API and benchmarks/hostile_http.py share: the
service as it starts its API (team tokens on), a raw HTTP/1.1 exchange for requests no
well-behaved client sends, the table of malformed requests (issue 30, class 5) and the
strategies that generate more."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from autoscaler.fleet.store import FleetStore
from autoscaler.service.app import Service
from autoscaler.service.config.models import ServiceConfig
from autoscaler.service.http.requests_api import MAX_BODY
from autoscaler.service.http.ui import MAX_FORM
from autoscaler.service.wiring import Overrides, build_service
from tests.requests.conftest import BODY, OPERATOR, VISION
from tests.service.service_fakes import Clock, FakeExecutor, FakePrices, FakeSignals, write_policy


@contextmanager
def running_service(root: Path) -> Iterator[Service]:
    """A built service with its API on a free loopback port and the team ``vision``."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("GAS_OP", OPERATOR)
        env.setenv("GAS_VISION", VISION)
        write_policy(root / "policies", "vision", name="train", max_nodes=4)
        config = ServiceConfig.model_validate({
            "policies_dir": root / "policies", "tick": {"interval": "2s"},
            "store": {"url": f"sqlite:///{root / 'fleet.db'}"},
            "http": {"listen": "127.0.0.1:0", "token_env": "GAS_OP",
                     "team_tokens": {"vision": {"env": "GAS_VISION"}}},
            "ansible": {"secret_env": {"cluster_join_munge_key_b64": "GAS_MUNGE"}},
        })
        clock, store = Clock(), FleetStore(config.store.url)
        svc = build_service(config, clock=clock, overrides=Overrides(
            signals=FakeSignals(), prices=FakePrices(), store=store,
            executor=FakeExecutor(store, clock)))
        try:
            svc.tick()  # the first tick loads the policies
            svc.start_api()
            yield svc
        finally:
            svc.close()
            store.close()


@dataclass(frozen=True)
class Answer:
    code: int
    ctype: str
    body: bytes

    def reason(self) -> str:
        """The refusal's reason: the JSON ``error`` or the plain-text body."""
        if self.ctype.startswith("application/json"):
            return str(json.loads(self.body)["error"])
        return self.body.decode("utf-8", "replace").strip()


def exchange(address: tuple[str, int], data: bytes, timeout: float = 5) -> Answer:
    """Send ``data`` as it is, read the answer until the server closes."""
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.sendall(data)
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(":", 1) for line in lines[1:] if ":" in line)
    ctype = {k.strip().lower(): v.strip() for k, v in headers.items()}.get("content-type", "")
    return Answer(int(lines[0].split(" ", 2)[1]), ctype, body)


def request(method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
            *, length: str | None = None) -> bytes:
    """A raw request that asks the server to close after answering."""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    elif body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + (body or b"")


def one_line_reason(answer: Answer, codes: tuple[int, ...]) -> str | None:
    """The reason of a refusal with one of ``codes`` and a one-line reason, else None."""
    if answer.code not in codes:
        return None
    try:
        reason = answer.reason()
    except (ValueError, KeyError):
        return None
    return reason if reason and "\n" not in reason else None


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert bad == [], [r.getMessage() for r in bad]
    assert "Traceback" not in caplog.text


AUTH = {"Authorization": f"Bearer {VISION}"}
MALFORMED = (400, 411, 413, 422)


def post_spec(body: bytes, **kw: Any) -> bytes:
    return request("POST", "/v1/requests", body, {**AUTH, "Content-Type": "application/json"}, **kw)


def with_node_set(**changes: Any) -> bytes:
    return json.dumps({**BODY, "node_sets": [{**BODY["node_sets"][0], **changes}]}).encode()


@dataclass(frozen=True)
class Malformed:
    case: str
    data: bytes
    code: int
    says: str  # in the one-line reason


CASES = [
    Malformed("nested-5000", post_spec(b"[" * 5000 + b"]" * 5000), 400, "recursion limit"),
    Malformed("invalid-utf8", post_spec(b'{"name": "ci-\xff\xfe"}'), 400, "not JSON"),
    Malformed("5001-digits", post_spec(b'{"name": "ci-1", "node_sets": [{"gpus": '
                                       + b"9" * 5001 + b"}]}"), 400, "not JSON"),
    Malformed("not-an-object", post_spec(b"[]"), 422, "(body)"),
    Malformed("gpus-string", post_spec(with_node_set(gpus="4")), 422, "node_sets.0.gpus"),
    Malformed("gpus-true", post_spec(with_node_set(gpus=True)), 422, "node_sets.0.gpus"),
    Malformed("gpus-float", post_spec(b'{"name": "ci-1", "node_sets": [{"gpu_model": "V100", '
                                      b'"gpus": 4.0}]}'), 422, "gpus"),
    Malformed("dry-run-yes", post_spec(json.dumps({**BODY, "dry_run": "yes"}).encode()), 422,
              "dry_run"),
    Malformed("ttl-seconds", post_spec(json.dumps({**BODY, "ttl": 3600}).encode()), 422, "ttl"),
    Malformed("valid-until-timestamp", post_spec(json.dumps(
        {**BODY, "valid_until": 1893456000}).encode()), 422, "valid_until"),
    Malformed("length-superscript", post_spec(b"{}", length="\u00b2"), 400,
              "Invalid HTTP request"),
    Malformed("length-negative", post_spec(b"{}", length="-1"), 400, "Invalid HTTP request"),
    Malformed("empty", post_spec(b""), 400, "not JSON"),
    Malformed("no-length", request("POST", "/v1/requests", None, AUTH), 411, "Content-Length"),
    Malformed("chunked", request("POST", "/v1/requests", None, {**AUTH, "Transfer-Encoding":
                                                                "chunked"})
              + b"2\r\n{}\r\n0\r\n\r\n", 411, "Content-Length"),
    Malformed("too-large", post_spec(b"", length=str(MAX_BODY + 1)), 413, "larger than"),
    Malformed("length-5001-digits", post_spec(b"", length="9" * 5001), 400,
              "Invalid HTTP request"),
    Malformed("login-length-abc", request("POST", "/ui/login", b"token=x", length="abc"), 400,
              "Invalid HTTP request"),
    Malformed("login-length-superscript", request("POST", "/ui/login", b"token=x",
                                                  length="\u00b2"), 400, "Invalid HTTP request"),
    Malformed("login-too-large", request("POST", "/ui/login", b"", length=str(MAX_FORM + 1)), 413,
              "larger than"),
    Malformed("login-no-length", request("POST", "/ui/login"), 411, "Content-Length"),
    Malformed("nul-in-header", b"GET /v1/requests HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n", 400,
              "Invalid HTTP request"),
    Malformed("tls-hello", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400,
              "Invalid HTTP request"),
]

# Generated inputs: any JSON or bytes as a body; a GPU count or a dry-run flag of every
# JSON type but the right one; any header; any Content-Length that is not exactly the body's.
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                    | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=20)
BODIES = st.binary(max_size=512) | JSON.map(lambda v: json.dumps(v).encode())
NOT_A_GPU_COUNT = (st.text(max_size=5) | st.booleans() | st.none() | st.floats(allow_nan=False)
                   | st.integers().filter(lambda n: not 1 <= n <= 16) | st.lists(st.integers(1, 4)))
NOT_A_BOOL = st.none() | st.text(max_size=5) | st.integers() | st.floats()
_FRAMING = {"host", "connection", "content-length", "transfer-encoding", "expect"}
HEADER_NAME = st.text("abcdefghijklmnopqrstuvwxyz-_.!#$%&'*+^`|~0123456789", min_size=1,
                      max_size=20).filter(lambda n: n.lower() not in _FRAMING)
HEADER_VALUE = st.binary(max_size=60).filter(lambda v: b"\r" not in v and b"\n" not in v)
LENGTH = (st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), min_size=1, max_size=12)
          .filter(lambda t: not (t.strip().isascii() and t.strip().isdigit()))
          | st.integers(MAX_BODY + 1, 10**30).map(str) | st.integers(0, 6).map(str))
PATHS = st.sampled_from(["/v1/requests", "/ui/login"])


def with_header(path: str, name: str, value: bytes) -> bytes:
    head = request("POST", path, None, AUTH, length="2")[:-2]
    return head + name.encode() + b": " + value + b"\r\n\r\n{}"


def with_length(path: str, length: str) -> bytes:
    return request("POST", path, b"token=", {**AUTH, "Origin": "http://127.0.0.1"},
                   length=length)


__all__ = ["AUTH", "BODIES", "CASES", "HEADER_NAME", "HEADER_VALUE", "LENGTH", "MALFORMED",
           "NOT_A_BOOL", "NOT_A_GPU_COUNT", "PATHS", "Answer", "Malformed", "exchange",
           "no_tracebacks", "one_line_reason", "post_spec", "request", "running_service",
           "with_header", "with_length", "with_node_set"]

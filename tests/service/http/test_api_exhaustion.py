"""The real HTTP server under idle, slow and vanishing clients; bearer tokens that are
empty or short never authorise."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import Iterator

import pytest

from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.service.http.api import ApiError, ApiHandlers, ApiServer, Health
from autoscaler.service.http.serve import Limits
from tests.service.http.test_api import get

TOKEN = "tok-3f9a1c0d5e7b-long"


def handlers() -> ApiHandlers:
    return ApiHandlers(health=lambda: Health(True, "ok"), metrics=lambda: b"m 1\n",
                       status=lambda: {"fleet": "everything"}, plan=lambda: None)


@pytest.fixture
def server() -> Iterator[ApiServer]:
    srv = ApiServer(handlers(), "127.0.0.1", 0, TOKEN).start()
    yield srv
    srv.stop()


def connect(srv: ApiServer) -> socket.socket:
    sock = socket.create_connection(srv.address, timeout=5)
    sock.settimeout(5)
    return sock


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert bad == [], [r.getMessage() for r in bad]
    assert "Traceback" not in caplog.text


def closed_by_server(sock: socket.socket) -> bytes:
    """Everything the server sent before it closed the connection."""
    got = b""
    while chunk := sock.recv(4096):
        got += chunk
    return got


def test_400_half_open_connections_hold_no_threads_and_the_server_answers(
        server: ApiServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    before = threading.active_count()
    socks = [connect(server) for _ in range(400)]
    try:
        wait_until(lambda: server.server.open_connections() >= 200, 10, "the server to accept")
        threads = threading.active_count() - before
        assert threads <= 8, f"{threads} threads for 400 silent connections"
        code, _, body = get(f"{server.url}/healthz")
        assert code == 200 and json.loads(body)["status"] == "ok"
        assert get(f"{server.url}/status", TOKEN)[0] == 200
        assert server.server.open_connections() <= server.server.limits.max_connections
    finally:
        for sock in socks:
            sock.close()
    assert get(f"{server.url}/healthz")[0] == 200
    wait_until(lambda: server.server.open_connections() == 0, 5, "the server to see every close")
    no_tracebacks(caplog)


def test_silent_connections_are_closed_after_the_request_deadline(caplog) -> None:
    srv = ApiServer(handlers(), "127.0.0.1", 0, TOKEN, limits=Limits(request_timeout=0.5)).start()
    try:
        sock = connect(srv)
        wait_until(lambda: srv.server.open_connections() == 1, 5, "the connection to be accepted")
        assert sock.recv(1) == b""  # closed by the server, no thread was ever spent on it
        wait_until(lambda: srv.server.open_connections() == 0, 5, "the server to forget it")
    finally:
        srv.stop()


def test_slow_and_vanishing_clients_are_not_errors(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    srv = ApiServer(handlers(), "127.0.0.1", 0, TOKEN, limits=Limits(request_timeout=0.5)).start()
    try:
        slow = connect(srv)
        slow.sendall(b"GET /healthz HTTP/1.1\r\n")  # never finishes its headers
        half = connect(srv)
        half.sendall(b"GET /status HTTP/1.1\r\nAuthorization: Bearer " + TOKEN.encode() + b"\r\n\r\n")
        half.close()  # gone before reading the answer
        for _ in range(20):
            with contextlib.closing(connect(srv)) as sock:
                sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        # Changed on purpose (issue 30): a begun request past its deadline is answered 408
        # before the close (the old server closed without a word).
        assert closed_by_server(slow).startswith(b"HTTP/1.1 408 ")
        slow.close()
        assert get(f"{srv.url}/healthz")[0] == 200
    finally:
        srv.stop()
    no_tracebacks(caplog)


def test_a_client_that_never_reads_its_answer_is_cut_off(caplog: pytest.LogCaptureFixture) -> None:
    big = b"m 1\n" * 5_000_000  # 20 MB: more than the loopback socket buffers take
    slow_reader = ApiHandlers(health=lambda: Health(True, "ok"), metrics=lambda: big,
                              status=dict, plan=lambda: None)
    srv = ApiServer(slow_reader, "127.0.0.1", 0, TOKEN, limits=Limits(request_timeout=0.5)).start()
    try:
        sock = connect(srv)
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 200 ")  # answered, then never read
        assert srv.server.open_connections() == 1
        wait_until(lambda: srv.server.open_connections() == 0, 10,
                   "the server to drop a connection whose answer is not read")
        sock.close()
    finally:
        srv.stop()
    no_tracebacks(caplog)


@pytest.mark.parametrize("header", ["Bearer", "Bearer ", "Bearer    ", "bearer", "Basic x",
                                    f"Bearer {TOKEN[:-1]}", f"Token {TOKEN}"])
def test_a_missing_or_wrong_bearer_value_never_authorises(server: ApiServer, header: str) -> None:
    with contextlib.closing(connect(server)) as sock:
        sock.sendall(f"GET /status HTTP/1.0\r\nAuthorization: {header}\r\n\r\n".encode())
        answer = closed_by_server(sock).decode()
    assert answer.split(" ", 2)[1] == "401" and "everything" not in answer


@pytest.mark.parametrize("token", ["", "   ", "short-token"])
def test_empty_or_short_tokens_are_refused_by_the_server(token: str) -> None:
    for host in ("127.0.0.1", "0.0.0.0"):
        with pytest.raises(ApiError, match="at least 16"):
            ApiServer(handlers(), host, 0, token)

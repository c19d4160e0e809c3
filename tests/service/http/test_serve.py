"""The API as the service starts it, under 300 half-open and 10 trickling clients: the
probes answer within 1 s throughout, threads and tasks stay bounded, open connections
stay under the cap, and the request deadline ends every stalled client."""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.service.app import Service
from autoscaler.service.http.routes import PROBE_WORKERS, WORKERS
from autoscaler.service.http.serve import Limits
from tests.service.http.hostile import no_tracebacks, running_service

HALF_OPEN, TRICKLING = 300, 10
TRICKLE_EVERY = 2.0  # seconds between two header bytes of one trickling client
TRICKLE = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"z" * 100


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    with running_service(tmp_path) as svc:
        yield svc


def probe(url: str) -> float:
    """Seconds until the whole answer; /healthz may be 503 here (no scheduler ticks the
    loop in this test): the probe is about answering, not about the verdict."""
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            resp.read()
            code = resp.status
    except urllib.error.HTTPError as exc:
        exc.read()
        code = exc.code
    assert code == 200 or (code == 503 and url.endswith("/healthz")), (url, code)
    return time.monotonic() - started


class Clients:
    """Sockets the server is expected to close; ``closed()`` drains what it sent."""

    def __init__(self) -> None:
        self.open: dict[socket.socket, bytes] = {}
        self.answers: list[bytes] = []

    def add(self, sock: socket.socket, first: bytes) -> None:
        sock.sendall(first)
        self.open[sock] = b""

    def reap(self) -> None:
        if not self.open:
            return
        readable, _, _ = select.select(list(self.open), [], [], 0)
        for sock in readable:
            chunk = sock.recv(4096)
            self.open[sock] += chunk
            if not chunk:
                self.answers.append(self.open.pop(sock))
                sock.close()

    def close(self) -> None:
        for sock in self.open:
            sock.close()


def test_half_open_and_trickling_clients_leave_the_probes_answering(
        service: Service, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    api = service.api
    assert api is not None
    limits: Limits = api.server.limits
    threads_before = threading.active_count()
    half, slow = Clients(), Clients()
    sent = dict.fromkeys(range(TRICKLING), 1)
    try:
        for _ in range(HALF_OPEN):  # half a request line, then nothing
            half.add(socket.create_connection(api.address, timeout=5), b"GET /hea")
        trickling = [socket.create_connection(api.address, timeout=5) for _ in range(TRICKLING)]
        for sock in trickling:
            slow.add(sock, TRICKLE[:1])
        started, next_byte = time.monotonic(), time.monotonic() + TRICKLE_EVERY
        latencies, most_threads, most_tasks, most_open = [], 0, 0, 0
        # The deadline runs from each connection's opening: all are closed after it.
        until = started + limits.request_timeout + 5
        while (half.open or slow.open) and time.monotonic() < until:
            if time.monotonic() >= next_byte:  # one more header byte from each
                for i, sock in enumerate(trickling):
                    if sock in slow.open:
                        sock.sendall(TRICKLE[sent[i]:sent[i] + 1])
                        sent[i] += 1
                next_byte += TRICKLE_EVERY
            latencies += [probe(f"{api.url}/healthz"), probe(f"{api.url}/metrics")]
            most_threads = max(most_threads, threading.active_count() - threads_before)
            most_tasks = max(most_tasks, api.server.running_tasks())
            most_open = max(most_open, api.server.open_connections())
            half.reap()
            slow.reap()
            time.sleep(0.05)
        took = time.monotonic() - started
        assert not half.open and not slow.open, (
            f"{len(half.open)} half-open and {len(slow.open)} trickling clients still open "
            f"after {took:.1f}s")
    finally:
        half.close()
        slow.close()
    assert max(latencies) < 1.0 and len(latencies) > 20, (max(latencies), len(latencies))
    assert most_threads <= WORKERS + PROBE_WORKERS, most_threads
    assert most_tasks <= WORKERS + PROBE_WORKERS, most_tasks
    assert most_open <= limits.max_connections + 1, most_open  # + the probe's own, briefly
    # Trickling clients had begun their request: each heard why before the close.
    assert all(a.startswith(b"HTTP/1.1 408 ") for a in slow.answers), slow.answers[:2]
    assert took < limits.request_timeout + 4  # closed by the deadline, not by the test
    wait_until(lambda: api.server.open_connections() == 0, 5, "every connection to be closed")
    no_tracebacks(caplog)


def test_over_the_cap_the_oldest_waiting_connection_makes_room(
        service: Service, caplog: pytest.LogCaptureFixture) -> None:
    api = service.api
    assert api is not None
    cap = api.server.limits.max_connections
    clients = Clients()
    try:
        first = socket.create_connection(api.address, timeout=5)
        clients.add(first, b"GET /hea")
        wait_until(lambda: api.server.open_connections() == 1, 5, "the first to be accepted")
        for _ in range(cap):
            clients.add(socket.create_connection(api.address, timeout=5), b"")

        def first_closed() -> bool:
            clients.reap()
            return first not in clients.open

        wait_until(first_closed, 5, "the oldest connection to be closed")
        assert api.server.open_connections() <= cap
        assert probe(f"{api.url}/healthz") < 1.0
    finally:
        clients.close()
    no_tracebacks(caplog)

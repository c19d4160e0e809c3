"""The API as the service starts it, under 300 half-open and 10 trickling clients: the
probes answer within 1 s throughout, threads and tasks stay bounded, open connections
stay under the cap, and the request deadline ends every stalled client."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.service.app import Service
from autoscaler.service.http.routes import PROBE_WORKERS, WORKERS
from tests.service.http.hostile import no_tracebacks, running_service
from tests.service.http.slow_clients import Clients, probe, slow_clients


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    with running_service(tmp_path) as svc:
        yield svc


def test_half_open_and_trickling_clients_leave_the_probes_answering(
        service: Service, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    api = service.api
    assert api is not None
    limits = api.server.limits
    # A probe queued behind the stalled clients would wait for their deadline (10 s); one
    # answered well within it was served beside them. How fast, on an idle machine, is
    # benchmarks/hostile_http.py's to measure: a full suite on two cores can starve any
    # process for a second.
    within = limits.request_timeout / 3
    run = slow_clients(api, half_open=300, trickling=10, every=2.0, probe_timeout=within)
    assert run.still_open == 0, f"{run.still_open} stalled clients open after {run.seconds:.1f}s"
    assert max(run.latencies) < within and len(run.latencies) > 20, (max(run.latencies),
                                                                     len(run.latencies))
    assert run.most_threads <= WORKERS + PROBE_WORKERS, run.most_threads
    assert run.most_tasks <= WORKERS + PROBE_WORKERS, run.most_tasks
    assert run.most_open <= limits.max_connections + 1, run.most_open  # + a probe, briefly
    # The trickling clients had begun their request: each heard why before the close.
    assert len(run.trickle_answers) == 10
    assert all(a.startswith(b"HTTP/1.1 408 ") for a in run.trickle_answers), run.trickle_answers
    assert run.seconds < limits.request_timeout + 4  # closed by the deadline, not the test
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
        within = api.server.limits.request_timeout / 3  # not queued behind a stalled client
        assert probe(f"{api.url}/healthz", within) < within
    finally:
        clients.close()
    no_tracebacks(caplog)

"""Slow clients against a running API: ``half_open`` connections that send half a request
line and stall, ``trickling`` ones that send one header byte every ``every`` seconds,
while /healthz and /metrics are probed. What test_serve.py asserts and
benchmarks/hostile_http.py measures."""

from __future__ import annotations

import select
import socket
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from autoscaler.service.http.api import ApiServer

TRICKLE = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"z" * 100


def probe(url: str, timeout: float = 1.0) -> float:
    """Seconds until the whole answer; /healthz may be 503 (no scheduler ticks the loop
    here): the probe is about answering, not about the verdict."""
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            resp.read()
            code = resp.status
    except urllib.error.HTTPError as exc:
        exc.read()
        code = exc.code
    if not (code == 200 or (code == 503 and url.endswith("/healthz"))):
        raise AssertionError(f"{url} answered {code}")
    return time.monotonic() - started


class Clients:
    """Sockets the server is expected to close; ``reap()`` drains what it sent."""

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
            try:
                chunk = sock.recv(4096)
            except ConnectionResetError:
                chunk = b""
            self.open[sock] += chunk
            if not chunk:
                self.answers.append(self.open.pop(sock))
                sock.close()

    def close(self) -> None:
        for sock in self.open:
            sock.close()


@dataclass
class Run:
    latencies: list[float] = field(default_factory=list)  # seconds, /healthz and /metrics
    healthz: list[float] = field(default_factory=list)  # seconds, /healthz only
    most_threads: int = 0  # threads above those running before
    most_tasks: int = 0  # request handlers running at once
    most_open: int = 0  # open connections the server counted
    still_open: int = 0  # stalled clients the server had not closed at the end
    trickle_answers: list[bytes] = field(default_factory=list)
    seconds: float = 0.0


def slow_clients(api: ApiServer, half_open: int = 300, trickling: int = 10, every: float = 2.0,
                 grace: float = 5.0, probe_timeout: float = 1.0) -> Run:
    """Until the server has closed every stalled client (or its request deadline plus
    ``grace`` has passed)."""
    run = Run()
    threads_before = threading.active_count()
    half, slow = Clients(), Clients()
    try:
        for _ in range(half_open):  # half a request line, then nothing
            half.add(socket.create_connection(api.address, timeout=5), b"GET /hea")
        trickle = [socket.create_connection(api.address, timeout=5) for _ in range(trickling)]
        sent = dict.fromkeys(range(trickling), 1)
        for sock in trickle:
            slow.add(sock, TRICKLE[:1])
        started = time.monotonic()
        next_byte, until = started + every, started + api.server.limits.request_timeout + grace
        while (half.open or slow.open) and time.monotonic() < until:
            if time.monotonic() >= next_byte:  # one more header byte from each
                for i, sock in enumerate(trickle):
                    if sock in slow.open:
                        sock.sendall(TRICKLE[sent[i]:sent[i] + 1])
                        sent[i] += 1
                next_byte += every
            run.healthz.append(probe(f"{api.url}/healthz", probe_timeout))
            run.latencies += [run.healthz[-1], probe(f"{api.url}/metrics", probe_timeout)]
            run.most_threads = max(run.most_threads, threading.active_count() - threads_before)
            run.most_tasks = max(run.most_tasks, api.server.running_tasks())
            run.most_open = max(run.most_open, api.server.open_connections())
            half.reap()
            slow.reap()
            time.sleep(0.05)
        run.seconds = time.monotonic() - started
        run.still_open = len(half.open) + len(slow.open)
        run.trickle_answers = slow.answers
    finally:
        half.close()
        slow.close()
    return run


__all__ = ["Clients", "Run", "probe", "slow_clients"]

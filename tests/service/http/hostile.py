"""What the hostile-input tests of the HTTP API share: the service as it starts its API
(team tokens on), and a raw HTTP/1.1 exchange for requests no well-behaved client sends."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from autoscaler.fleet.store import FleetStore
from autoscaler.service.app import Service
from autoscaler.service.config.models import ServiceConfig
from autoscaler.service.wiring import Overrides, build_service
from tests.requests.conftest import OPERATOR, VISION
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


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert bad == [], [r.getMessage() for r in bad]
    assert "Traceback" not in caplog.text


__all__ = ["Answer", "exchange", "no_tracebacks", "request", "running_service"]

"""``gpu-autoscaler status`` exit status, against a server on 127.0.0.1 that answers what the
test says: 0 all well, 2 the service answers but decides without all its data (a source
missing, a failed tick), 1 it cannot be reached. (Against the real service:
tests/service/http/test_status.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from autoscaler.cli import app
from tests.hostile_answers import AnswerServer, Reply, one_line_refusal

runner = CliRunner()
HEALTHY: dict[str, Any] = {"loop": {"ticks": 3}, "leader": {"is_leader": True}, "fleet": {}}


@pytest.fixture(scope="module")
def server() -> Iterator[AnswerServer]:
    srv = AnswerServer().start()
    yield srv
    srv.stop()


def status(server: AnswerServer, doc: dict[str, Any], *flags: str):
    server.reply = Reply(200, json.dumps(doc).encode())
    return runner.invoke(app, ["status", "--url", server.url, *flags], env={"COLUMNS": "200"})


def test_a_healthy_service_exits_0(server):
    result = status(server, HEALTHY)
    assert result.exit_code == 0, result.output
    assert "leader; 3 ticks" in result.output


@pytest.mark.parametrize("flags", [[], ["--json"]])
@pytest.mark.parametrize(("problem", "shown"), [
    ({"sources_missing": ["prometheus: connection refused"]}, "source missing: prometheus"),
    ({"loop": {"ticks": 3, "last_error": "boom", "last_error_stage": "signals"}},
     "last tick failed in signals: boom"),
])
def test_a_service_deciding_without_all_its_data_exits_2(server, problem, shown, flags):
    result = status(server, {**HEALTHY, **problem}, *flags)
    assert result.exit_code == 2, result.output
    if not flags:
        assert shown in result.output


def test_a_service_that_cannot_be_reached_exits_1():
    result = runner.invoke(app, ["status", "--url", "http://127.0.0.1:9"])
    assert one_line_refusal(result.exit_code, result.output), result.output
    assert "cannot reach the service" in result.output

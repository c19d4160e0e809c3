"""``gpu-autoscaler request create`` against a server on 127.0.0.1 that answers what the test
says: a dry run prints its cost preview in text too, and a node set without a GPU model or
an instance type is refused in one line before anything is sent. (Against the real API:
tests/requests/test_request_cli.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from autoscaler.cli import app
from tests.hostile_answers import (
    REQUEST_ID,
    TOKEN,
    TOKEN_ENV,
    AnswerServer,
    Reply,
    one_line_refusal,
    with_server,
)

runner = CliRunner()
CREATE = ["request", "create", "--name", "ci-1", "--gpus", "1"]


@pytest.fixture(scope="module")
def server() -> Iterator[AnswerServer]:
    srv = AnswerServer().start()
    yield srv
    srv.stop()


def run(server: AnswerServer, argv: list[str]):
    return runner.invoke(app, with_server(argv, server.url), env={TOKEN_ENV: TOKEN})


def test_a_dry_run_prints_its_cost_preview(server):
    reason = ("dry run, nothing bought: request ci-1 accepted: 1 x g4dn.xlarge in vision/v100, "
              "+$0.53/h on-demand")
    server.reply = Reply(201, json.dumps({"id": REQUEST_ID, "condition": "Released",
                                          "reason": reason}).encode())
    result = run(server, [*CREATE, "--gpu-model", "T4", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"{REQUEST_ID} Released: {reason}"


@pytest.mark.parametrize("kind", [[], ["--gpu-model", "T4", "--instance-type", "g4dn.xlarge"]])
def test_exactly_one_of_gpu_model_or_instance_type_is_checked_before_sending(server, kind):
    before = server.hits
    result = run(server, [*CREATE, *kind])
    assert one_line_refusal(result.exit_code, result.output), result.output
    assert "give exactly one of --gpu-model" in result.output
    assert server.hits == before

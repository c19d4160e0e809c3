"""``gpu-autoscaler request create|wait|release|list`` against the real HTTP API."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.fleet.requests import RequestBook
from autoscaler.model.request_spec import Condition
from tests.builders import NOW
from tests.requests.conftest import VISION

runner = CliRunner()


def cli(service, *args):
    return runner.invoke(app, ["request", *args, "--url", service.api.url,
                               "--token-env", "GAS_VISION"], env={"GAS_VISION": VISION})


def test_create_wait_release_list(service):
    made = cli(service, "create", "--name", "ci-4711", "--gpu-model", "V100", "--gpus", "4",
               "--nodes", "2", "--idempotency-key", "gha-run-881-attempt", "--ttl", "2h")
    assert made.exit_code == 0, made.output
    rid = made.output.strip()
    again = cli(service, "create", "--name", "ci-4711", "--gpu-model", "V100", "--gpus", "4",
                "--nodes", "2", "--idempotency-key", "gha-run-881-attempt", "--ttl", "2h")
    assert again.output.strip() == rid  # a retried CI step does not buy twice
    book = RequestBook(service.store)
    assert book.get(rid).spec.ttl.total_seconds() == 7200
    early = cli(service, "wait", rid, "--timeout", "0.2", "--poll", "0.1")
    assert early.exit_code == 2 and "still Accepted" in early.output
    book.set_condition(rid, Condition.PROVISIONED, NOW, "2 nodes ready",
                       nodes={"vision-train-2": "10.0.0.2", "vision-train-1": "10.0.0.1"})
    done = cli(service, "wait", rid, "--timeout", "5")
    assert done.exit_code == 0 and done.output.split() == ["vision-train-1", "vision-train-2"]
    as_json = cli(service, "wait", rid, "--json")
    assert json.loads(as_json.output)["nodes"]["vision-train-1"] == "10.0.0.1"
    listed = cli(service, "list")
    assert listed.output.startswith(f"{rid} Provisioned: 2 nodes ready")
    gone = cli(service, "release", rid)
    assert gone.exit_code == 0 and "Released" in gone.output
    assert book.get(rid).condition is Condition.RELEASED


def test_failures_exit_non_zero_with_the_reason(service):
    refused = cli(service, "create", "--name", "ci-big", "--gpu-model", "V100", "--gpus", "4",
                  "--nodes", "9")
    assert refused.exit_code == 1 and "max_nodes 4 (holds 0, +9 would exceed)" in refused.output
    rid = refused.output.split()[0]
    assert cli(service, "wait", rid).exit_code == 1
    bad = cli(service, "create", "--name", "bad name", "--gpus", "4", "--gpu-model", "V100")
    assert bad.exit_code == 1 and "HTTP 422" in bad.output and "name:" in bad.output
    nope = runner.invoke(app, ["request", "list", "--url", service.api.url, "--token-env", "UNSET_X"])
    assert nope.exit_code == 1 and "UNSET_X is not set" in nope.output

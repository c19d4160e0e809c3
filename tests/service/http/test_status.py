"""``gpu-autoscaler status`` renders /status; ``run`` ticks and stops cleanly on SIGTERM."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import sys
import urllib.request
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.cli.status import status_view
from autoscaler.fleet.store import FleetStore
from autoscaler.model.snapshot import PoolObservation, SpotScore
from autoscaler.sandbox.hosts.procs import ManagedProcess, free_port, wait_until
from autoscaler.service.config.models import ServiceConfig
from autoscaler.service.wiring import Overrides, build_service
from tests.builders import pending
from tests.service.service_fakes import Clock, FakeExecutor, FakePrices, FakeSignals, write_policy

TOKEN = "status-token-1234"


@pytest.fixture
def running(tmp_path, monkeypatch):
    monkeypatch.setenv("GAS_STATUS_TOKEN", TOKEN)
    write_policy(tmp_path / "policies", "vision", name="train", max_nodes=4)
    (tmp_path / "policies" / "broken.yaml").write_text("team: vision2\npools: 3\n")
    config = ServiceConfig.model_validate({
        "policies_dir": tmp_path / "policies", "store": {"url": f"sqlite:///{tmp_path / 'f.db'}"},
        "http": {"listen": "127.0.0.1:0", "token_env": "GAS_STATUS_TOKEN"}})
    clock, store = Clock(), FleetStore(config.store.url)
    signals = FakeSignals(pools={"vision/train": PoolObservation(pending=pending(1, 1))})
    svc = build_service(config, clock=clock, overrides=Overrides(
        signals=signals, prices=FakePrices(scores=[SpotScore(
            cloud="aws", region="us-east-1", zone="us-east-1a", score=2,
            instance_types=["g5.xlarge", "g5.2xlarge", "g5.4xlarge"])]),
        store=store, executor=FakeExecutor(store, clock)))
    svc.start_api()
    svc.tick()
    yield svc
    svc.close()
    store.close()


def test_status_view_shows_pools_nodes_actions_and_problems(running):
    console = Console(record=True, width=160)
    console.print(status_view(running.status()))
    text = console.export_text()
    assert "vision/train" in text and "vision-train-1" in text and "vision-train-2" in text
    assert "launch" in text and "pending" in text
    assert "policy error" in text and "broken.yaml" in text
    assert "leader" in text
    assert "Spot placement scores" in text and "2/10 low: tried last" in text
    assert "g5.2xlarge, g5.4xlarge, g5.xlarge" in text  # sorted, as /status gives them


def test_status_command_uses_the_token_from_the_environment(running):
    runner = CliRunner()
    url = running.api.url
    result = runner.invoke(app, ["status", "--url", url, "--token-env", "GAS_STATUS_TOKEN"])
    assert result.exit_code == 0, result.output
    assert "vision-train-1" in result.output and TOKEN not in result.output
    result = runner.invoke(app, ["status", "--url", url, "--token-env", "GAS_STATUS_TOKEN", "--json"])
    assert json.loads(result.stdout)["fleet"]["pools"]["vision/train"]["nodes"] == 2
    result = runner.invoke(app, ["status", "--url", url])
    assert result.exit_code == 1 and "bearer token" in result.output


@pytest.mark.slow  # the service in a process of its own
def test_run_dry_run_ticks_serves_and_stops_on_sigterm(tmp_path):
    """The real command in a subprocess: ticks, /healthz, SIGTERM -> clean exit; a restart
    resumes from the same store."""
    write_policy(tmp_path / "policies", "vision", name="train", max_nodes=4, min_nodes=1)
    port = free_port()
    config = tmp_path / "service.yaml"
    config.write_text(f"policies_dir: policies\ntick: {{interval: 1s}}\n"
                      f"store: {{url: 'sqlite:///{tmp_path / 'fleet.db'}'}}\n"
                      f"http: {{listen: '127.0.0.1:{port}'}}\n")
    argv = [sys.executable, "-m", "autoscaler.cli", "run", "--config", str(config), "--dry-run"]
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    for attempt in (1, 2):
        proc = ManagedProcess(f"service-{attempt}", argv, tmp_path / f"run-{attempt}.log", env=env)
        try:
            wait_until(lambda n=2 * attempt: _plans(tmp_path) >= n, 60, "dry-run plans", proc=proc)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
                assert resp.status == 200
            os.kill(proc.pid, signal.SIGTERM)
            proc.proc.wait(timeout=30)
            assert proc.returncode() == 0, proc.log_tail()
        finally:
            proc.stop()
        log = (tmp_path / f"run-{attempt}.log").read_text()
        assert "received SIGTERM" in log and "stopped" in log
        assert "dry-run plan" in log and "min_nodes is 1" in log
    store = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}")
    try:
        assert store.nodes() == [], "a dry run changes nothing"
    finally:
        store.close()


def _plans(tmp_path: Path) -> int:
    """Plans recorded so far, read without creating tables (the service is creating them)."""
    if not (tmp_path / "fleet.db").exists():
        return 0
    with contextlib.closing(sqlite3.connect(f"file:{tmp_path / 'fleet.db'}?mode=ro", uri=True)) as db:
        try:
            return int(db.execute("select coalesce(max(id), 0) from plans").fetchone()[0])
        except sqlite3.OperationalError:
            return 0


def test_plan_answers_the_engine_s_plan_not_a_capacity_request_s(running):
    from autoscaler.model.plan import Drain, Plan

    engine = running.plan()
    keeper = Plan(decided_at=running.loop.clock(), actions=[Drain(
        pool="vision/train", node="vision-train-1", trigger="ttl", reason="vision/ci-1: ttl ended")])
    running.store.record_plan(keeper)
    assert engine is not None and running.plan()["id"] == engine["id"]
    assert running.status()["last_plan"]["id"] == engine["id"]


@pytest.mark.parametrize(("text", "shown"), [
    ("GET https://ops:hunter2@state.example/x failed", "GET https://ops:***@state.example/x failed"),
    ("Authorization: Bearer abcdefghijkl1234 refused", "Authorization: Bearer *** refused"),
    ("conn password=hunter2&sslmode=require", "conn password=***&sslmode=require"),
    ('{"SecurityToken": "hunter2"}', '{"SecurityToken": "***"}'),
    ("vision-train-3: drain step failed: TimeoutError: 30s",
     "vision-train-3: drain step failed: TimeoutError: 30s"),
])
def test_errors_from_outside_are_shown_with_secret_shaped_parts_masked(text, shown):
    from autoscaler.service.http.status import TEXT_LIMIT, public_text

    assert public_text(text) == shown
    assert len(public_text("x" * 1000)) == TEXT_LIMIT


def test_masking_an_error_takes_linear_time_whatever_the_text():
    import time

    from autoscaler.service.http.status import public_text

    started = time.monotonic()
    for hostile in ("password" * 2500, "://a:" * 4000, "bearer " * 3000, "a" * 20_000):
        public_text(hostile, None)
    assert time.monotonic() - started < 2  # a backtracking pattern took minutes here

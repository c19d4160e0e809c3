"""The HTTP API: /healthz, /metrics, /status and /plan behind a bearer token, no secrets."""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request

import pytest

from autoscaler.fleet.store import FleetStore
from autoscaler.model.snapshot import PoolObservation
from autoscaler.service.app import Service
from autoscaler.service.config.models import ServiceConfig
from autoscaler.service.http.api import ApiError, ApiHandlers, ApiServer, Health
from autoscaler.service.wiring import Overrides, build_service
from tests.builders import pending
from tests.service.service_fakes import Clock, FakeExecutor, FakePrices, FakeSignals, write_policy

TOKEN = "tok-3f9a1c0d5e7b"
SECRETS = ["AKIAEXAMPLESECRET0001", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "db-pass-77"]


def get(url: str, token: str | None = None) -> tuple[int, str, str]:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


@pytest.fixture
def service(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", SECRETS[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRETS[1])
    monkeypatch.setenv("GAS_TEST_TOKEN", TOKEN)
    write_policy(tmp_path / "policies", "vision", name="train", max_nodes=4)
    config = ServiceConfig.model_validate({
        "policies_dir": tmp_path / "policies", "tick": {"interval": "2s"},
        "store": {"url": f"sqlite:///{tmp_path / 'fleet.db'}"},
        "http": {"listen": "127.0.0.1:0", "token_env": "GAS_TEST_TOKEN"},
        "ansible": {"secret_env": {"cluster_join_munge_key_b64": "GAS_MUNGE"}},
    })
    clock = Clock()
    signals = FakeSignals(pools={"vision/train": PoolObservation(pending=pending(1))})
    store = FleetStore(config.store.url)
    svc = build_service(config, clock=clock, overrides=Overrides(
        signals=signals, prices=FakePrices(), store=store, executor=FakeExecutor(store, clock)))
    svc.start_api()
    yield svc
    svc.close()
    store.close()


def test_health_metrics_status_and_plan(service: Service, caplog):
    url = service.api.url
    code, _, body = get(f"{url}/healthz")
    assert code == 200 and json.loads(body)["reason"].startswith("starting")
    with caplog.at_level(logging.DEBUG):
        service.tick()
    code, ctype, text = get(f"{url}/metrics")
    assert code == 200 and ctype.startswith("text/plain")
    assert "gpu_autoscaler_ticks_total 1.0" in text and "gpu_autoscaler_nodes{" in text
    code, _, body = get(f"{url}/status", TOKEN)
    status = json.loads(body)
    assert code == 200
    assert [n["state"] for n in status["fleet"]["nodes"]] == ["READY"]
    assert status["fleet"]["hourly_usd"] > 0
    launch = [a for a in status["last_plan"]["plan"]["actions"] if a["kind"] == "launch"]
    assert launch and "pending" in launch[0]["reason"]
    assert status["leader"]["is_leader"] and status["loop"]["ticks"] == 1
    assert [t["to"] for t in status["transitions"]][:2] == ["REQUESTED", "PROVISIONING"]
    code, _, plan = get(f"{url}/plan", TOKEN)
    assert code == 200 and json.loads(plan)["id"] == status["last_plan"]["id"]
    everything = body + plan + text + caplog.text
    for secret in [*SECRETS, TOKEN]:
        assert secret not in everything


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_status_and_plan_need_the_bearer_token(service, token):
    for path in ("/status", "/plan"):
        code, _, body = get(f"{service.api.url}{path}", token)
        assert code == 401 and TOKEN not in body
    assert get(f"{service.api.url}/nope")[0] == 404


def test_healthz_fails_when_the_loop_stops_ticking(service, monkeypatch):
    service.tick()
    assert service.health().ok
    last = service.loop.state.last_tick_monotonic
    # Undone before the fixture stops the server: its event loop needs a running clock.
    with monkeypatch.context() as frozen:
        frozen.setattr(time, "monotonic", lambda: last + 7)  # > 3 x 2s
        health = service.health()
        assert not health.ok and "more than 3 x" in health.reason
        code, _, body = get(f"{service.api.url}/healthz")
        assert code == 503 and "more than 3 x" in json.loads(body)["reason"]


def test_a_running_tick_counts_as_alive(service, monkeypatch):
    service.tick()
    last = service.loop.state.last_tick_monotonic
    service._tick_started = last + 1
    with monkeypatch.context() as frozen:
        frozen.setattr(time, "monotonic", lambda: last + 60)
        assert service.health().ok and "in progress" in service.health().reason


def test_no_token_is_only_allowed_on_loopback():
    handlers = ApiHandlers(health=lambda: Health(True, "ok"), metrics=lambda: b"",
                           status=dict, plan=lambda: None)
    with pytest.raises(ApiError, match="without a token"):
        ApiServer(handlers, "0.0.0.0", 0, None)
    server = ApiServer(handlers, "127.0.0.1", 0, None).start()
    try:
        assert get(f"{server.url}/status")[0] == 200
    finally:
        server.stop()

"""Bad policy files reloaded into a RUNNING service (real scheduler loop, real HTTP server):
the other team keeps being decided and /healthz says why; ticks that keep failing turn
/healthz to 503 with the reason, and back when they recover."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from autoscaler.fleet.store import FleetStore
from autoscaler.model.snapshot import PoolObservation
from autoscaler.model.snapshot_parts import Observed
from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.service.app import Service
from autoscaler.service.config.models import ServiceConfig
from autoscaler.service.wiring import Overrides, build_service
from tests.builders import pending
from tests.service.http.test_api import get
from tests.service.service_fakes import FakeExecutor, FakePrices, FakeSignals, write_policy

TOKEN = "tok-running-service-0001"


@dataclass
class BreakableSignals(FakeSignals):
    broken: str | None = None  # every read raises while set

    def read(self, *args: Any, **kw: Any) -> Observed:
        if self.broken is not None:
            raise ConnectionError(self.broken)
        return super().read(*args, **kw)


@pytest.fixture
def running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Service, BreakableSignals]]:
    monkeypatch.setenv("GAS_TEST_TOKEN", TOKEN)
    policies = tmp_path / "policies"
    for team in ("vision", "search"):
        write_policy(policies, team, name="gpu", max_nodes=50)
    config = ServiceConfig.model_validate({
        "policies_dir": policies, "tick": {"interval": "1s"},
        "store": {"url": f"sqlite:///{tmp_path / 'fleet.db'}"},
        "http": {"listen": "127.0.0.1:0", "token_env": "GAS_TEST_TOKEN"},
    })
    signals = BreakableSignals(pools={f"{t}/gpu": PoolObservation(pending=pending(1))
                                      for t in ("vision", "search")})
    store = FleetStore(config.store.url)
    svc = build_service(config, overrides=Overrides(
        signals=signals, prices=FakePrices(), store=store, executor=FakeExecutor(store, utc)))
    stop = threading.Event()
    thread = threading.Thread(target=svc.run, args=(stop,), name="service", daemon=True)
    thread.start()
    try:
        wait_until(lambda: svc.api is not None, 10, "the HTTP API")
        yield svc, signals
    finally:
        stop.set()
        thread.join(30)
        store.close()
    assert not thread.is_alive()


def utc() -> Any:
    from autoscaler.model.clock import utc_now
    return utc_now()


def plan_after(svc: Service, seen: int) -> dict[str, Any]:
    """The first plan recorded after plan id ``seen`` (from the real /plan endpoint)."""
    out: dict[str, Any] = {}

    def fresh() -> bool:
        code, _, body = get(f"{svc.api.url}/plan", TOKEN)  # type: ignore[union-attr]
        out.update(json.loads(body) or {} if code == 200 else {})
        return bool(out) and out["id"] > seen

    wait_until(fresh, 20, f"a plan after {seen}")
    return out


def health(svc: Service) -> tuple[int, str]:
    code, _, body = get(f"{svc.api.url}/healthz")  # type: ignore[union-attr]
    return code, json.loads(body)["reason"]


BAD_FILES = {
    "unknown key": "apiVersion: gpu-autoscaler/v1\nteam: vision\nbogus: 1\npools: []\n",
    "YAML syntax": "team: vision\npools: [\n",
    "wrong type": "apiVersion: gpu-autoscaler/v1\nteam: vision\npools:\n"
                  "  - {name: gpu, cloud: aws, region: us-east-1, instance_types: [p3.2xlarge],"
                  " max_nodes: lots}\n",
    # Valid to the current loader, but the engine cannot evaluate them: the pool is held.
    "cron that never fires": "schedule: [{cron: '0 0 31 2 *', min_nodes: 1, duration: 1h}]",
    "overflowing duration": "schedule: [{cron: '0 8 * * *', min_nodes: 1, duration: 3000000d}]",
}


def test_bad_files_reloaded_into_a_running_service(running: tuple[Service, BreakableSignals],
                                                   tmp_path: Path) -> None:
    svc, _ = running
    path = tmp_path / "policies" / "vision.yaml"
    good = path.read_text()
    last = plan_after(svc, 0)["id"]
    for what, text in BAD_FILES.items():
        if text.startswith("schedule:"):
            text = good.replace("  name: gpu\n", f"  name: gpu\n  {text}\n")
            assert text != good, what
        path.write_text(text)
        plan = plan_after(svc, plan_after(svc, last)["id"])  # one full tick after the write
        last = plan["id"]
        pools = plan["plan"]["pools"]
        assert pools["search/gpu"]["error"] is None, what  # the other team is decided
        launched = [a for a in plan["plan"]["actions"] if a["kind"] == "launch"]
        assert {a["pool"] for a in launched} >= {"search/gpu"}, what
        held = [a for a in plan["plan"]["actions"]
                if a["pool"] == "vision/gpu" and a["kind"] == "hold" and a["what"] == "all"]
        rejected = svc.loop.reloader.errors()
        assert held or rejected, what  # kept on its last good policy, or held with the error
        code, reason = health(svc)
        assert code == 200, (what, reason)
        assert ("policy problem" in reason and "vision.yaml" in reason) or \
            ("vision/gpu" in reason and "raised" in reason), (what, reason)
        path.write_text(good)


def test_healthz_fails_while_ticks_fail_and_says_why(
        running: tuple[Service, BreakableSignals]) -> None:
    svc, signals = running
    plan_after(svc, 0)
    assert health(svc)[0] == 200
    signals.broken = "prometheus.example:9090 refused the connection"
    wait_until(lambda: health(svc)[0] == 503, 20, "/healthz to fail")
    _, reason = health(svc)
    assert "ticks failed" in reason and "signals" in reason and "refused the connection" in reason
    signals.broken = None
    wait_until(lambda: health(svc)[0] == 200, 20, "/healthz to recover")

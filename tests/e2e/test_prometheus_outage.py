"""The service survives Prometheus going away: no scale-down while it is gone, the
data-missing metric and /status say so, and scaling resumes when it is back.

Real Prometheus, the real synthetic DCGM exporter (one target per node via file_sd), the
real signal reader, loop, scheduler and HTTP API; the executor is the recording fake (this
test is about the signals, not about Terraform).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from autoscaler.fleet.store import FleetStore
from autoscaler.fleet.tables import PlanRow
from autoscaler.model.lifecycle import NodeState
from autoscaler.policy.models import Market
from autoscaler.sandbox.fakes.dcgm_exporter import DcgmExporterServer, SyntheticDcgm
from autoscaler.sandbox.fakes.dcgm_scenarios import Constant
from autoscaler.sandbox.hosts.procs import ProcessError, wait_until
from autoscaler.sandbox.services.prometheus import PrometheusServer, write_file_sd
from autoscaler.service.app import Service
from autoscaler.service.config.models import ServiceConfig
from autoscaler.service.wiring import Overrides, build_service
from tests.fleet.writes import create_node, transition
from tests.service.service_fakes import FakeExecutor, FakePrices, write_policy

pytestmark = pytest.mark.slow
POOL = "ops/gpu"
NODES = ["ops-gpu-1", "ops-gpu-2"]


def _prometheus_or_skip(workdir: Path, file_sd: Path) -> PrometheusServer:
    try:
        return PrometheusServer(workdir, file_sd=[file_sd])
    except ProcessError as exc:
        pytest.skip(str(exc))


@pytest.fixture
def world(tmp_path) -> Iterator[tuple[Service, PrometheusServer, SyntheticDcgm]]:
    file_sd = tmp_path / "file_sd" / "dcgm.json"
    dcgm = SyntheticDcgm(Constant(50.0))  # busy enough to keep, not enough to grow
    exporter = DcgmExporterServer(dcgm).start()
    for name in NODES:
        dcgm.add_node(name, gpus=1, model="V100")
    write_file_sd(file_sd, exporter.address, NODES)
    prom = _prometheus_or_skip(tmp_path / "prometheus", file_sd)
    write_policy(tmp_path / "policies", "ops", name="gpu", max_nodes=4,
                 instance_types=["p3.2xlarge"], cluster={"kind": "none"},
                 scale_up={"gpu_utilization_above": 80, "window": "5s"},
                 scale_down={"gpu_utilization_below": 10, "idle_for": "6s", "cooldown": "1s",
                             "max_draining_percent": 100})
    store = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}")
    long_ago = datetime.now(UTC) - timedelta(hours=1)
    for _ in NODES:
        node = create_node(store, cooldown="up", team="ops", market=Market.SPOT, now=long_ago,
                           reason="test fleet")
        for to in (NodeState.PROVISIONING, NodeState.BOOTSTRAPPING, NodeState.READY):
            transition(store, node.name, to, long_ago, "test fleet")
    config = ServiceConfig.model_validate({
        "policies_dir": tmp_path / "policies", "tick": {"interval": "1s"},
        "store": {"url": f"sqlite:///{tmp_path / 'fleet.db'}"},
        "signals": {"prometheus": {"url": prom.url, "timeout": "1s"}},
        "http": {"listen": "127.0.0.1:0"}})
    executor = FakeExecutor(store, lambda: datetime.now(UTC))
    service = build_service(config, overrides=Overrides(store=store, executor=executor,
                                                        prices=FakePrices()))
    stop = threading.Event()
    prom.start()
    runner = threading.Thread(target=service.run, args=(stop,), daemon=True)
    try:
        prom.wait_for_series('DCGM_FI_DEV_GPU_UTIL{Hostname="ops-gpu-2"}', timeout=60)
        runner.start()
        wait_until(lambda: service.api is not None, 10, "the API")
        yield service, prom, dcgm
    finally:
        stop.set()
        runner.join(timeout=60)
        prom.stop()
        exporter.stop()
        store.close()


def get(service: Service, path: str) -> str:
    with urllib.request.urlopen(f"{service.api.url}{path}", timeout=5) as resp:
        return resp.read().decode()


def plans_since(store: FleetStore, after: int) -> list[dict]:
    with store.session() as s:
        rows = s.scalars(select(PlanRow).where(PlanRow.id > after).order_by(PlanRow.id))
        return [r.body for r in rows]


def last_plan_id(service: Service) -> int:
    last = service.store.last_plan()
    return last[0] if last else 0


def test_scale_down_freezes_while_prometheus_is_gone_and_resumes_after(world):
    service, prom, dcgm = world
    wait_until(lambda: service.loop.state.ticks >= 3, 30, "ticks with Prometheus up")
    assert 'gpu_autoscaler_data_missing{pool="ops/gpu"} 0.0' in get(service, "/metrics")

    prom.stop()
    dcgm.scenario = Constant(0.0)  # the nodes go idle exactly while nobody can see it
    first = last_plan_id(service)
    outage = time.monotonic()
    wait_until(lambda: len(plans_since(service.store, first)) >= 6, 60, "ticks during the outage")
    during = plans_since(service.store, first)
    assert not [a for p in during for a in p["actions"] if a["kind"] == "drain"]
    assert all(p["pools"][POOL]["data_missing"] for p in during)
    metrics = get(service, "/metrics")
    assert 'gpu_autoscaler_data_missing{pool="ops/gpu"} 1.0' in metrics
    # every stage is exported from 0; a missing source is not a failed tick
    assert 'gpu_autoscaler_tick_errors_total{stage="signals"} 0.0' in metrics
    status = json.loads(get(service, "/status"))
    assert POOL in status["data_missing"] and "prometheus" in status["sources_missing"]
    with urllib.request.urlopen(f"{service.api.url}/healthz", timeout=5) as resp:
        assert resp.status == 200, "the service stays alive without Prometheus"
    assert {n.state for n in service.store.nodes()} == {NodeState.READY}
    assert time.monotonic() - outage < 60

    prom.start()
    back = last_plan_id(service)
    wait_until(lambda: any(a["kind"] == "drain" for p in plans_since(service.store, back)
                           for a in p["actions"]), 90, "idle nodes drained once data is back")
    # The tick records its plan first and updates the gauges right after.
    wait_until(lambda: 'gpu_autoscaler_data_missing{pool="ops/gpu"} 0.0' in get(service, "/metrics"),
               10, "the data-missing gauge back to 0")

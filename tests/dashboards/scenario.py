"""A demo-like run that the dashboards, alerts and status page are checked against.

Real: the service (``build_service``: loop, store, policy reloader, HTTP API with a token),
the signal reader's Prometheus path, Prometheus itself (scraping the service's /metrics
and the synthetic dcgm-exporter, evaluating the alert rules), the executor and the
reconciler with its interruption intake. Fakes, from tests/fakes.py: Terraform and the
cloud, Ansible, Slurm (the drainer's scheduler and the pending-demand source), so nothing
leaves loopback and a phase takes seconds.

Phases: scale-up (pending jobs, a spot pool's floor), trouble (thermal throttling, XID 79
and 48, double-bit ECC: the engine drains and replaces), spot interruptions with no spot
capacity left (launch backoff, on-demand fallback, replacements that never bootstrap and
that the store refuses to fail),
blind (Slurm unreadable, failing ticks), stopped (no tick: the loop looks dead).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from autoscaler.actuators.drain import no_drainer
from autoscaler.catalog import default_catalog
from autoscaler.clouds.base import Interruption, InterruptionKind
from autoscaler.dashboards.alerts import Thresholds, rules
from autoscaler.fleet.store import FleetStore, StoreError
from autoscaler.model.changes import Move, NodeChange
from autoscaler.model.lifecycle import NodeState, state_limit
from autoscaler.model.node import Node
from autoscaler.model.snapshot import PendingJob, SchedulerNode
from autoscaler.policy.models import Market, find_pool
from autoscaler.sandbox.fakes.dcgm_exporter import THERMAL_THROTTLE, DcgmExporterServer, SyntheticDcgm
from autoscaler.sandbox.fakes.dcgm_scenarios import Constant
from autoscaler.sandbox.hosts.procs import free_port, wait_until
from autoscaler.sandbox.services.prometheus import PrometheusServer, write_file_sd
from autoscaler.service.app import Service
from autoscaler.service.config.models import ServiceConfig
from autoscaler.service.control.interruptions import InterruptionIntake, PollingSource
from autoscaler.service.control.reconciler import Reconciler
from autoscaler.service.executor import Executor
from autoscaler.service.wiring import Overrides, build_service
from autoscaler.signals.reader import SignalReader
from autoscaler.signals.readings import ClusterPool, SchedulerReading
from tests.fakes import FakeAnsible, FakeCloud, FakeDrainer, FakeTerraform
from tests.service.service_fakes import FakePrices

S = NodeState
TOKEN = "scenario-token-0123456789"
TOKEN_ENV = "GPU_AUTOSCALER_SCENARIO_TOKEN"
# Thresholds short enough to fire within the scenario; expressions are the committed ones.
FAST = Thresholds(thermal_for="2s", data_missing_for="2s", quota_for="2s", stuck_for="2s",
                  backoff_for="2s", tick_stale_s=6, ecc_window="5m", tick_window="5m",
                  interruption_window="5m")

VISION = """\
apiVersion: gpu-autoscaler/v1
team: vision
priority: high
quota: {max_gpus: 2}
pools:
  - name: train
    cloud: aws
    region: us-east-1
    instance_types: [p3.2xlarge]
    capacity: {on_demand_base: 2, spot_percent: 0}
    max_nodes: 4
    scale_up: {cooldown: 1s, window: 30s}
    scale_down: {cooldown: 1s, idle_for: 1h, drain_timeout: 1m, checkpoint_grace: 5s}
    health: {replace_on_xid: true}
    bootstrap: {timeout: 20s}
    cluster: {kind: slurm, partition: gpu}
"""
SEARCH = """\
apiVersion: gpu-autoscaler/v1
team: search
priority: low
quota: {max_hourly_usd: 40}
pools:
  - name: infer
    cloud: aws
    region: us-east-1
    instance_types: [p3.2xlarge]
    capacity: {on_demand_base: 0, spot_percent: 100, spot_fallback: on-demand}
    min_nodes: 3
    max_nodes: 6
    scale_up: {cooldown: 1s, window: 30s}
    scale_down: {cooldown: 1s, idle_for: 1h}
    bootstrap: {timeout: 3s}
    cluster: {kind: none}
"""
BROKEN = "apiVersion: gpu-autoscaler/v1\nteam: ml-ops\nbogus_key: 1\npools: []\n"


@dataclass
class FakeSlurm:
    """The pending-demand side of Slurm (a SchedulerSource): what squeue would say."""

    drainer: FakeDrainer
    pending: dict[str, list[PendingJob]] = field(default_factory=dict)
    error: str | None = None

    def read(self, refs: list[ClusterPool]) -> SchedulerReading:
        if self.error is not None:
            return SchedulerReading(error=self.error)
        nodes = {n: SchedulerNode(state="allocated", gpus_total=1, gpus_allocated=1)
                 for n in self.drainer.scheduler.joined}
        return SchedulerReading(nodes=nodes, pending={r.key: list(self.pending.get(r.key, []))
                                                      for r in refs}, source="fake squeue")


class FlakySignals:
    """The real reader; ``fail`` > 0 makes that many reads raise (a tick error)."""

    def __init__(self, reader: SignalReader):
        self.reader, self.fail = reader, 0

    def read(self, *args: Any, **kw: Any) -> Any:
        if self.fail > 0:
            self.fail -= 1
            raise ConnectionError("prometheus: connection reset (scenario)")
        return self.reader.read(*args, **kw)


class ClockedTerraform(FakeTerraform):
    """Capacity errors stamped with the wall clock (the fake stamps a fixed date)."""

    def apply(self, ref: Any, nodes: Any, *, destroy: Any = ()) -> Any:
        result = super().apply(ref, nodes, destroy=destroy)
        now = datetime.now(UTC)
        result.capacity_errors[:] = [e.model_copy(update={"at": now}) for e in result.capacity_errors]
        return result


class WedgedStore(FleetStore):
    """The store, refusing to fail the nodes ``wedged`` names: the reconciler's action on
    their bootstrap timeout keeps failing, the case NodeStuckInState is for."""

    def __init__(self, url: str, wedged: Callable[[str], bool]):
        super().__init__(url)
        self.wedged = wedged

    def apply(self, changes: Sequence[NodeChange], now: datetime) -> list[Node]:
        for change in changes:
            if isinstance(change, Move) and change.to is S.BOOTSTRAP_FAILED \
                    and self.wedged(change.node):
                raise StoreError(f"{change.node} -> {change.to}: write refused (scenario)")
        return super().apply(changes, now)


def jobs(count: int) -> list[PendingJob]:
    return [PendingJob(id=f"job-{i}", gpus=1) for i in range(count)]


class Scenario:
    def __init__(self, workdir: Path, on_phase: Callable[[str, Scenario], None] | None = None):
        self.workdir = workdir
        self.on_phase = on_phase or (lambda name, s: None)
        self.phases: list[tuple[str, float]] = []
        self.unreachable: set[str] = set()
        self.unreachable_from: datetime | None = None  # nodes created later never answer
        self.dcgm = SyntheticDcgm(Constant(20))
        self.exporter = DcgmExporterServer(self.dcgm)
        self.cloud = FakeCloud()
        self.tf = ClockedTerraform(self.cloud)
        self.drainer = FakeDrainer("slurm")
        self.slurm = FakeSlurm(self.drainer)
        self.prom = PrometheusServer(workdir / "prometheus", port=free_port(),
                                     file_sd=[workdir / "sd/dcgm.json", workdir / "sd/service.json"],
                                     rules=rules(FAST))
        self.service = self._service()

    # -- wiring --------------------------------------------------------------------------
    def _service(self) -> Service:
        policies = self.workdir / "policies"
        policies.mkdir(parents=True)
        for name, text in (("vision", VISION), ("search", SEARCH), ("ml-ops", BROKEN)):
            (policies / f"{name}.yaml").write_text(text)
        config = ServiceConfig.model_validate({
            "policies_dir": str(policies), "tick": {"interval": "1s"},
            "store": {"url": f"sqlite:///{self.workdir / 'fleet.db'}"},
            "signals": {"prometheus": {"url": self.prom.url, "stale_after": "30s"},
                        "scheduler": ["slurm"]},
            "http": {"listen": f"127.0.0.1:{free_port()}", "token_env": TOKEN_ENV,
                     "grafana_url": "http://grafana.example.invalid:3000"},
            # A short ready wait keeps a stuck bootstrap's limit (retries, backoffs and this
            # wait) within the scenario's minutes; long enough for a node's first scrape.
            "executor": {"bootstrap_retry_backoff": "1s", "ready_wait_timeout": "30s"},
            # Few nodes: "too many broken" must let the trouble phase's 3 of 5 through and
            # hold the observer phase's all of them.
            "engine": {"ok_unready_count": 1, "max_unready_percent": 70},
        })
        catalog = default_catalog()
        store = WedgedStore(config.store.resolved_url(), lambda name: name in self.unreachable)
        self.store = store
        settings = config.executor
        executor = Executor(store, lambda: self.policies(), self.tf, FakeAnsible(),
                            {"slurm": self.drainer, "none": no_drainer()}, self.address_of,
                            settings, catalog, _utc_now)
        intake = InterruptionIntake(store, [PollingSource(self.cloud)], settings, _utc_now,
                                    lambda: self.policies())
        reconciler = Reconciler(store, self.tf, lambda cloud, region: self.cloud, settings, _utc_now,
                                policies=lambda: self.policies(), interruptions=intake,
                                repair=executor.repair)
        self.signals = FlakySignals(SignalReader(config.signals, catalog, slurm=self.slurm))
        return build_service(config, overrides=Overrides(
            executor=executor, reconciler=reconciler, signals=self.signals, prices=FakePrices(),
            store=store))

    def policies(self) -> dict[str, Any]:
        return self.service.loop.reloader.policies

    def address_of(self, node: Node) -> str | None:
        if self.unreachable_from is not None and node.created_at >= self.unreachable_from:
            self.unreachable.add(node.name)
        if node.name in self.unreachable or not node.instance_id:
            return None
        return "169.254.77.2"  # never connected to: Ansible is the fake

    # -- running -------------------------------------------------------------------------
    def start(self) -> Scenario:
        import os

        os.environ[TOKEN_ENV] = TOKEN
        self.exporter.start()
        write_file_sd(self.workdir / "sd/dcgm.json", self.exporter.address, [])
        self.prom.start()
        api = self.service.start_api()
        assert api is not None
        host, port = api.address
        (self.workdir / "sd/service.json").write_text(json.dumps([{
            "targets": [f"{host}:{port}"], "labels": {"job": "gpu-autoscaler"}}]))
        return self

    def stop(self) -> None:
        import os

        self.service.close()
        self.prom.stop()
        self.exporter.stop()
        os.environ.pop(TOKEN_ENV, None)

    @property
    def url(self) -> str:
        api = self.service.api
        assert api is not None
        return api.url

    def tick(self, count: int = 1, pause: float = 0.5) -> None:
        for _ in range(count):
            self.service.tick()
            self._sync_world()
            time.sleep(pause)

    def _sync_world(self) -> None:
        """What the cloud, Slurm and dcgm-exporter do on their own: nodes with an instance
        report GPU metrics and join Slurm; gone nodes stop reporting."""
        live = {n.name: n for n in self.store.nodes() if n.instance_id and n.state not in
                (S.TERMINATED, S.LOST)}
        for name in set(self.dcgm.nodes()) - set(live):
            self.dcgm.remove_node(name)
        for name, node in live.items():
            if name not in self.dcgm.nodes() and name not in self.unreachable:
                self.dcgm.add_node(name, gpus=1, model="V100")
                self.dcgm.set_util(60.0, name)  # busy, below the scale-up threshold
            if node.team == "vision" and name not in self.unreachable:
                self.drainer.scheduler.join(name)
        write_file_sd(self.workdir / "sd/dcgm.json", self.exporter.address, self.dcgm.nodes())

    def until(self, what: str, predicate: Callable[[], bool], timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                states = {n.name: n.state.value for n in self.store.nodes()}
                raise AssertionError(f"scenario: {what} not reached in {timeout}s; fleet {states}; "
                                     f"last error {self.service.loop.state.last_error}")
            self.tick()

    def nodes(self, team: str, states: Iterable[NodeState] = (S.READY,)) -> list[Node]:
        wanted = set(states)
        return [n for n in self.store.nodes() if n.team == team and n.state in wanted]

    def phase(self, name: str, began: float | None = None) -> None:
        """The phase ``name`` has begun (at ``began``, default now): its page is taken now."""
        self.phases.append((name, time.time() if began is None else began))
        self.on_phase(name, self)

    # -- the story -----------------------------------------------------------------------
    def run(self) -> None:
        self.started = time.time()
        self.slurm.pending = {"vision/train": jobs(3)}
        self.until("two vision and three search nodes READY",
                   lambda: len(self.nodes("vision")) == 2 and len(self.nodes("search")) == 3)
        self.prom.wait_for_series("DCGM_FI_DEV_GPU_UTIL", count=5, timeout=30)
        self.tick(4)  # quota reached with a job still pending: long enough for the alert
        self.phase("scale-up")
        self._trouble()
        self._observer()
        self._interruptions()
        self.slurm.error = "squeue: error: slurm_load_jobs: Socket timed out"
        self.signals.fail = 3
        self.tick(8)
        self.phase("blind")
        self.slurm.error = None
        time.sleep(FAST.tick_stale_s + 3)  # no tick: the loop looks dead
        self.phase("stopped")
        self.ended = time.time()

    def _trouble(self) -> None:
        v1, v2 = (n.name for n in self.nodes("vision")[:2])
        s1, s2 = (n.name for n in self.nodes("search")[:2])
        self.dcgm.inject_xid(v1, 0, 79)
        self.dcgm.inject_xid(v2, 0, 48)
        self.dcgm.set_throttle(THERMAL_THROTTLE, s1)
        self.dcgm.inject_ecc(s2, 0, single=2, double=1)
        # No tick until Prometheus has scraped them: the engine sees them together.
        self.prom.wait_for_series("DCGM_FI_DEV_XID_ERRORS > 0", count=2)
        self.prom.wait_for_series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0")
        # The page is taken as the three start draining, their reasons among the recent
        # transitions: a fixed number of ticks let a fast machine drain, terminate and
        # replace them first, their reasons pushed off the list (seen in a CI run).
        self.until("the XID and ECC nodes draining", lambda: sum(
            1 for t in self.store.transitions()
            if t.to_state == S.DRAINING.value and "unhealthy" in t.reason) >= 3)
        self.phase("trouble")  # the unhealthy nodes are being drained and replaced
        self.slurm.pending = {"vision/train": jobs(1)}
        self.until("a vision node drained and replaced",
                   lambda: any(t.to_state == S.DRAINED.value for t in self.store.transitions()))
        self.tick(3)

    def _interruptions(self) -> None:
        self.tf.no_capacity = {("p3.2xlarge", Market.SPOT)}
        spot = [n for n in self.nodes("search", (S.READY, S.BOOTSTRAPPING)) if n.market is Market.SPOT]
        now = datetime.now(UTC)
        self.unreachable_from = now
        self.cloud.notices = [Interruption(n.instance_id or "", InterruptionKind.INTERRUPTION,
                                           now - timedelta(seconds=3), now + timedelta(minutes=2),
                                           "scenario") for n in spot[:3]]
        self.tick()
        self.phase("interruptions")  # drained at once; no spot capacity for the replacements
        self.tick()
        # Replacements launch on-demand (no spot capacity) and never answer: stuck in
        # BOOTSTRAPPING, as the store refuses the reconciler's BOOTSTRAP_FAILED at its limit.
        self.until("three interruptions", lambda: sum(
            1 for t in self.store.transitions() if t.to_state == S.INTERRUPTED.value) >= 3)
        pool = find_pool(self.policies(), "search", "infer")
        limit = state_limit(S.BOOTSTRAPPING, pool, self.service.loop.state_limits)
        assert limit is not None
        past = limit * FAST.stuck_ratio + timedelta(seconds=4)

        def stuck() -> bool:
            now = datetime.now(UTC)
            return any(now - n.state_since > past and n.name in self.unreachable
                       for n in self.nodes("search", (S.BOOTSTRAPPING,)))

        self.until(f"a replacement stuck in BOOTSTRAPPING past {FAST.stuck_ratio} x its limit",
                   stuck)
        self.tick(5)


    def _observer(self) -> None:
        """Every reporting GPU falls off the bus at once: more likely the observer is wrong
        than the whole fleet broken, so the engine holds the replacements (the nodes stay
        for the interruptions that follow)."""
        reporting = self.dcgm.nodes()
        for name in reporting:
            self.dcgm.inject_xid(name, 0, 79)
        # No tick until Prometheus has every one: the engine sees them all at once, as it
        # would a broken exporter, rather than one scrape at a time.
        self.prom.wait_for_series("DCGM_FI_DEV_XID_ERRORS == 79", count=len(reporting))
        # The phase begins before the tick that holds the replacements: Prometheus may scrape
        # the held gauge and fire BrokenNodesHeld within the tick's pause (seen in a CI run).
        began = time.time()
        self.tick()
        self.phase("observer", began)

        def held() -> bool:
            text = self.service.metrics.exposition().decode()
            return any(line.startswith("gpu_autoscaler_unhealthy_budget_held{")
                       and not line.endswith(" 0.0") for line in text.splitlines())

        self.until("broken nodes held by the unhealthy budget", held)
        self.tick(4)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def substitute(expr: str, values: Mapping[str, str] | None = None) -> str:
    """A panel's PromQL as Grafana sends it with every variable at "All"."""
    values = values or {"$__rate_interval": "15s", "$window": "5m", "$team": ".*", "$pool": ".*",
                        "$node": ".*"}
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace(name, values[name])
    return expr


def wait_scraped(prom: PrometheusServer, metric: str, timeout: float = 30) -> None:
    wait_until(lambda: bool(prom.query(metric)), timeout, f"{metric} scraped", proc=prom.proc)

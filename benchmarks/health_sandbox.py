"""bench_health.py's sandbox half: the same failures on real Prometheus and real Slurm, read
by the real readers and decided by decide() every TICK seconds of wall clock.

* ``silent``: one of six synthetic dcgm-exporter targets disappears from a real Prometheus
  (scrape every 1 s, stale after 3 s); ``silent_grace`` 10 s;
* ``outage (silent)``: then every target: nothing else may be replaced (the first node,
  silent past its grace while the others still reported, may be);
* ``unusable``: one slurmd of four stops on a real slurmctld (SlurmdTimeout 12 s: DOWN
  "Not responding" about 30 s later); ``unready_grace`` 10 s, counted from Slurm's reason
  time, so the seconds include Slurm's own detection;
* ``outage (unusable)``: then every slurmd stops: the fleet-wide unhealthy budget must hold
  (again, the first node may still be replaced until the others are past their grace).

Graces are seconds here (minutes in production): what is measured is that the pipeline
adds no more than two ticks to the grace and the observer's own delay, and replaces
nothing in an outage.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from autoscaler.catalog import default_catalog
from autoscaler.engine import decide
from autoscaler.model.node import FleetView, Node
from autoscaler.model.plan import Hold, Replace
from autoscaler.model.snapshot import NodeObservation, Snapshot
from autoscaler.policy.models import TeamPolicy
from autoscaler.sandbox.fakes.dcgm_exporter import Constant, DcgmExporterServer, SyntheticDcgm
from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.sandbox.services.prometheus import PrometheusServer, write_file_sd
from autoscaler.sandbox.services.slurm import SlurmCluster, SlurmNodeSpec
from autoscaler.schedulers.slurm.client import SlurmConfig
from autoscaler.signals.config import PrometheusConfig
from autoscaler.signals.prometheus import PrometheusReader
from autoscaler.signals.readings import pools_in_priority_order
from autoscaler.signals.slurm import SlurmReader
from tests.builders import make_node, make_policy

TICK = 2.0  # seconds of wall clock between decisions
GRACE = "10s"


@dataclass
class Outcome:
    name: str
    seconds: float | None  # failure -> Replace of the broken node (None: never)
    seen: float | None  # failure -> the observer first saying so (stale, DOWN)
    false: int  # replacements of nodes that were not broken
    holds: int  # Holds that said why broken nodes were kept

    @property
    def after_seen(self) -> float | None:
        """What the autoscaler adds to the observer: must stay within grace + 2 ticks."""
        if self.seconds is None or self.seen is None:
            return None
        return self.seconds - self.seen


def _policy(cluster: dict[str, str] | None = None) -> TeamPolicy:
    pool = {"name": "gpu", "cloud": "aws", "region": "us-east-1", "instance_types": ["p3.8xlarge"],
            "max_nodes": 20, "capacity": {"on_demand_base": 0, "spot_percent": 0},
            "health": {"silent_grace": GRACE, "unready_grace": GRACE},
            "scale_down": {"idle_for": "1h"}}
    if cluster is not None:
        pool["cluster"] = cluster
    return make_policy("vision", pools=[pool])


def _fleet(names: list[str]) -> FleetView:
    since = datetime.now(UTC) - timedelta(hours=1)
    nodes: list[Node] = [make_node(n, instance_type="p3.8xlarge", state_since=since) for n in names]
    return FleetView(nodes=nodes)


Evident = Callable[[NodeObservation | None], bool]


def _watch(name: str, broken: set[str], read: Callable[[datetime], dict[str, NodeObservation]],
           evident: Evident, policy: TeamPolicy, fleet: FleetView, t0: float, ticks: int,
           outage: bool = False, already: frozenset[str] = frozenset()) -> Outcome:
    """Decide every TICK until a broken node is replaced; in an ``outage`` watch all the
    ticks, and every replacement is a false one except of a node ``already`` broken
    before the outage (its own grace had passed while the others reported)."""
    false = holds = 0
    seen: float | None = None
    for _ in range(ticks):
        now = datetime.now(UTC)
        nodes = read(now)
        if seen is None and all(evident(nodes.get(n)) for n in broken):
            seen = time.monotonic() - t0
        plan = decide({"vision": policy}, fleet, Snapshot(taken_at=now, nodes=nodes), now,
                      catalog=default_catalog())
        replaced = {a.node for a in plan.actions if isinstance(a, Replace)}
        false += len(replaced - broken) + (len(replaced & broken - already) if outage else 0)
        holds += sum(1 for a in plan.actions if isinstance(a, Hold) and " kept (" in a.reason)
        if replaced & broken and not outage:
            return Outcome(name, time.monotonic() - t0, seen, false, holds)
        time.sleep(TICK)
    return Outcome(name, None, seen, false, holds)


def _stale(obs: NodeObservation | None) -> bool:
    return obs is not None and obs.metrics_silent


def _down(obs: NodeObservation | None) -> bool:
    return obs is not None and obs.scheduler is not None and obs.scheduler.unusable is not None \
        and obs.scheduler.unusable_since is not None


def prometheus_cases(work: Path) -> list[Outcome]:
    names = [f"vision-gpu-{i}" for i in range(1, 7)]
    policy, fleet = _policy(), _fleet(names)
    dcgm = SyntheticDcgm(Constant(60))
    sd = work / "targets.json"
    out = []
    with DcgmExporterServer(dcgm) as exporter:
        dcgm.on_nodes_changed = lambda nodes: write_file_sd(sd, exporter.address, nodes)
        for name in names:
            dcgm.add_node(name, gpus=4)
        with PrometheusServer(work / "prom", file_sd=[sd]) as prom:
            prom.wait_for_series("DCGM_FI_DEV_GPU_UTIL", count=4 * len(names), timeout=60)
            reader = PrometheusReader(PrometheusConfig(url=prom.url, stale_after="3s"))
            try:
                def read(now: datetime) -> dict[str, NodeObservation]:
                    reading = reader.read(dict.fromkeys(names, policy.pools[0]), policy.pools, now)
                    if reading.error is not None:
                        raise RuntimeError(reading.error)
                    return reading.nodes

                t0 = time.monotonic()
                dcgm.remove_node(names[1])
                out.append(_watch("silent", {names[1]}, read, _stale, policy, fleet, t0,
                                  ticks=60))
                t0 = time.monotonic()
                for name in names:
                    dcgm.remove_node(name)
                out.append(_watch("outage (silent)", set(names), read, _stale, policy, fleet,
                                  t0, ticks=15, outage=True, already=frozenset(names[1:2])))
            finally:
                reader.close()
    return out


def slurm_cases(work: Path) -> list[Outcome]:
    names = [f"vision-gpu-{i}" for i in range(1, 5)]
    policy = _policy({"kind": "slurm", "partition": "gpu"})
    fleet = _fleet(names)
    out = []
    with SlurmCluster(work / "slurm", [SlurmNodeSpec(n, gpus=4) for n in names],
                      slurmd_timeout=12) as cluster:
        reader = SlurmReader(SlurmConfig(env=cluster.env()))
        refs = pools_in_priority_order({"vision": policy}, default_catalog(), "slurm")

        def read(now: datetime) -> dict[str, NodeObservation]:
            reading = reader.read(refs)
            if reading.error is not None:
                raise RuntimeError(reading.error)
            return {n: NodeObservation(scheduler=s) for n, s in reading.nodes.items()}

        t0 = time.monotonic()
        cluster.stop_slurmd(names[1])
        out.append(_watch("unusable", {names[1]}, read, _down, policy, fleet, t0, ticks=60))
        t0 = time.monotonic()
        for name in names:
            cluster.stop_slurmd(name)
        wait_until(lambda: all(cluster.node_state(n).startswith("down") for n in names), 90,
                   "every node DOWN", interval=1)
        out.append(_watch("outage (unusable)", set(names), read, _down, policy, fleet, t0,
                          ticks=15, outage=True, already=frozenset(names[1:2])))
    return out


def run_all() -> list[Outcome]:
    with tempfile.TemporaryDirectory(prefix="bench-health-") as tmp:
        work = Path(tmp)
        return prometheus_cases(work) + slurm_cases(work)

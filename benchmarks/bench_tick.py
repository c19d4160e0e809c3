"""Where a tick's time goes while N nodes launch (issue 36 item 1: a tick <= 30 s while 200
nodes are launching), cheaply: no Terraform, no cloud, no Prometheus.

Real: the service as ``build_service`` wires it (loop, metrics, policies, the store with its
lease fence when ``--leader``), the real :class:`Executor` on its worker pools and the real
:class:`Reconciler`, on a throwaway PostgreSQL 15 (``tests/service/postgres.py``, stopped by
PID; ``--sqlite`` for a file). Fakes for what is outside: the test ``FakeTerraform`` over a
``FakeCloud`` (each apply waits until the scenario releases it, as a real one runs for
minutes while the ticks go on), ``FakeAnsible``, a fake Kubernetes drainer, and signals that
report one pending 4-GPU job per wanted node.

Ticks: one with nothing to do (warm-up), then the launch tick (every pool's jobs pending at
once: it records and submits N launches), ``--ticks`` more while the applies are held (the
N nodes PROVISIONING), then the applies are released and ``--ticks`` more run (the nodes
settle: BOOTSTRAPPING, bootstrap). Then the drain: "ready" ticks until every node is READY
(each joined the fake cluster and reported running its job), then the jobs are gone and
every node reports idle GPUs; once the nodes have been READY for the pools' ``idle_for``,
the drain tick records and submits a Drain of every node at once (``drain_*`` on the last
line: that tick, its submit stage, its statements, and how many nodes it and the drain
steps it started took past READY). Each tick prints its stages (``TickReport.stages``: wall
and the tick thread's CPU seconds) and its SQL statements (the tick thread's only, not the
workers').

    python benchmarks/bench_tick.py [--nodes 200] [--pools 4] [--sqlite] [--leader]

Last line: nodes=<n> launch_tick_s=<a> launch_tick_cpu_s=<b> launch_submit_s=<c>
launch_statements=<d> inflight_tick_s_max=<e> settle_tick_s_max=<f> drained=<g>
drain_tick_s=<h> drain_tick_cpu_s=<i> drain_submit_s=<j> drain_statements=<k>
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from sqlalchemy import event

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoscaler.actuators.drain import no_drainer
from autoscaler.catalog import default_catalog
from autoscaler.fleet.store import FleetStore
from autoscaler.model.clock import utc_now
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.snapshot import PoolObservation
from autoscaler.service.config.models import ServiceConfig
from autoscaler.service.control.loop import TickReport
from autoscaler.service.control.reconciler import Reconciler
from autoscaler.service.executor import Executor, ExecutorSettings
from autoscaler.service.executor.operations import WorkerPools
from autoscaler.service.wiring import Overrides, build_service
from tests.builders import busy, idle, pending
from tests.fakes import FakeAnsible, FakeCloud, FakeDrainer, FakeScheduler, FakeTerraform
from tests.service.service_fakes import FakePrices, FakeSignals

S = NodeState
TEAM, INSTANCE_TYPE, GPUS = "scale", "p3.8xlarge", 4
EXECUTOR = {"bootstrap_retry_backoff": "5s", "ready_wait_timeout": "3m",
            "state_check_interval": "30s", "advance_budget": "3m"}  # the scale scenario's


def write_policy(directory: Path, sizes: list[int]) -> None:
    """bench_scale's policy: one team, pools of ``sizes`` nodes, kubernetes, on-demand."""
    directory.mkdir(parents=True, exist_ok=True)
    pools = [{"name": f"p{i}", "cloud": "aws", "region": "us-east-1", "zones": ["us-east-1a"],
              "instance_types": [INSTANCE_TYPE],
              "capacity": {"on_demand_base": size, "spot_percent": 0},
              "min_nodes": 0, "max_nodes": size,
              "scale_up": {"gpu_utilization_above": 95, "window": "10s", "pending_jobs": True,
                           "cooldown": "1s", "max_step": size},
              "scale_down": {"gpu_utilization_below": 10, "idle_for": "10s", "cooldown": "1s",
                             "drain_timeout": "1m", "max_draining_percent": 100},
              "bootstrap": {"timeout": "5m"},
              "cluster": {"kind": "kubernetes", "labels": {"scale-pool": f"p{i}"}}}
             for i, size in enumerate(sizes, 1)]
    doc = {"apiVersion": "gpu-autoscaler/v1", "team": TEAM, "priority": "high",
           "quota": {"max_gpus": sum(sizes) * GPUS}, "pools": pools}
    YAML(typ="safe").dump(doc, directory / f"{TEAM}.yaml")


class Statements:
    """SQL statements run by one thread (the tick's), counted on the engine."""

    def __init__(self, store: FleetStore):
        self.thread = threading.get_ident()
        self.count = 0
        event.listen(store.engine, "before_cursor_execute", self._one)

    def _one(self, *_: Any) -> None:
        if threading.get_ident() == self.thread:
            self.count += 1


class HeldApplies:
    """FakeTerraform's applies wait until released (a real apply runs for minutes)."""

    def __init__(self, tf: FakeTerraform):
        self.go = threading.Event()
        tf.on_apply = lambda ref, nodes: self.go.wait(600)


@contextmanager
def store_url(sqlite: bool, work: Path) -> Iterator[tuple[str, str]]:
    if sqlite:
        yield f"sqlite:///{work / 'fleet.db'}", "SQLite (file)"
        return
    from tests.service.postgres import Postgres, available

    why = available()
    if why:
        raise SystemExit(f"PostgreSQL cannot run here ({why}); use --sqlite")
    server = Postgres().start()
    try:
        yield server.url, "PostgreSQL 15 (throwaway, 127.0.0.1)"
    finally:
        server.stop()  # by PID (ManagedProcess)


def build(url: str, work: Path, sizes: list[int], leader: bool) -> tuple[Any, ...]:
    write_policy(work / "policies", sizes)
    config = ServiceConfig.model_validate({
        "policies_dir": work / "policies", "store": {"url": url},
        "tick": {"interval": "30s"}, "executor": EXECUTOR,
        "leader": {"enabled": leader}, "http": {"enabled": False}})
    store = FleetStore(url)
    settings = ExecutorSettings.model_validate(EXECUTOR)
    cloud = FakeCloud()
    tf, ansible = FakeTerraform(cloud), FakeAnsible()
    held = HeldApplies(tf)
    runner = WorkerPools(utc_now, {"apply": settings.apply_parallelism,
                                   "bootstrap": settings.bootstrap_parallelism,
                                   "drain": settings.drain_parallelism})
    policies: dict[str, Any] = {}
    k8s = FakeDrainer("kubernetes")
    executor = Executor(store, lambda: policies["now"](), tf, ansible,
                        {"kubernetes": k8s, "none": no_drainer()},
                        lambda node: "127.0.0.1" if node.instance_id else None, settings,
                        default_catalog(), utc_now, runner=runner)
    reconciler = Reconciler(store, tf, lambda cloud_, region: cloud, settings, utc_now,
                            policies=lambda: policies["now"](), repair=executor.repair)
    signals = FakeSignals()
    service = build_service(config, overrides=Overrides(
        signals=signals, prices=FakePrices(), store=store, executor=executor,
        reconciler=reconciler))
    policies["now"] = service.loop.policies
    return service, store, signals, held, executor, k8s.scheduler


def line(name: str, report: TickReport, wall: float, statements: int) -> str:
    stages = " ".join(f"{k}={t.seconds:.3f}/{t.cpu_seconds:.3f}" for k, t in report.stages.items())
    return f"{name}: {wall:.3f}s, {statements} statements; stages (wall/cpu s): {stages}"


def run(args: argparse.Namespace) -> None:
    sizes = [args.nodes // args.pools + (1 if i < args.nodes % args.pools else 0)
             for i in range(args.pools)]
    with tempfile.TemporaryDirectory(prefix="bench-tick-") as tmp, \
            store_url(args.sqlite, Path(tmp)) as (url, what):
        service, store, signals, held, executor, cluster = build(url, Path(tmp), sizes,
                                                                   args.leader)
        counted = Statements(store)
        print(f"{sum(sizes)} nodes over {len(sizes)} pools {sizes}; store: {what}; leader "
              f"fence: {'on' if args.leader else 'off'}; load average "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
        results: dict[str, list[tuple[float, float, int, TickReport]]] = {}

        def tick(phase: str) -> None:
            before, cpu, began = counted.count, time.thread_time(), time.monotonic()
            report = service.tick()
            wall = time.monotonic() - began
            results.setdefault(phase, []).append(
                (wall, time.thread_time() - cpu, counted.count - before, report))
            launching = len(store.nodes(states=[S.REQUESTED, S.PROVISIONING, S.BOOTSTRAPPING]))
            print(line(f"{phase} (launching after: {launching})", report, wall,
                       counted.count - before), flush=True)

        drained = 0
        try:
            tick("warm-up")
            signals.pools = {f"{TEAM}/p{i}": PoolObservation(pending=pending(*[GPUS] * size))
                             for i, size in enumerate(sizes, 1)}
            tick("launch")
            for _ in range(args.ticks):
                time.sleep(args.gap)
                tick("in flight")
            held.go.set()
            executor.wait(120)
            for _ in range(args.ticks):
                time.sleep(args.gap)
                tick("settle")
                executor.wait(120)
            drained = drain(store, signals, cluster, tick, executor, args.gap)
        finally:
            held.go.set()
            executor.close()
            service.close()
            store.close()
        [(wall, cpu, statements, report)] = results["launch"]
        submit = report.stages.get("submit")
        print(f"nodes={sum(sizes)} launch_tick_s={wall:.3f} launch_tick_cpu_s={cpu:.3f} "
              f"launch_submit_s={submit.seconds if submit else float('nan'):.3f} "
              f"launch_statements={statements} "
              f"inflight_tick_s_max={max((r[0] for r in results.get('in flight', [])), default=0):.3f} "
              f"settle_tick_s_max={max((r[0] for r in results.get('settle', [])), default=0):.3f} "
              f"{drain_figures(results.get('drain', []), drained)}")


IDLE_FOR_S = 10  # write_policy's scale_down.idle_for
READY_WAIT_S = 300
LAUNCHING = [S.REQUESTED, S.PROVISIONING, S.BOOTSTRAPPING]


def drain(store: FleetStore, signals: FakeSignals, cluster: FakeScheduler,
          tick: Callable[[str], None], executor: Executor, gap: float) -> int:
    """The nodes made READY (each joined the cluster and runs its job, so none is idle yet:
    "ready" ticks until none is launching, at most READY_WAIT_S), then no jobs and every
    node idle; once the READY nodes are past ``idle_for``, the drain tick (Drain of every
    one of them in one plan). Returns how many nodes that tick and the drain steps it
    started took past READY."""
    signals.pools = {key: PoolObservation() for key in signals.pools}
    signals.nodes = {n.name: busy(95.0, GPUS) for n in store.nodes()}
    for name in signals.nodes:
        cluster.join(name, GPUS)
    deadline = time.monotonic() + READY_WAIT_S
    while store.nodes(states=LAUNCHING) and time.monotonic() < deadline:
        time.sleep(gap)
        tick("ready")
        executor.wait(120)
    ready = store.nodes(states=[S.READY])
    signals.nodes = {n.name: idle(0.0, GPUS) for n in ready}
    last_ready = max((n.ready_at for n in ready if n.ready_at), default=utc_now())
    time.sleep(max(0.0, (last_ready - utc_now()).total_seconds() + IDLE_FOR_S + 1.5))
    tick("drain")
    return len(store.nodes(states=[S.DRAINING, S.DRAINED, S.TERMINATING, S.TERMINATED]))


def drain_figures(ticks: list[tuple[float, float, int, TickReport]], drained: int) -> str:
    if not ticks:
        return "drained=0"
    [(wall, cpu, statements, report)] = ticks
    submit = report.stages.get("submit")
    return (f"drained={drained} drain_tick_s={wall:.3f} drain_tick_cpu_s={cpu:.3f} "
            f"drain_submit_s={submit.seconds if submit else float('nan'):.3f} "
            f"drain_statements={statements}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--pools", type=int, default=4)
    parser.add_argument("--ticks", type=int, default=3, help="ticks in flight, then settling")
    parser.add_argument("--gap", type=float, default=1.0, help="seconds between ticks")
    parser.add_argument("--sqlite", action="store_true", help="a SQLite file, not PostgreSQL")
    parser.add_argument("--leader", action="store_true", help="the lease fence on every write")
    run(parser.parse_args())


if __name__ == "__main__":
    main()

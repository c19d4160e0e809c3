"""What the service's surfaces and store reads cost per tick at 100 and 1,000 nodes (issue 36).

For each size a real store (SQLite by default; ``--postgres``: a throwaway PostgreSQL 15
started by ``tests/service/postgres.py`` and stopped by PID) is filled with a fleet and its
history: five pools of three teams; the live nodes (90% READY, a few BOOTSTRAPPING,
PROVISIONING and DRAINING) created over the last two days, and twice as many nodes that
came and went over the last week (REQUESTED ... READY ... DRAINED ... TERMINATED), a tenth as
many that failed to launch, one audit row per node, operation rows, 200 plans and 20 ended
capacity requests. History grows with the fleet, as it does in a fleet ten times the size.

The service is then built as ``gpu-autoscaler run`` builds it (``service/wiring.build_service``:
the loop, its metrics, the request keeper with team tokens, the HTTP API on 127.0.0.1) with
the test fakes for what is outside (signals: every node busy at 50%, so the engine neither
adds nor removes; prices; the executor moves REQUESTED nodes to READY and DRAINING ones out).
Each round, at both sizes in turn (a burst of load on the shared machine then falls on both
sides of the ratio): 1% of the nodes start draining and as many are launched, one tick runs,
then ``/status``, ``/ui`` and ``/metrics`` are fetched over HTTP with the token, and every
store read the tick, the executor, the reconciler or the status API makes is timed alone.
SQL statements are counted on the engine (``before_cursor_execute``). Last, 200,000
transitions a month old are added to the biggest store, and the tick's launch-backoff read
(the last 6 hours of transitions) is timed before and after. The memory is the
RSS of a child process that opens each filled store, builds the service, ticks and serves
the three pages (``VmRSS``, ``VmHWM``).

    python benchmarks/bench_surfaces.py [--sizes 100 1000] [--rounds 5] [--postgres]

Wall times are the shared machine's (its load is printed); CPU times (the process's, while
it does nothing else than answer the GET or run the tick) are the work itself, and the
worst ratio is taken over them and over the sizes (KB, series).

Last line (f, g: the loop's statements per tick, the fake executor's apart):
status_ms_1000=<a> rss_mb_1000=<b> status_cpu_ms_1000=<c> ui_ms_1000=<d>
metrics_series_1000=<e> tick_statements_100=<f> tick_statements_1000=<g> worst_ratio=<h>
worst=<name>
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from sqlalchemy import event, insert

from autoscaler.fleet import queries
from autoscaler.fleet.operations import OperationLog
from autoscaler.fleet.requests import RequestBook
from autoscaler.fleet.store import FleetStore
from autoscaler.fleet.tables import AuditRow, NodeRow, OperationRow, PoolHistoryRow, TransitionRow
from autoscaler.model.changes import Create, Move, NodeFields
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.plan import Plan
from autoscaler.model.progress import LaunchSpec, NodeProgress
from autoscaler.model.request_spec import Condition, RequestSpec
from autoscaler.model.snapshot import Snapshot
from autoscaler.policy.models import Market
from autoscaler.service.app import Service
from autoscaler.service.config.models import ServiceConfig
from autoscaler.service.executor import AdvanceReport
from autoscaler.service.observe.metrics import ServiceMetrics
from autoscaler.service.observe.metrics_fleet import FleetObserver
from autoscaler.service.wiring import Overrides, build_service
from tests.builders import NOW, busy, make_pool_dict
from tests.service.service_fakes import Clock, FakeExecutor, FakePrices, FakeSignals

S = NodeState
ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-surfaces-token-0001"
TEAM_TOKEN = "bench-surfaces-team-token-01"
POOLS = (("vision", "train"), ("vision", "infer"), ("nlp", "train"), ("nlp", "batch"),
         ("speech", "train"))
TYPES = {"p3.2xlarge": 1, "p3.8xlarge": 4}
LIVE_PATH = (S.PROVISIONING, S.BOOTSTRAPPING, S.READY)
GONE_PATH = (S.PROVISIONING, S.BOOTSTRAPPING, S.READY, S.DRAINING, S.DRAINED, S.TERMINATING,
             S.TERMINATED)
FAILED_PATH = (S.PROVISIONING, S.PROVISION_FAILED, S.TERMINATING, S.TERMINATED)
TICK_OWN = "tick SQL statements, fake executor's apart"
OLD_ROWS = 200_000  # transitions older than a month, added at the end (launch_outcomes)


# -- the fleet -----------------------------------------------------------------------------
def write_policies(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for team in sorted({t for t, _ in POOLS}):
        pools = [make_pool_dict(name=p, instance_types=list(TYPES), max_nodes=2000)
                 for t, p in POOLS if t == team]
        YAML(typ="safe").dump({"apiVersion": "gpu-autoscaler/v1", "team": team,
                               "priority": "high", "pools": pools}, directory / f"{team}.yaml")


def fields(name: str, state: NodeState) -> dict[str, Any]:
    """The columns the executor writes with a move: the instance id and address once
    provisioned, the trigger of a drain, READY's time."""
    if state is S.BOOTSTRAPPING:
        h = zlib.crc32(name.encode())
        return {"instance_id": f"i-{h:012x}", "address": f"10.{h % 250}.{h // 250 % 250}.{h % 199}"}
    if state is S.DRAINING:
        return {"drain_trigger": "idle"}
    return {}


@dataclass
class Rows:
    """The rows of a filled store, written in bulk: the same columns ``FleetStore.apply``
    writes for a Create and each Move (the store's own path takes ~25 ms a move on this
    machine, too slow to lay down a week of history for 1,000 nodes)."""

    nodes: list[dict[str, Any]] = field(default_factory=list)
    transitions: list[dict[str, Any]] = field(default_factory=list)
    seq: dict[str, int] = field(default_factory=dict)

    def node(self, i: int, path: tuple[NodeState, ...], start: datetime, step: timedelta) -> None:
        team, pool = POOLS[i % len(POOLS)]
        key = f"{team}/{pool}"
        seq = self.seq[key] = self.seq.get(key, 0) + 1
        name = f"{team}-{pool}-{seq}"
        row: dict[str, Any] = {
            "name": name, "team": team, "pool": pool, "cloud": "aws", "region": "us-east-1",
            "zone": f"us-east-1{'abc'[i % 3]}", "instance_type": list(TYPES)[i % len(TYPES)],
            "market": (Market.SPOT if i % 3 == 0 else Market.ON_DEMAND).value,
            "state": S.REQUESTED.value, "state_since": start, "created_at": start,
            "ready_at": None, "instance_id": None, "address": None, "reason": "bench: launch",
            "drain_trigger": None, "replacement_requested": False, "attempts": 0,
            "meta": {"trigger": "demand"}}
        self.transitions.append({"node": name, "from_state": None, "to_state": S.REQUESTED.value,
                                 "at": start, "reason": "bench: launch"})
        at, current = start, S.REQUESTED
        for state in path:
            at += step
            row.update(fields(name, state), state=state.value, state_since=at,
                       reason=f"bench: {state.value}")
            if state is S.READY and row["ready_at"] is None:
                row["ready_at"] = at
            if state is S.PROVISION_FAILED:
                row["meta"] = {**row["meta"],
                               "failure": f"{state.value}: bench: InsufficientInstanceCapacity"}
            self.transitions.append({"node": name, "from_state": current.value,
                                     "to_state": state.value, "at": at,
                                     "reason": f"bench: {state.value}"})
            current = state
        self.nodes.append(row)


def fill(store: FleetStore, size: int, now: datetime) -> None:
    """``size`` live nodes and the history of a fleet of that size (see the docstring)."""
    rng = random.Random(size)
    rows, week = Rows(), timedelta(days=7)
    for i in range(2 * size):  # came and went over the last week
        start = now - week + timedelta(seconds=rng.uniform(0, week.total_seconds() - 86400))
        rows.node(i, GONE_PATH, start, timedelta(minutes=rng.uniform(3, 90)))
    for i in range(size // 10):  # launches that failed, the last 12 h
        rows.node(i, FAILED_PATH, now - timedelta(hours=rng.uniform(1, 12)), timedelta(minutes=4))
    for i in range(size):  # the fleet today, launched over the last two days
        path = LIVE_PATH[:1] if i % 50 == 0 else LIVE_PATH[:2] if i % 25 == 1 else \
            (*LIVE_PATH, S.DRAINING) if i % 30 == 2 else LIVE_PATH
        rows.node(i, path, now - timedelta(hours=rng.uniform(2, 48)), timedelta(minutes=3))
    rows.transitions.sort(key=lambda t: t["at"])
    audit = [{"at": now - timedelta(minutes=size - i), "actor": "autoscaler",
              "event": "node_launched", "pool": "/".join(POOLS[i % len(POOLS)]),
              "node": rows.nodes[i]["name"], "detail": f"bench node {i}"} for i in range(size)]
    operations = [{"kind": "apply", "keys": [f"pool:{i % len(POOLS)}"], "what": f"apply {i}",
                   "started_at": now - timedelta(minutes=size - i),
                   "finished_at": now - timedelta(minutes=size - i) + timedelta(seconds=40),
                   "outcome": "done", "detail": ""} for i in range(0, size, 2)]
    with store.session() as s:
        s.execute(insert(NodeRow), rows.nodes)
        s.execute(insert(TransitionRow), rows.transitions)
        s.execute(insert(PoolHistoryRow), [{"pool": k, "next_seq": v + 1}
                                           for k, v in rows.seq.items()])
        s.execute(insert(AuditRow), audit)
        s.execute(insert(OperationRow), operations)
    for i in range(200):
        store.record_plan(Plan(decided_at=now - timedelta(seconds=30 * (200 - i))))
    book = RequestBook(store)
    for i in range(20):
        spec = RequestSpec.model_validate({"name": f"ci-{i}", "class": "atomic", "node_sets": [
            {"gpu_model": "V100", "gpus": 4, "nodes": 1}]})
        view = book.create("vision", spec, now - timedelta(hours=3)).request
        book.set_condition(view.id, Condition.FAILED, now - timedelta(hours=2), "bench: ended")


def create(i: int, reason: str = "bench: launch") -> Create:
    team, pool = POOLS[i % len(POOLS)]
    itype = list(TYPES)[i % len(TYPES)]
    market = Market.SPOT if i % 3 == 0 else Market.ON_DEMAND
    launch = LaunchSpec(pool=f"{team}/{pool}", instance_type=itype, market=market,
                        zone=f"us-east-1{'abc'[i % 3]}", reason=reason, trigger="demand")
    return Create(team, pool, "aws", "us-east-1", launch, NodeProgress())


# -- the service -----------------------------------------------------------------------------
@dataclass
class Counter:
    statements: int = 0
    seconds: float = 0.0
    _started: list[float] = field(default_factory=list)

    def attach(self, store: FleetStore) -> None:
        event.listen(store.engine, "before_cursor_execute", self._before)
        event.listen(store.engine, "after_cursor_execute", self._after)

    def _before(self, *_: Any) -> None:
        self.statements += 1
        self._started.append(time.perf_counter())

    def _after(self, *_: Any) -> None:
        if self._started:
            self.seconds += time.perf_counter() - self._started.pop()


@dataclass
class Fleet:
    size: int
    store: FleetStore
    service: Service
    clock: Clock
    signals: FakeSignals
    counter: Counter
    executor: CountedExecutor
    seq: int = 10_000_000

    def get(self, path: str) -> tuple[float, float, bytes, int]:
        """(seconds, CPU seconds of the process, body, statements) of one GET with the token
        (the process does nothing else meanwhile: its CPU time is the server's work)."""
        api = self.service.api
        if api is None:
            raise RuntimeError("the HTTP API is not running")
        request = urllib.request.Request(api.url + path, headers={"Authorization": f"Bearer {TOKEN}"})
        before, cpu = self.counter.statements, time.process_time()
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=120) as answer:
            body = answer.read()
        return (time.perf_counter() - started, time.process_time() - cpu, body,
                self.counter.statements - before)

    def observe_all(self) -> None:
        """Every live node busy at 50% on all its GPUs: no scale-up, no idle scale-down."""
        self.signals.nodes = {n.name: busy(util=50.0, gpus=TYPES[n.instance_type])
                              for n in self.store.nodes()}

    def churn(self) -> None:
        """1% of the fleet starts draining (the executor then drains and removes it) and as
        many nodes are launched (the executor brings them to READY)."""
        self.clock.advance(seconds=30)
        k = max(1, self.size // 100)
        ready = [n.name for n in self.store.nodes(states=[S.READY])][:k]
        now = self.clock()
        self.store.apply([Move(n, S.DRAINING, "bench: idle", NodeFields(drain_trigger="idle"))
                          for n in ready], now)
        self.seq += k
        self.store.apply([create(self.seq + i) for i in range(k)], now)
        self.observe_all()


class CountedExecutor(FakeExecutor):
    """The test executor (one store write per move); the statements and CPU time it takes
    are counted apart: a real executor's are its own, not the loop's."""

    def __init__(self, store: FleetStore, clock: Clock, counter: Counter):
        super().__init__(store, clock)
        self.counter, self.statements, self.cpu = counter, 0, 0.0

    @contextmanager
    def _counted(self) -> Iterator[None]:
        before, cpu = self.counter.statements, time.process_time()
        try:
            yield
        finally:
            self.statements += self.counter.statements - before
            self.cpu += time.process_time() - cpu

    def submit(self, plan: Plan, plan_id: int | None = None) -> list[str]:
        with self._counted():
            return super().submit(plan, plan_id)

    def advance(self, snapshot: Snapshot | None = None) -> AdvanceReport:
        with self._counted():
            return super().advance(snapshot)


def build(size: int, url: str, work: Path) -> Fleet:
    policies = work / "policies"
    write_policies(policies)
    os.environ["GAS_BENCH_TOKEN"] = TOKEN
    os.environ["GAS_BENCH_TEAM_TOKEN"] = TEAM_TOKEN
    config = ServiceConfig.model_validate({
        "policies_dir": policies, "store": {"url": url},
        "http": {"listen": "127.0.0.1:0", "token_env": "GAS_BENCH_TOKEN",
                 "team_tokens": {"vision": {"env": "GAS_BENCH_TEAM_TOKEN"}}}})
    clock, store, counter = Clock(NOW), FleetStore(url), Counter()
    counter.attach(store)
    signals, executor = FakeSignals(), CountedExecutor(store, clock, counter)
    service = build_service(config, clock=clock, overrides=Overrides(
        signals=signals, prices=FakePrices(), store=store, executor=executor))
    service.start_api()
    fleet = Fleet(size, store, service, clock, signals, counter, executor)
    fleet.observe_all()
    service.tick()  # the first tick: the drains the fill left run out, a plan is recorded
    return fleet


# -- what is measured ------------------------------------------------------------------------
def store_reads(fleet: Fleet, since_id: int) -> dict[str, Callable[[], Any]]:
    """Every store read of a tick, the executor, the reconciler and /status, by who makes it."""
    store, now = fleet.store, fleet.clock()
    book = RequestBook(store)
    pool = "/".join(POOLS[0])
    latest = queries.latest_plan(store)
    plan_id = latest.id if latest is not None else 0

    def durations() -> None:
        observer = FleetObserver(store)
        observer.last_id = since_id
        observer.durations(ServiceMetrics())

    return {
        "nodes() [loop, status, reconciler, executor]": store.nodes,
        "fleet_view() [loop, twice]": store.fleet_view,
        "nodes(states=[READY]) [executor, reconciler]": lambda: store.nodes(states=[S.READY]),
        "nodes(names=its requests') [request keeper]": lambda: store.nodes(
            names={n for v in book.unsettled() for n in v.nodes}, include_terminated=True),
        "nodes(pool, include_terminated) [executor submit]":
            lambda: store.nodes(pool=pool, include_terminated=True),
        "launch_outcomes(6 h) [launch backoff]":
            lambda: queries.launch_outcomes(store, now - timedelta(hours=6)),
        "next_seq_by_pool [preview]": lambda: queries.next_seq_by_pool(store),
        "recent_boots(pool, 20) [forecasts]": lambda: queries.recent_boots(store, pool, 20),
        "durations(one round) [metrics]": durations,
        "latest_plan + actions [status]": lambda: store.actions(plan_id=plan_id),
        "recent_transitions(30) [status]": lambda: queries.recent_transitions(store, 30),
        "operations.recent(30) [status]": lambda: OperationLog(store).recent(30),
        "requests.unsettled() [keeper, held]": book.unsettled,
        "requests.list(open) [status]": lambda: book.list(include_final=False),
    }


def series(exposition: bytes) -> int:
    return sum(1 for line in exposition.decode().splitlines() if line and not line.startswith("#"))


def measure_round(fleet: Fleet, figures: dict[str, list[float]], gets: int) -> None:
    since = queries.last_transition_id(fleet.store)
    fleet.churn()
    before, sql_before = fleet.counter.statements, fleet.counter.seconds
    started, cpu = time.perf_counter(), time.process_time()
    fleet.service.tick()
    figures["tick ms"].append(1000 * (time.perf_counter() - started))
    figures["tick CPU ms"].append(1000 * (time.process_time() - cpu))
    figures["tick SQL statements"].append(fleet.counter.statements - before)
    figures[TICK_OWN].append(
        fleet.counter.statements - before - fleet.executor.statements)
    figures["tick CPU ms, fake executor's apart"].append(
        figures["tick CPU ms"][-1] - 1000 * fleet.executor.cpu)
    fleet.executor.statements, fleet.executor.cpu = 0, 0.0
    figures["tick SQL ms"].append(1000 * (fleet.counter.seconds - sql_before))
    for path, name in (("/status", "status"), ("/ui", "ui"), ("/metrics", "metrics")):
        for _ in range(gets):
            seconds, cpu, body, statements = fleet.get(path)
            figures[f"{name} ms"].append(1000 * seconds)
            figures[f"{name} CPU ms"].append(1000 * cpu)
        figures[f"{name} KB"].append(len(body) / 1024)
        figures[f"{name} SQL statements"].append(statements)
        if name == "metrics":
            figures["metrics series"].append(series(body))
    for name, read in store_reads(fleet, since).items():
        for _ in range(gets):
            before = fleet.counter.statements
            started, cpu = time.perf_counter(), time.process_time()
            read()
            figures[f"{name} ms"].append(1000 * (time.perf_counter() - started))
            figures[f"{name} CPU ms"].append(1000 * (time.process_time() - cpu))
        figures[f"{name} statements"].append(fleet.counter.statements - before)


def rss_child(url: str, size: int, work: Path) -> dict[str, float]:
    """Run in a child process: build the service on the filled store, tick, serve."""
    fleet = build(size, url, work)
    for _ in range(3):
        fleet.churn()
        fleet.service.tick()
        for path in ("/status", "/ui", "/metrics"):
            fleet.get(path)
    fleet.service.close()
    fleet.store.close()
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines()
                  if ":" in line)
    return {k: int(status[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM")}


def rss(url: str, size: int, work: Path) -> dict[str, float]:
    done = subprocess.run([sys.executable, __file__, "--rss-child", str(size), "--url", url,
                           "--work", str(work)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              [str(ROOT), *os.environ.get("PYTHONPATH", "").split(os.pathsep)])})
    if done.returncode != 0:
        raise RuntimeError(f"the memory child failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def old_history(url: str, gets: int) -> tuple[float, float]:
    """The tick's launch-backoff read (the last 6 h of transitions) before and after
    ``OLD_ROWS`` transitions older than a month are added: the table keeps every move."""
    store, since = FleetStore(url), NOW + timedelta(hours=1) - timedelta(hours=6)

    def cpu() -> float:
        queries.launch_outcomes(store, since)
        started = time.process_time()
        for _ in range(gets):
            queries.launch_outcomes(store, since)
        return 1000 * (time.process_time() - started) / gets

    try:
        before = cpu()
        with store.session() as s:
            s.execute(insert(TransitionRow), [
                {"node": f"gone-{i}", "from_state": S.READY.value, "to_state": S.DRAINING.value,
                 "at": NOW - timedelta(days=30, seconds=i), "reason": "bench: old"}
                for i in range(OLD_ROWS)])
        return before, cpu()
    finally:
        store.close()


# -- the run ---------------------------------------------------------------------------------
@contextmanager
def databases(postgres: bool, sizes: list[int], work: Path) -> Iterator[dict[int, str]]:
    if not postgres:
        yield {n: f"sqlite:///{work / f'fleet-{n}.db'}" for n in sizes}
        return
    from tests.service.postgres import Postgres, available

    why = available()
    if why:
        raise SystemExit(f"--postgres: {why}")
    server = Postgres().start()
    try:
        yield {n: server.database(f"surfaces_{n}") for n in sizes}
    finally:
        server.stop()  # by PID (ManagedProcess)


def report(sizes: list[int], figures: dict[int, dict[str, list[float]]],
           memory: dict[int, dict[str, float]]) -> tuple[float, str]:
    small, big = sizes[0], sizes[-1]
    print(f"\n{'part':58} {small:>10} {big:>10}  ratio")
    worst, worst_name = 0.0, ""
    for name in figures[small]:
        a, b = (statistics.median(figures[n][name]) for n in (small, big))
        ratio = b / a if a else float("inf") if b else 1.0
        print(f"{name:58} {a:10.2f} {b:10.2f}  {ratio:5.2f}")
        if name.endswith(("CPU ms", "KB", "series")) and worst < ratio < float("inf"):
            worst, worst_name = ratio, name
    for key in ("VmRSS", "VmHWM"):
        a, b = memory[small][key], memory[big][key]
        print(f"{'memory ' + key + ' MB':58} {a:10.1f} {b:10.1f}  {b / a:5.2f}")
    return worst, worst_name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--gets", type=int, default=3, help="GETs of each page per round")
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--rss-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child is not None:
        print(json.dumps(rss_child(args.url, args.rss_child, args.work)))
        return
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-surfaces-")))
        urls = stack.enter_context(databases(args.postgres, args.sizes, work))
        fleets: dict[int, Fleet] = {}
        for size in args.sizes:
            started = time.perf_counter()
            store = FleetStore(urls[size])
            fill(store, size, NOW - timedelta(minutes=1))
            store.close()
            fleets[size] = build(size, urls[size], work / str(size))
            stack.callback(fleets[size].store.close)
            stack.callback(fleets[size].service.close)
            print(f"{size} nodes: filled and built in {time.perf_counter() - started:.1f} s "
                  f"({len(fleets[size].store.nodes(include_terminated=True))} nodes stored, "
                  f"{queries.last_transition_id(fleets[size].store)} transitions)", flush=True)
        print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
        figures: dict[int, dict[str, list[float]]] = {n: {} for n in args.sizes}
        for r in range(args.rounds):
            for size in args.sizes if r % 2 == 0 else reversed(args.sizes):
                into: dict[str, list[float]] = defaultdict(list)
                measure_round(fleets[size], into, args.gets)
                for k, v in into.items():
                    figures[size].setdefault(k, []).extend(v)
            print(f"round {r + 1}/{args.rounds} done", flush=True)
        for fleet in fleets.values():
            fleet.service.close()
            fleet.store.close()
        history = old_history(urls[args.sizes[-1]], args.gets)
        memory = {n: rss(urls[n], n, work / f"rss-{n}") for n in args.sizes}
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"launch_outcomes(6 h) at {args.sizes[-1]} nodes, CPU ms: "
          f"{history[0]:.1f}, then {history[1]:.1f} with {OLD_ROWS:,} older transitions")
    worst, worst_name = report(args.sizes, figures, memory)
    big, small = args.sizes[-1], args.sizes[0]

    def med(n: int, name: str) -> float:
        return statistics.median(figures[n][name])

    print(f"status_ms_{big}={med(big, 'status ms'):.1f} rss_mb_{big}={memory[big]['VmHWM']:.0f} "
          f"status_cpu_ms_{big}={med(big, 'status CPU ms'):.1f} "
          f"ui_ms_{big}={med(big, 'ui ms'):.1f} metrics_series_{big}={med(big, 'metrics series'):.0f} "
          f"tick_statements_{small}={med(small, TICK_OWN):.0f} "
          f"tick_statements_{big}={med(big, TICK_OWN):.0f} "
          f"worst_ratio={worst:.2f} worst={worst_name.replace(' ', '_')}")


if __name__ == "__main__":
    main()

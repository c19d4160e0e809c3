"""Scale scenario (issue 36 item 1): the real service loop ramps a fleet from 0 to N nodes
over P pools, holds it, then drains most of it away.

Real: the service as ``build_service`` wires it (its scheduler, worker pools, HTTP API),
in a process of its own (``--serve``, started by this script) so its RSS is its own;
Terraform against the patched moto server (shards of 50 nodes per pool); Prometheus
scraping the synthetic DCGM exporter, one target per instance (the sandbox's follower);
the project's Kubernetes API server and its simple-bind scheduler (``SandboxKube``):
every pool is ``cluster.kind: kubernetes``, the demand is pending pods (one 4-GPU pod per
node, selecting its pool), bound once their node joins; PostgreSQL as the store (a
throwaway server, ``tests/service/postgres.py``; SQLite only when PostgreSQL cannot start
here, and the output says so).

Stand-in: booting N test hosts and running the playbook on each is beyond two cores, so
ONLY in this scenario the bootstrap is ``StandInBootstrap`` (here in benchmarks/, never in
the autoscaler package): it joins each node to the API server as the fake ``kubeadm``
would (a Ready Node with its pool's labels and GPUs, POSTed with the bootstrap token) and
starts its exporter series. Nodes get a loopback address from a stand-in resolver (no
test host, so no namespace address). The real playbook's cost per host is measured by
``bench_bootstrap.py``.

Phases: ramp (N pods pending; until N nodes READY and every pod bound), hold (``--hold``
seconds; /status latency and RSS at peak), drain (the pods of all but ``--keep`` of the
nodes deleted and their GPUs pinned at 0%: until only the kept nodes are left in the
store and in moto).

Printed, all measured in the run: nodes_peak; whole tick duration (``Service.tick``) p50 /
p99 overall and while >= 20% of N are launching (REQUESTED, PROVISIONING, BOOTSTRAPPING at
the tick's start), and for those ticks each stage's wall and CPU p50 / p99
(``TickReport.stages``) and the slowest one's breakdown; ramp start -> all READY; drain
time; each launch apply's seconds; the service process' RSS (peak, and at peak fleet);
/status latency at peak.

Last line: nodes_peak=<n> tick_p99_s=<a> ready_s=<r> drain_s=<d> rss_mb=<e> status_ms=<f>
Needs root (PostgreSQL runs as the postgres user) and the terraform binary.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

# Run from anywhere: the stand-in and the PostgreSQL helper are imported from the repo.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoscaler.actuators.ansible.results import BootstrapRun, HostResult, HostStatus
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.policy.duration import format_duration, parse_duration
from autoscaler.policy.models import TeamPolicy

S = NodeState
TEAM, INSTANCE_TYPE, GPUS = "scale", "p3.8xlarge", 4
LAUNCHING = [S.REQUESTED, S.PROVISIONING, S.BOOTSTRAPPING]
BOOTSTRAP_NOTE = "bootstrap: stand-in (scale scenario only), not Ansible"
HOLD_UTIL, IDLE_UTIL = 50.0, 0.0  # between scale-down's 10% and scale-up's 95%


# ---- the stand-in (used only by the --serve process of this scenario) -------------------
class StandInBootstrap:
    """The Bootstrapper protocol (autoscaler/actuators/ansible/runner.py) for this scenario
    only: each node joins the API server and its exporter series start; nothing runs on a
    host. Health checks report every node OK."""

    def __init__(self, kube_url: str, token: str, exporter_url: str):
        from autoscaler.sandbox.fakes.dcgm_exporter import ExporterControl

        self.kube_url, self.token = kube_url, token
        self.exporter = ExporterControl(exporter_url)
        self._cancelled = threading.Event()

    def bootstrap(self, nodes: Sequence[Node], policies: Mapping[str, TeamPolicy], *,
                  secrets: Mapping[str, str] | None = None) -> BootstrapRun:
        from autoscaler.actuators.ansible.runner import BootstrapCancelled

        if self._cancelled.is_set():
            raise BootstrapCancelled("the stand-in is stopping")
        started = time.monotonic()
        hosts = {}
        for node in nodes:
            try:
                self._join(node, policies)
                self.exporter.call("add", node=node.name, gpus=GPUS, model="V100")
                hosts[node.name] = HostResult(node.name, HostStatus.OK, message="stand-in join")
            except Exception as exc:  # one node's failure is that node's, as with Ansible
                hosts[node.name] = HostResult(node.name, HostStatus.FAILED, "stand-in join",
                                              str(exc))
        return BootstrapRun(f"stand-in-{time.time_ns()}", Path(tempfile.gettempdir()),
                            "successful", time.monotonic() - started, hosts)

    def _join(self, node: Node, policies: Mapping[str, TeamPolicy]) -> None:
        from autoscaler.signals.kube_fit import MARKET_LABEL, POOL_LABEL, TEAM_LABEL

        labels = {"kubernetes.io/hostname": node.name, "kubernetes.io/os": "linux",
                  TEAM_LABEL: node.team, POOL_LABEL: node.pool,
                  MARKET_LABEL: node.market.value,
                  "node.kubernetes.io/instance-type": node.instance_type,
                  "topology.kubernetes.io/region": node.region}
        if node.zone:
            labels["topology.kubernetes.io/zone"] = node.zone
        policy = policies.get(node.team)
        pool = next((p for p in policy.pools if p.name == node.pool), None) if policy else None
        if pool is not None:
            labels.update(pool.cluster.labels)
        res = {"cpu": "32", "memory": "244Gi", "pods": "110", "nvidia.com/gpu": str(GPUS)}
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": node.name, "labels": labels},
                "spec": {},
                "status": {"capacity": res, "allocatable": res, "conditions": [
                    {"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}
        req = urllib.request.Request(f"{self.kube_url}/api/v1/nodes", method="POST",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {self.token}"})
        try:
            urllib.request.urlopen(req, timeout=30).close()
        except urllib.error.HTTPError as exc:
            if exc.code != 409:  # 409: joined before (a rerun), as kubeadm treats it
                raise

    def health_check(self, nodes: Sequence[Node], policies: Mapping[str, TeamPolicy]) -> BootstrapRun:
        return BootstrapRun(f"stand-in-{time.time_ns()}", Path(tempfile.gettempdir()),
                            "successful", 0.0,
                            {n.name: HostResult(n.name, HostStatus.OK) for n in nodes})

    def cancel(self) -> None:
        self._cancelled.set()

    def forget(self, names: Iterable[str]) -> None:
        pass  # nothing is kept of a node

    def forget_all_but(self, live: Iterable[str]) -> list[str]:
        return []


def serve(args: argparse.Namespace) -> None:
    """The service process: the real wiring, the stand-in bootstrap, timings to a file."""
    import logging

    from autoscaler.sandbox.stack.kube_cluster import TOKEN_ENV
    from autoscaler.service.config.load import load_config
    from autoscaler.service.wiring import Overrides, build_service

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # a line per skipped tick
    events = open(args.events, "a", buffering=1)  # noqa: SIM115 (open for the process' life)
    lock = threading.Lock()

    def emit(**item: Any) -> None:
        with lock:
            events.write(json.dumps(item) + "\n")

    config = load_config(Path(args.serve))
    service = build_service(config, overrides=Overrides(address_of=lambda node: "127.0.0.1"))
    executor = service.loop.executor
    executor.bootstrapper = StandInBootstrap(args.kube, os.environ[TOKEN_ENV], args.exporter)
    provisioner = executor.provisioner
    real_apply = provisioner.apply
    sizes: dict[str, int] = {}

    def timed_apply(ref: Any, nodes: Any, *, destroy: Any = ()) -> Any:
        began = time.monotonic()
        try:
            return real_apply(ref, nodes, destroy=destroy)
        finally:
            key = f"{ref.team}-{ref.pool}"
            emit(kind="apply", pool=key, s=time.monotonic() - began, nodes=len(nodes),
                 destroy=len(destroy), launch=len(nodes) > sizes.get(key, 0))
            sizes[key] = len(nodes)

    provisioner.apply = timed_apply
    real_tick = service.tick

    def timed_tick() -> Any:
        launching = len(service.store.nodes(states=LAUNCHING))
        began = time.monotonic()
        report = None
        try:
            report = real_tick()
            return report
        finally:
            stages = {k: [t.seconds, t.cpu_seconds] for k, t in report.stages.items()} \
                if report is not None else {}
            emit(kind="tick", at=time.time(), s=time.monotonic() - began, launching=launching,
                 stages=stages, load=os.getloadavg()[0])

    service.tick = timed_tick  # type: ignore[method-assign]  # the scheduler calls self.tick
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    service.run(stop)


# ---- the scenario ----------------------------------------------------------------------
def pool_sizes(nodes: int, pools: int) -> list[int]:
    base, extra = divmod(nodes, pools)
    return [base + (1 if i < extra else 0) for i in range(pools)]


def write_policy(directory: Path, sizes: list[int], window: str = "10s") -> None:
    """``window``: the scale-up window and idle_for; a window shorter than the scrape
    interval holds no sample, and a node without a mean is never taken as idle."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = ["apiVersion: gpu-autoscaler/v1", f"team: {TEAM}", "priority: high",
             f"quota: {{max_gpus: {sum(sizes) * GPUS}}}", "pools:"]
    for i, size in enumerate(sizes, 1):
        lines += [
            f"  - name: p{i}", "    cloud: aws", "    region: us-east-1",
            "    zones: [us-east-1a]", f"    instance_types: [{INSTANCE_TYPE}]",
            f"    capacity: {{on_demand_base: {size}, spot_percent: 0}}",
            f"    min_nodes: 0\n    max_nodes: {size}",
            f"    scale_up: {{gpu_utilization_above: 95, window: {window}, pending_jobs: true, "
            f"cooldown: 1s, max_step: {size}}}",
            f"    scale_down: {{gpu_utilization_below: 10, idle_for: {window}, cooldown: 1s, "
            "drain_timeout: 1m, checkpoint_grace: 5s, max_draining_percent: 100}",
            "    bootstrap: {timeout: 5m}",
            f"    cluster: {{kind: kubernetes, labels: {{scale-pool: p{i}}}}}"]
    (directory / f"{TEAM}.yaml").write_text("\n".join(lines) + "\n")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


class Watch:
    """Samples the service process' RSS every second while the scenario runs."""

    def __init__(self, pid: int):
        self.pid, self.peak = pid, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            value = rss_mb(self.pid)
            if value == value:
                self.peak = max(self.peak, value)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def start_store() -> tuple[Any, str, str]:
    """(server or None, store URL, what it is)."""
    from tests.service import postgres

    why = postgres.available()
    if why is None:
        try:
            server = postgres.Postgres().start()
            return server, server.url, "PostgreSQL 15 (throwaway, 127.0.0.1)"
        except Exception as exc:  # say so, and fall back
            why = f"PostgreSQL did not start: {exc}"
    return None, "", f"SQLite FALLBACK ({why})"


def run(args: argparse.Namespace) -> int:
    from autoscaler.fleet.store import FleetStore
    from autoscaler.sandbox.hosts.procs import free_port, wait_until
    from autoscaler.sandbox.stack.config import render_service_config, write_yaml
    from autoscaler.sandbox.stack.demo import DEMO_EXECUTOR
    from autoscaler.sandbox.stack.kube_cluster import SandboxKube
    from autoscaler.sandbox.stack.local import SandboxStack, StackOptions
    from autoscaler.signals.kube_fit import POOL_LABEL

    sizes = ([int(x) for x in args.sizes.split(",")] if args.sizes
             else pool_sizes(args.nodes, args.pools))
    n = sum(sizes)
    root = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    scrape_s = parse_duration(args.scrape_interval).total_seconds()
    write_policy(root / "policies", sizes, format_duration(timedelta(seconds=max(10, 4 * scrape_s))))
    events = root / "events.jsonl"
    pg, url, store_note = start_store()
    url = url or f"sqlite:///{root / 'fleet.db'}"
    print(f"nodes {n} over {len(sizes)} pools {sizes} ({INSTANCE_TYPE}, {GPUS} GPUs, one "
          f"4-GPU pod per node); store: {store_note}; {BOOTSTRAP_NOTE}", flush=True)
    port = free_port()
    stack = SandboxStack(root / "sandbox", StackOptions(
        policies_dir=root / "policies", privileged=False, util=HOLD_UTIL,
        tick_interval=args.tick, http_port=port, executor=dict(DEMO_EXECUTOR),
        scrape_interval=args.scrape_interval, recording_rules=args.scrape_interval != "1s"))
    child: subprocess.Popen[bytes] | None = None
    watch: Watch | None = None
    store: FleetStore | None = None
    result: dict[str, Any] = {}
    try:
        stack.start()
        # The scenario's cluster is the project's API server on loopback (no namespaced
        # node has to reach it); stack.stop() stops it with the rest.
        stack.kube = SandboxKube("127.0.0.1").start()
        kube = stack.kube.kube
        config = render_service_config(stack)
        config["store"] = {"url": url}
        config.setdefault("executor", {})["cloud_list_interval"] = args.cloud_list_interval
        config["clouds"]["aws"]["read_timeout"] = args.aws_read_timeout
        config["signals"]["kubernetes"]["timeout"] = args.kube_timeout
        write_yaml(root / "service.yaml", config)
        env = {**os.environ, **stack.env(), "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
        assert stack.dcgm is not None
        log = open(root / "service.log", "wb")  # noqa: SIM115 (the child's for its life)
        child = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve", str(root / "service.yaml"),
             "--events", str(events), "--kube", stack.kube.url, "--exporter", stack.dcgm.url],
            env=env, stdout=log, stderr=subprocess.STDOUT)
        print(f"service process pid {child.pid}, log {root / 'service.log'}", flush=True)
        status_url = f"http://127.0.0.1:{port}/status"

        def answers() -> bool:
            if child.poll() is not None:
                raise RuntimeError(f"the service exited ({child.returncode}): see its log")
            try:
                urllib.request.urlopen(status_url, timeout=5).close()
                return True
            except OSError:
                return False

        wait_until(answers, 120, "the service's API", interval=0.5)
        watch = Watch(child.pid)
        store = FleetStore(url)

        def count(states: list[NodeState]) -> int:
            return len(store.nodes(states=states))

        # Ramp.
        ramp = time.monotonic()
        pods: dict[str, str] = {}  # pod key -> pool
        for i, size in enumerate(sizes, 1):
            for j in range(size):
                kube.add_pod(f"job-p{i}-{j}", TEAM, gpus=GPUS,
                             node_selector={POOL_LABEL: f"p{i}"})
                pods[f"{TEAM}/job-p{i}-{j}"] = f"p{i}"
        peak = 0
        resubmitted: list[str] = []

        def resubmit_orphans() -> None:
            """A pod evicted by a drain, or bound to a Node object that is gone (a node
            replaced as broken), is submitted again, pending, as pod GC and a Job
            controller would."""
            for key, pool in pods.items():
                pod = kube.pods.get(key)
                node = pod["spec"].get("nodeName") if pod else None
                if pod is None or (node and node not in kube.nodes):
                    if pod is not None:
                        kube.delete_pod(key)
                    kube.add_pod(key.split("/", 1)[1], TEAM, gpus=GPUS,
                                 node_selector={POOL_LABEL: pool})
                    resubmitted.append(f"{key} (was on {node or 'a drained node'})")

        def all_ready() -> bool:
            nonlocal peak
            resubmit_orphans()
            ready = count([S.READY])
            peak = max(peak, ready)
            bound = sum(1 for k in pods if (kube.pods.get(k) or {}).get("spec", {}).get("nodeName"))
            return ready >= n and bound >= n

        wait_until(all_ready, args.timeout, f"{n} nodes READY and {n} pods bound", interval=1.0)
        ready_s = time.monotonic() - ramp
        print(f"ramp: {n} READY, every pod bound, in {ready_s:.1f}s; {len(resubmitted)} pod(s) "
              f"submitted again after their node was removed: {', '.join(resubmitted[:10])}",
              flush=True)

        # Hold: /status latency and RSS at peak.
        hold_end = time.monotonic() + args.hold
        lat = []
        while time.monotonic() < hold_end or len(lat) < 10:
            began = time.monotonic()
            with urllib.request.urlopen(status_url, timeout=30) as resp:
                resp.read()
            lat.append((time.monotonic() - began) * 1000)
            time.sleep(max(0.0, 1.0 - (time.monotonic() - began)))
        peak = max(peak, count([S.READY]))
        rss_peak_fleet = rss_mb(child.pid)

        # Drain: all but --keep of each pool's pods deleted, their GPUs idle.
        keep_per_pool = [max(0, round(size * args.keep)) for size in sizes]
        kept = sum(keep_per_pool)
        drained = time.monotonic()
        for i, keep in enumerate(keep_per_pool, 1):
            mine = sorted(k for k, p in pods.items() if p == f"p{i}")
            for key in mine[keep:]:
                node = kube.pods[key]["spec"].get("nodeName")
                kube.delete_pod(key)
                if node:
                    stack.exporter.call("util", node=node, util=IDLE_UTIL)

        def only_kept() -> bool:
            return (len(store.nodes()) == kept and stack.running_instances() == kept)

        wait_until(only_kept, args.timeout, f"only {kept} nodes left", interval=1.0)
        drain_s = time.monotonic() - drained
        print(f"drain: {n - kept} nodes drained and destroyed in {drain_s:.1f}s "
              f"({kept} kept, their pods running)", flush=True)
        result = {"ready_s": ready_s, "drain_s": drain_s, "peak": peak, "status_ms": lat,
                  "rss_at_peak": rss_peak_fleet, "rss_max": watch.peak}
    finally:
        if watch is not None:
            watch.stop()
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=180)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(timeout=30)
        if store is not None:
            store.close()
        stack.stop()
        if pg is not None:
            pg.stop()
    report(events, result, n)
    if not args.keep_dir:
        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"kept {root}")
    return 0


def print_stages(ticks: list[dict[str, Any]], n: int) -> None:
    """Where the ticks' time went (``TickReport.stages``): per stage, wall p50 / p99 and
    the tick thread's CPU p50 / p99, over the ticks while >= 20% of N were launching, and
    the slowest tick's own breakdown."""
    busy = [e for e in ticks if e["launching"] >= 0.2 * n and e.get("stages")]
    if not busy:
        print("tick stages: none recorded while >= 20% of N were launching")
        return
    names = list(dict.fromkeys(k for e in busy for k in e["stages"]))
    print(f"tick stages while >= 20% of N launching ({len(busy)} ticks; wall p50/p99, "
          f"cpu p50/p99, seconds):")
    for name in sorted(names, key=lambda k: -pct([e["stages"].get(k, [0, 0])[0] for e in busy],
                                                 0.99)):
        wall = [e["stages"].get(name, [0.0, 0.0])[0] for e in busy]
        cpu = [e["stages"].get(name, [0.0, 0.0])[1] for e in busy]
        print(f"  {name:10} {pct(wall, .5):7.2f} {pct(wall, .99):7.2f}   "
              f"{pct(cpu, .5):6.2f} {pct(cpu, .99):6.2f}")
    worst = max(busy, key=lambda e: e["s"])
    print(f"slowest such tick: {worst['s']:.2f}s at load {worst.get('load', float('nan')):.1f}, "
          f"{worst['launching']} launching at its start: " + ", ".join(
              f"{k} {w:.2f}s (cpu {c:.2f}s)" for k, (w, c) in sorted(
                  worst["stages"].items(), key=lambda kv: -kv[1][0])))


def report(events: Path, result: dict[str, Any], n: int) -> None:
    items = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
    ticks = [e for e in items if e["kind"] == "tick"]
    busy = [e["s"] for e in ticks if e["launching"] >= 0.2 * n]
    every = [e["s"] for e in ticks]
    launches = [e for e in items if e["kind"] == "apply" and e["launch"]]
    others = [e for e in items if e["kind"] == "apply" and not e["launch"]]
    lat = result["status_ms"]
    print(f"ticks: {len(every)}, p50 {pct(every, 0.5):.2f}s p99 {pct(every, 0.99):.2f}s max "
          f"{max(every, default=float('nan')):.2f}s; while >= 20% of N launching: "
          f"{len(busy)} ticks, p50 {pct(busy, 0.5):.2f}s p99 {pct(busy, 0.99):.2f}s")
    print_stages(ticks, n)
    print("launch applies (pool, nodes after, seconds): " + ", ".join(
        f"{e['pool']} {e['nodes']} {e['s']:.1f}s" for e in launches))
    if others:
        print(f"other applies (removals): {len(others)}, p50 {pct([e['s'] for e in others], .5):.1f}s "
              f"max {max(e['s'] for e in others):.1f}s")
    print(f"RSS of the service process: {result['rss_at_peak']:.0f} MB at peak fleet, "
          f"{result['rss_max']:.0f} MB max over the run")
    print(f"/status at peak: {len(lat)} GETs, p50 {statistics.median(lat):.1f} ms, max "
          f"{max(lat):.1f} ms")
    print(BOOTSTRAP_NOTE)
    print(f"nodes_peak={result['peak']} tick_p50_s={pct(every, 0.5):.2f} "
          f"tick_p99_s={pct(every, 0.99):.2f} tick_p50_launching_s={pct(busy, 0.5):.2f} "
          f"tick_p99_launching_s={pct(busy, 0.99):.2f} ready_s={result['ready_s']:.1f} "
          f"drain_s={result['drain_s']:.1f} launch_apply_s_max="
          f"{max((e['s'] for e in launches), default=float('nan')):.1f} "
          f"rss_mb={result['rss_at_peak']:.0f} status_ms={statistics.median(lat):.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pools", type=int, default=4)
    parser.add_argument("--sizes", help="nodes per pool, comma-separated (e.g. issue 36's two "
                        "pools of 250 among 20): instead of --nodes split evenly over --pools")
    parser.add_argument("--tick", default="2s", help="the service's tick interval")
    parser.add_argument("--scrape-interval", default="15s",
                        help="Prometheus' scrape interval; above 1s the service reads the "
                        "recording rules, as the docs advise for hundreds of nodes (1s: raw "
                        "series, as the sandbox's demo)")
    parser.add_argument("--hold", type=float, default=30.0, help="seconds at peak")
    parser.add_argument("--cloud-list-interval", default="0s",
                        help="executor.cloud_list_interval: the reconciler's full listing; "
                        "moto renders ~20 ms of CPU per instance listed")
    parser.add_argument("--kube-timeout", default="5s",
                        help="signals.kubernetes.timeout, the drainer's too (the project's "
                        "API server lists 1,000 nodes in more than 5 s on a loaded machine)")
    parser.add_argument("--aws-read-timeout", default="10s",
                        help="clouds.aws.read_timeout (a 1,000-instance listing from moto "
                        "takes ~20 s on 2 cores)")
    parser.add_argument("--keep", type=float, default=0.1,
                        help="share of each pool's nodes whose pods keep running in the drain")
    parser.add_argument("--timeout", type=float, default=1200.0, help="per phase, seconds")
    parser.add_argument("--keep-dir", action="store_true", help="keep the state directory")
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # the service process
    parser.add_argument("--events", help=argparse.SUPPRESS)
    parser.add_argument("--kube", help=argparse.SUPPRESS)
    parser.add_argument("--exporter", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args)
        return 0
    if shutil.which("terraform") is None:
        print("needs the terraform binary")
        print("nodes_peak=nan tick_p99_s=nan ready_s=nan drain_s=nan rss_mb=nan status_ms=nan")
        return 1
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

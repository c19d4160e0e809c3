"""Kubernetes demand read cost per tick: informer caches vs listing every tick.

The project's fake API server (``autoscaler/sandbox/fakes/kube.py``) holds 2,000 GPU
nodes and 20,000 GPU pods, 500 of them pending and Unschedulable. Four teams' pools:
plain ``nvidia.com/gpu`` V100 nodes, a tainted A100 training pool, a MIG pool
(``nvidia.com/mig-3g.40gb``, two per A100 80GB) and a time-sliced T4 pool
(``nvidia.com/gpu.shared``, 4 replicas). The pending pods are a mix the reader must
match (tolerating the taint, MIG slices, shared replicas, a GPU-model affinity, a volume
in the pool's zone) and pods no pool can run (untolerated taint, a MIG profile the pool
does not make, a volume in another zone, a nodeSelector no node has, too many GPUs).

The server runs in its own process (its threads would otherwise share the reader's
interpreter lock). The reader lists once and then watches; the benchmark runs
``--ticks`` reads, and before each the server changes ``--churn`` pods (one starts on a
node, one finishes), so every tick has watch events to apply. Requests are counted on
the server's side; a tick's API calls are those made while it ran (watch streams stay
open across ticks). For comparison, the old way, one node list and one pod
list per tick, is timed over the same cluster.

    python benchmarks/bench_kube.py [--nodes 2000] [--pods 20000] [--pending 500]

Last line: tick_read_ms=<a> api_calls_per_tick=<b> demand_pods_matched=<c>
unserved_reported=<d>
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import statistics
import time
from functools import partial
from multiprocessing.connection import Connection
from typing import Any

from kubernetes import client

from autoscaler.catalog import default_catalog
from autoscaler.policy.models import TeamPolicy
from autoscaler.sandbox.fakes.kube import FakeKube
from autoscaler.schedulers.kubernetes.client import KubernetesConfig
from autoscaler.signals.kubernetes import NOT_DONE, KubernetesReader
from autoscaler.signals.readings import pools_in_priority_order

ZONE = "topology.kubernetes.io/zone"
TOLERATE = [{"key": "dedicated", "operator": "Equal", "value": "train", "effect": "NoSchedule"}]


def pool(name: str, types: list[str], zones: list[str], **kw: Any) -> dict[str, Any]:
    return {"name": name, "cloud": "aws", "region": "us-east-1", "instance_types": types,
            "zones": zones, "max_nodes": 1000, "cluster": {"kind": "kubernetes", **kw.pop("cluster", {})},
            **kw}


POLICIES = {t.team: t for t in (
    TeamPolicy.model_validate({"team": "vision", "pools": [
        pool("v100", ["p3.8xlarge", "p3.16xlarge"], ["us-east-1a"])]}),
    TeamPolicy.model_validate({"team": "llm", "pools": [
        pool("train", ["p4d.24xlarge"], ["us-east-1b"],
             cluster={"taints": ["dedicated=train:NoSchedule"]}),
        pool("mig", ["p4de.24xlarge"], ["us-east-1b"],
             bootstrap={"sharing": "mig", "mig_profiles": ["3g.40gb", "3g.40gb"]})]}),
    TeamPolicy.model_validate({"team": "search", "pools": [
        pool("t4", ["g4dn.12xlarge"], ["us-east-1c"],
             bootstrap={"sharing": "time-slicing", "time_slicing_replicas": 4})]}),
    TeamPolicy.model_validate({"team": "audio", "pools": [
        pool("a10", ["g5.xlarge"], ["us-east-1a"])]}),
)}
# (team, pool, zone, advertised resources, per-pod request) of the nodes, round robin.
NODE_KINDS = [
    ("vision", "v100", "us-east-1a", {"nvidia.com/gpu": 4}, {"nvidia.com/gpu": 1}),
    ("llm", "train", "us-east-1b", {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 1}),
    ("llm", "mig", "us-east-1b", {"nvidia.com/mig-3g.40gb": 16}, {"nvidia.com/mig-3g.40gb": 1}),
    ("search", "t4", "us-east-1c", {"nvidia.com/gpu.shared": 16}, {"nvidia.com/gpu.shared": 1}),
    ("audio", "a10", "us-east-1a", {"nvidia.com/gpu": 1}, {"nvidia.com/gpu": 1}),
]


def pending_pods(kube: FakeKube, count: int) -> int:
    """Adds ``count`` pending pods, every fifth one unservable; returns the unservable count."""
    kube.add_pv("vol-a", "us-east-1a")
    kube.add_pv("vol-c", "us-east-1c")
    kube.add_pvc("data-a", "vision", "vol-a")
    kube.add_pvc("data-c", "vision", "vol-c")
    served = [
        dict(namespace="vision", gpus=2, claims=["data-a"]),
        dict(namespace="llm", gpus=8, tolerations=TOLERATE),
        dict(namespace="llm", resources={"nvidia.com/mig-3g.40gb": 1}),
        dict(namespace="search", resources={"nvidia.com/gpu.shared": 2}),
        dict(namespace="vision", gpus=1, affinity={"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
                "matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                      "values": ["Tesla-V100-SXM2-16GB"]}]}]}}}),
    ]
    unserved = [
        dict(namespace="llm", gpus=8),  # the training pool's taint is not tolerated
        dict(namespace="llm", resources={"nvidia.com/mig-1g.10gb": 1}),  # profile not made
        dict(namespace="vision", gpus=1, claims=["data-c"]),  # volume in another zone
        dict(namespace="audio", gpus=1, node_selector={"disk": "nvme"}),  # no such label
        dict(namespace="audio", gpus=4),  # g5.xlarge has one GPU
    ]
    bad = 0
    for i in range(count):
        if i % 5 == 4:
            kw, bad = unserved[(i // 5) % len(unserved)], bad + 1
        else:
            kw = served[(i - i // 5) % len(served)]
        kube.add_pod(f"wait-{i}", priority_class="urgent" if i % 7 == 0 else None, **kw)
    return bad


def build(kube: FakeKube, nodes: int, pods: int, pending: int) -> int:
    kube.add_priority_class("urgent", 1000)
    for i in range(nodes):
        team, pool_name, zone, res, _ = NODE_KINDS[i % len(NODE_KINDS)]
        kube.add_node(f"{team}-{pool_name}-{i}", resources=res, labels={
            "gpu-autoscaler/team": team, "gpu-autoscaler/pool": pool_name, ZONE: zone},
            taints=["dedicated=train:NoSchedule"] if pool_name == "train" else None)
    running = pods - pending
    for i in range(running):
        n = i % nodes
        team, pool_name, _, _, request = NODE_KINDS[n % len(NODE_KINDS)]
        kube.add_pod(f"run-{i}", team, node=f"{team}-{pool_name}-{n}", resources=request,
                     tolerations=TOLERATE if pool_name == "train" else None)
    return pending_pods(kube, pending)


def serve(conn: Connection, nodes: int, pods: int, pending: int) -> None:
    """The API server's process (so its threads do not share the reader's interpreter):
    builds the cluster, then answers the bench's commands until told to stop."""
    with FakeKube() as kube:
        bad = build(kube, nodes, pods, pending)
        conn.send((kube.url, len(kube.pods), bad))
        churned = 0
        while True:
            cmd, arg = conn.recv()
            if cmd == "stop":
                return
            if cmd == "churn":  # a pod starts on a node, another finishes
                for _ in range(arg):
                    churned += 1
                    kube.add_pod(f"run-churn-{churned}", "vision", gpus=1,
                                 node=f"vision-v100-{(churned * 5) % nodes}")
                    kube.finish_pod(f"vision/run-churn-{churned}")
            conn.send(len(kube.requests))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--pods", type=int, default=20000)
    ap.add_argument("--pending", type=int, default=500)
    ap.add_argument("--ticks", type=int, default=15)
    ap.add_argument("--churn", type=int, default=20, help="pods changed between ticks")
    args = ap.parse_args()
    refs = pools_in_priority_order(POLICIES, default_catalog(), "kubernetes")
    logging.disable(logging.WARNING)  # one line per unserved pod otherwise
    ours, theirs = multiprocessing.Pipe()
    server = multiprocessing.get_context("fork").Process(
        target=serve, args=(theirs, args.nodes, args.pods, args.pending), daemon=True)
    t0 = time.monotonic()
    server.start()
    try:
        url, count, bad = ours.recv()
        print(f"cluster: {args.nodes} nodes, {count} pods ({args.pending} pending, "
              f"{bad} of them unservable), built in {time.monotonic() - t0:.1f}s")
        reader = KubernetesReader(KubernetesConfig(host=url, timeout="60s"))
        try:
            t0 = time.monotonic()
            first = reader.read(refs)
            print(f"first read (lists + watches started): {(time.monotonic() - t0) * 1000:.0f} ms")
            times, calls = [], []
            for _ in range(args.ticks):
                ours.send(("churn", args.churn))
                ours.recv()
                time.sleep(0.3)  # let the watch deliver the churn
                ours.send(("count", 0))
                before = ours.recv()
                t0 = time.perf_counter()
                reading = reader.read(refs)
                times.append((time.perf_counter() - t0) * 1000)
                ours.send(("count", 0))
                calls.append(ours.recv() - before)
        finally:
            reader.close()
        api = client.CoreV1Api(client.ApiClient(client.Configuration(host=url)))
        old = []
        for _ in range(3):
            t0 = time.perf_counter()
            for call in (api.list_node, partial(api.list_pod_for_all_namespaces, field_selector=NOT_DONE)):
                json.loads(call(_preload_content=False).data)
            old.append((time.perf_counter() - t0) * 1000)
    finally:
        ours.send(("stop", 0))
        server.join(timeout=30)
    assert first.error is None and reading.error is None, (first.error, reading.error)
    matched = sum(len(v) for v in reading.pending.values())
    unserved = len(reading.unserved)
    tick_ms = statistics.median(times)
    by_constraint: dict[str, int] = {}
    for job in reading.unserved:
        kind = job.constraint.split(":")[0].split(" (")[0]
        by_constraint[kind] = by_constraint.get(kind, 0) + 1
    print(f"pending per pool: { {k: len(v) for k, v in reading.pending.items()} }")
    print(f"unserved by constraint: {by_constraint}")
    print(f"watch reconnects during the ticks: {sum(calls)} requests over {args.ticks} ticks")
    print(f"tick read (watch caches): median {tick_ms:.1f} ms, max {max(times):.1f} ms")
    print(f"two lists per tick (the old reader's calls, JSON only, not even made into objects): "
          f"median {statistics.median(old):.0f} ms -> {statistics.median(old) / tick_ms:.1f}x the tick")
    print(f"tick_read_ms={tick_ms:.1f} api_calls_per_tick={statistics.mean(calls):g} "
          f"demand_pods_matched={matched} unserved_reported={unserved}")


if __name__ == "__main__":
    main()

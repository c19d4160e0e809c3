"""SignalReader: sources combined into what the Snapshot observes, each failing on its own."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from autoscaler.catalog import default_catalog
from autoscaler.engine import Drain, Hold, Replace, decide
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.snapshot import GpuMetrics, NodeObservation, PendingJob, SchedulerNode
from autoscaler.model.snapshot_parts import assemble
from autoscaler.policy.models import Pool
from autoscaler.signals.config import SignalsConfig
from autoscaler.signals.prometheus import MetricsReading
from autoscaler.signals.reader import SignalReader, by_name_prefix
from autoscaler.signals.readings import ClusterPool, SchedulerReading, key_by_name_prefix
from tests.builders import NOW, fleet, make_node, make_policy


def pool(name: str, kind: str, types: list[str] | None = None, **kw: Any) -> dict[str, Any]:
    return {"name": name, "cloud": "aws", "region": "us-east-1",
            "instance_types": types or ["p3.2xlarge"], "max_nodes": 6,
            "capacity": {"on_demand_base": 0, "spot_percent": 0},
            "cluster": {"kind": kind, "partition": "gpu"}, **kw}


POLICIES = {
    "vision": make_policy("vision", priority="high", pools=[pool("train", "slurm")]),
    "search": make_policy("search", pools=[pool("infer", "kubernetes", ["g4dn.xlarge"]),
                                           pool("batch", "none", ["g4dn.xlarge"])]),
}
IDLE = GpuMetrics(util_mean=1, util_max=2, util_max_idle_window=2, gpus_reporting=1,
                  sample_age_s=3)


class FakeMetrics:
    def __init__(self, reading: MetricsReading | Exception):
        self.reading = reading
        self.calls: list[tuple[list[str], list[str]]] = []

    def read(self, node_pools: Mapping[str, Pool], pools: Iterable[Pool], now: datetime,
             pool_of: Callable[[str], Pool | None] | None = None) -> MetricsReading:
        self.calls.append((sorted(node_pools), sorted(p.name for p in pools)))
        if isinstance(self.reading, Exception):
            raise self.reading
        return self.reading

    def close(self) -> None:
        pass


class FakeScheduler:
    def __init__(self, reading: SchedulerReading | Exception):
        self.reading = reading
        self.refs: list[list[str]] = []

    def read(self, refs: list[ClusterPool]) -> SchedulerReading:
        self.refs.append([r.key for r in refs])
        if isinstance(self.reading, Exception):
            raise self.reading
        return self.reading


def metrics_ok() -> MetricsReading:
    return MetricsReading({"vision-train-1": NodeObservation(metrics=IDLE),
                           "search-infer-1": NodeObservation(metrics=IDLE)}, queries=2)


def slurm_ok() -> SchedulerReading:
    return SchedulerReading(
        nodes={"vision-train-1": SchedulerNode(state="idle", gpus_total=1)},
        pending={"vision/train": [PendingJob(id="7", gpus=1)]}, source="squeue/sinfo --json")


def kube_ok() -> SchedulerReading:
    return SchedulerReading(
        nodes={"search-infer-1": SchedulerNode(state="idle", gpus_total=1)},
        pending={"search/infer": [PendingJob(id="ns/p", gpus=1, reason="Unschedulable")]},
        unattributed=[PendingJob(id="x/y", gpus=1)], source="kubernetes api")


CONFIG = SignalsConfig.model_validate({
    "prometheus": {"url": "http://127.0.0.1:9"}, "scheduler": ["slurm", "kubernetes"],
    "kubernetes": {"host": "http://127.0.0.1:9"}})

NODES = [
    make_node("vision-train-1", "vision", "train", ready_for=None),
    make_node("search-infer-1", "search", "infer", instance_type="g4dn.xlarge"),
    make_node("gone-1", "vision", "train", state=NodeState.TERMINATED),
    make_node("orphan-1", "nobody", "x"),
]


def reader(metrics: Any = None, slurm: Any = None, kube: Any = None,
           config: SignalsConfig = CONFIG) -> SignalReader:
    return SignalReader(config, default_catalog(),
                        prometheus=FakeMetrics(metrics or metrics_ok()),
                        slurm=FakeScheduler(slurm or slurm_ok()),
                        kubernetes=FakeScheduler(kube or kube_ok()))


def test_everything_read() -> None:
    r = reader()
    result = r.read_all(POLICIES, NODES, NOW)
    snap = result.observed
    assert snap.missing == [] and snap.taken_at == NOW
    assert sorted(snap.pools) == ["search/batch", "search/infer", "vision/train"]
    assert [j.id for j in snap.pools["vision/train"].pending] == ["7"]
    assert [j.id for j in snap.pools["search/infer"].pending] == ["ns/p"]
    node = snap.nodes["vision-train-1"]
    assert node.metrics == IDLE and node.scheduler is not None and node.scheduler.state == "idle"
    # Terminated nodes and nodes of unknown pools are not asked for.
    assert r.prometheus.calls == [(["search-infer-1", "vision-train-1"],  # type: ignore[union-attr]
                                   ["batch", "infer", "train"])]
    assert r.slurm.refs == [["vision/train"]]  # type: ignore[attr-defined]
    assert [j.id for j in result.unattributed["kubernetes"]] == ["x/y"]
    assert result.sources["slurm"] == "ok: 1 nodes via squeue/sinfo --json"


def test_prometheus_down_freezes_scale_down_everywhere_but_keeps_demand() -> None:
    down = MetricsReading({}, error="prometheus unreachable at http://127.0.0.1:9", queries=1)
    snap = reader(metrics=down).read(POLICIES, NODES, NOW)
    assert snap.missing == ["prometheus"]
    assert {k: p.metrics_missing for k, p in snap.pools.items()} == {
        k: "prometheus unreachable at http://127.0.0.1:9" for k in snap.pools}
    node = snap.nodes["vision-train-1"]
    assert node.metrics is None and node.metrics_missing == "prometheus unreachable at http://127.0.0.1:9"
    assert node.scheduler is not None  # Slurm still read
    assert [j.id for j in snap.pools["vision/train"].pending] == ["7"]
    idle_fleet = fleet(make_node("search-infer-1", "search", "infer", instance_type="g4dn.xlarge"),
                       make_node("search-infer-2", "search", "infer", instance_type="g4dn.xlarge"))
    plan = decide(POLICIES, idle_fleet, assemble(snap), NOW, catalog=default_catalog())
    assert not [a for a in plan.actions if isinstance(a, Drain)]
    assert any(isinstance(a, Hold) and "Prometheus could not be read" in a.reason
               for a in plan.actions)


def test_slurm_down_only_affects_slurm_pools() -> None:
    snap = reader(slurm=SchedulerReading(error="slurm: squeue --json timed out after 10s")).read(
        POLICIES, NODES, NOW)
    assert snap.missing == ["slurm"]
    assert snap.pools["vision/train"].scheduler_missing == "slurm: squeue --json timed out after 10s"
    assert snap.pools["vision/train"].pending == []
    assert snap.pools["search/infer"].scheduler_missing is None
    assert [j.id for j in snap.pools["search/infer"].pending] == ["ns/p"]
    assert snap.nodes["vision-train-1"].metrics == IDLE


def test_unconfigured_scheduler_is_missing_for_its_pools() -> None:
    cfg = SignalsConfig.model_validate({"prometheus": {"url": "http://127.0.0.1:9"},
                                        "scheduler": "slurm"})
    r = SignalReader(cfg, default_catalog(), prometheus=FakeMetrics(metrics_ok()),
                     slurm=FakeScheduler(slurm_ok()))
    snap = r.read(POLICIES, NODES, NOW)
    assert snap.missing == ["kubernetes"]
    assert snap.pools["search/infer"].scheduler_missing == (
        "kubernetes is not configured (signals.scheduler)")
    assert snap.pools["search/batch"].scheduler_missing is None  # cluster kind none


def test_no_prometheus_configured() -> None:
    r = SignalReader(SignalsConfig(), default_catalog(), slurm=FakeScheduler(slurm_ok()))
    snap = r.read({"search": POLICIES["search"]}, [], NOW)
    assert "prometheus" in snap.missing
    assert snap.pools["search/batch"].metrics_missing == (
        "prometheus is not configured (signals.prometheus)")


def test_a_crashing_source_does_not_blind_the_others() -> None:
    snap = reader(kube=RuntimeError("bug")).read(POLICIES, NODES, NOW)
    assert snap.missing == ["kubernetes"]
    assert snap.pools["search/infer"].scheduler_missing == "kubernetes reader failed: RuntimeError"
    assert snap.pools["vision/train"].scheduler_missing is None
    snap = reader(metrics=ValueError("bug")).read(POLICIES, NODES, NOW)
    assert snap.missing == ["prometheus"]


def test_scheduler_only_nodes_are_reported_with_why_metrics_are_absent() -> None:
    extra = SchedulerReading(nodes={"stranger": SchedulerNode(state="idle")})
    snap = reader(slurm=extra).read(POLICIES, [], NOW)
    assert snap.nodes["stranger"].metrics_missing == (
        "not in the fleet and its name matches no <team>-<pool>- prefix")


def test_a_ready_node_its_scheduler_does_not_list_is_unusable_from_the_first_tick_seen() -> None:
    """Deleted from Kubernetes, forgotten by slurmctld: the grace counts from the first tick
    that found it missing, kept across ticks; a failed read or a node listed again resets it."""
    r = reader(slurm=SchedulerReading(nodes={}, source="sinfo"))
    ready = make_node("vision-train-1", "vision", "train")
    first = r.read(POLICIES, [ready], NOW).nodes["vision-train-1"].scheduler
    assert first is not None and (first.ready, first.unusable, first.unusable_since) == (
        False, "slurm does not list it", NOW)
    later = NOW + timedelta(minutes=11)
    snap = r.read(POLICIES, [ready], later)
    assert snap.nodes["vision-train-1"].scheduler.unusable_since == NOW  # type: ignore[union-attr]
    plan = decide(POLICIES, fleet(ready), assemble(snap), later, catalog=default_catalog())
    [replace] = [a for a in plan.actions if isinstance(a, Replace)]
    assert "the scheduler says slurm does not list it for 11m > unready_grace 10m" in replace.reason
    # Not READY (still joining, or leaving): not the scheduler's to list yet or any more.
    joining = dataclasses.replace(ready, state=NodeState.BOOTSTRAPPING)
    seen = r.read(POLICIES, [joining], later).nodes.get("vision-train-1")
    assert seen is None or seen.scheduler is None
    # Slurm unreadable is no evidence: nothing is said and the count starts again.
    r.slurm.reading = SchedulerReading(error="slurm: timed out")  # type: ignore[attr-defined]
    assert r.read(POLICIES, [ready], later).nodes["vision-train-1"].scheduler is None
    r.slurm.reading = SchedulerReading(nodes={}, source="sinfo")  # type: ignore[attr-defined]
    again = r.read(POLICIES, [ready], later).nodes["vision-train-1"].scheduler
    assert again is not None and again.unusable_since == later


def test_unattributed_pending_jobs_get_the_same_submit_times_as_a_pools() -> None:
    """No pool buys for them, but what the reader hands on (``gpu-autoscaler signals``) holds
    no 1970, no naive time: not given or not believed counts from the tick first seen."""
    naive = datetime(2026, 11, 30, 11, 0)
    kube = SchedulerReading(nodes={}, source="kubernetes api", unattributed=[
        PendingJob(id="a", gpus=1), PendingJob(id="b", gpus=1, submitted_at=datetime(1970, 1, 1, tzinfo=UTC)),
        PendingJob(id="c", gpus=1, submitted_at=naive)])
    r = reader(kube=kube)
    for now in (NOW, NOW + timedelta(hours=2)):
        jobs = r.read_all(POLICIES, NODES, now).unattributed["kubernetes"]
        assert [(j.id, j.submitted_at) for j in jobs] == [
            ("a", NOW), ("b", NOW), ("c", naive.replace(tzinfo=UTC))]


def test_name_prefix_attribution_prefers_the_longest_prefix() -> None:
    pools = {"a/b-c": POLICIES["vision"].pools[0], "a-b/c": POLICIES["search"].pools[0],
             "a/b": POLICIES["search"].pools[1]}
    key_of = key_by_name_prefix(pools)
    assert key_of("a-b-c-1") in ("a/b-c", "a-b/c")
    assert key_of("a-b-7") == "a/b"
    assert key_of("zzz-1") is None
    assert by_name_prefix(pools)("a-b-7") is pools["a/b"]


def test_snapshot_is_json_round_trippable() -> None:
    snap = assemble(reader().read(POLICIES, NODES, datetime(2026, 11, 30, 12, tzinfo=UTC)))
    assert type(snap).model_validate_json(snap.model_dump_json()) == snap

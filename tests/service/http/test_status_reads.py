"""/status reads the store a fixed number of times, whatever the size of the fleet: the
regression guard for a read per node (benchmarks/bench_surfaces.py measures the cost)."""

from __future__ import annotations

from datetime import timedelta

from autoscaler.catalog import default_catalog
from autoscaler.fleet.store import FleetStore
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.plan import Plan
from autoscaler.service.http.status import LoopState, build_status
from autoscaler.service.http.ui import status_page
from tests.builders import NOW
from tests.fleet.statements import counted
from tests.fleet.writes import create_node, walk

S = NodeState


def test_status_and_the_page_take_as_many_queries_for_20_nodes_as_for_2(tmp_path):
    store = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}")
    sent, sizes = {}, {}
    try:
        for size in (2, 20):
            for i in range(size - len(store.nodes(include_terminated=True))):
                name = create_node(store, now=NOW).name
                walk(store, name, NOW + timedelta(minutes=i), S.PROVISIONING, S.BOOTSTRAPPING,
                     S.READY, *((S.DRAINING,) if i % 3 == 0 else ()))
            store.record_plan(Plan(decided_at=NOW))
            with counted(store) as statements:
                status = build_status(store, LoopState(started_at=NOW, interval_s=30,
                                                       dry_run=False), {}, [], default_catalog(),
                                      None, NOW)
                status_page(status)
            sent[size], sizes[size] = len(statements), len(status["fleet"]["nodes"])
    finally:
        store.close()
    assert sizes == {2: 2, 20: 20}
    assert sent[2] == sent[20]


def test_stopped_warm_nodes_are_priced_at_their_volume_in_status_and_on_the_page():
    from autoscaler.catalog.volumes import stopped_hourly_usd
    from autoscaler.model.progress import NodeProgress, WarmProgress
    from autoscaler.service.http.status import fleet_json
    from tests.builders import make_node

    warm = NodeProgress(warm=WarmProgress(image="h1"))
    nodes = [make_node("vision-gpu-1", instance_type="g4dn.xlarge"),
             make_node("vision-gpu-2", instance_type="g4dn.xlarge", state=NodeState.WARM,
                       progress=warm),
             make_node("vision-gpu-3", instance_type="g4dn.xlarge", state=NodeState.WARM,
                       progress=warm)]
    fleet = fleet_json(nodes, default_catalog(), None, NOW)
    pool = fleet["pools"]["vision/gpu"]
    assert pool["states"] == {"READY": 1, "WARM": 2}
    each = round(stopped_hourly_usd(), 4)  # rounded per node, as every row is
    assert pool["warm_hourly_usd"] == 2 * each == fleet["warm_hourly_usd"]
    assert pool["hourly_usd"] == round(0.526 + 2 * each, 4)
    assert [n["hourly_usd"] for n in fleet["nodes"]] == [0.526, round(stopped_hourly_usd(), 4),
                                                         round(stopped_hourly_usd(), 4)]
    page = status_page({"fleet": fleet}).body.decode()
    assert "0.55 (warm, stopped: 0.022)" in page

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

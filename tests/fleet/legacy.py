"""A store as commit c53b69e left it: the tables its ``create_all`` made (the baseline's frozen
copy, not today's models), no schema version, and rows written the way that version wrote
them (naive UTC times, JSON documents); every row of every table, read back raw; and the
checks that the SQLite and the PostgreSQL tests run on it."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, insert, select

from autoscaler.fleet import schema, store_schema
from autoscaler.fleet.migrations import baseline
from autoscaler.fleet.schema import SchemaError, Status
from autoscaler.fleet.store import FleetStore
from autoscaler.fleet.tables import Base
from autoscaler.model.lifecycle import NodeState
from tests.fleet.writes import create_node

AT = datetime(2026, 3, 2, 12, 0)  # naive: c53b69e's UTCDateTime stored UTC without a zone
NODES = ("vision-gpu-1", "vision-gpu-2", "vision-gpu-3")


def _node(name: str, state: str, minutes: int, **meta: Any) -> dict[str, Any]:
    return {"name": name, "team": "vision", "pool": "gpu", "cloud": "aws", "region": "us-east-1",
            "zone": "us-east-1a", "instance_type": "p3.2xlarge", "market": "spot", "state": state,
            "state_since": AT + timedelta(minutes=minutes), "created_at": AT,
            "ready_at": AT + timedelta(minutes=5) if state != "PROVISIONING" else None,
            "instance_id": f"i-{minutes:08x}", "address": f"10.0.0.{minutes}",
            "reason": "scale-up: 3 pending jobs", "drain_trigger": None,
            "replacement_requested": False, "attempts": 0, "meta": meta}


ROWS: dict[str, list[dict[str, Any]]] = {
    "nodes": [
        _node(NODES[0], "READY", 5, trigger="scale-up", cluster="slurm", action=1, index=0),
        {**_node(NODES[1], "DRAINING", 40, replaces=NODES[0], provision_failures=1),
         "drain_trigger": "idle", "replacement_requested": True},
        _node(NODES[2], "TERMINATED", 90, failure="PROVISION_FAILED: quota"),
    ],
    "transitions": [
        {"node": name, "from_state": before, "to_state": after, "at": AT + timedelta(minutes=i),
         "reason": f"step {i}"}
        for i, (name, before, after) in enumerate([
            (NODES[0], None, "REQUESTED"), (NODES[0], "REQUESTED", "PROVISIONING"),
            (NODES[1], "READY", "DRAINING"), (NODES[2], "TERMINATING", "TERMINATED")])
    ],
    "plans": [{"decided_at": AT, "dry_run": False,
               "body": {"decided_at": "2026-03-02T12:00:00Z", "actions": []}}],
    "actions": [
        {"plan_id": 1, "kind": "scale_up", "pool": "vision/gpu", "node": None,
         "reason": "3 pending jobs", "body": {"kind": "scale_up", "count": 1},
         "status": "submitted", "detail": "", "updated_at": AT},
        {"plan_id": 1, "kind": "drain", "pool": "vision/gpu", "node": NODES[1],
         "reason": "idle 30m", "body": {"kind": "drain", "node": NODES[1]},
         "status": "failed", "detail": "scheduler unreachable", "updated_at": AT + timedelta(seconds=7)},
    ],
    "audit": [{"at": AT, "actor": "autoscaler", "event": "drain", "pool": "vision/gpu",
               "node": NODES[1], "detail": "idle 30m"}],
    "pool_history": [{"pool": "vision/gpu", "last_scale_up_at": AT,
                      "last_scale_down_at": AT + timedelta(minutes=40), "next_seq": 4},
                     {"pool": "nlp/a100", "last_scale_up_at": None, "last_scale_down_at": None,
                      "next_seq": 1}],
    "demand_history": [{"pool": "vision/gpu", "bin_start": AT + timedelta(minutes=5 * i),
                        "requested_gpus": 4.0 + i, "in_use_gpus": 3.5 if i else None,
                        "nodes_serving": 2, "forecast_gpus": None, "source": "service"}
                       for i in range(3)],
    "operations": [{"kind": "apply", "keys": ["vision/gpu"], "what": "terraform apply",
                    "started_at": AT, "finished_at": AT + timedelta(minutes=2), "outcome": "done",
                    "detail": ""}],
    "leases": [{"name": "leader", "holder": "host-a:41", "expires_at": AT + timedelta(seconds=30),
                "epoch": 3}],
    "requests": [{"id": "req-0001", "team": "vision", "name": "train-llm",
                  "idempotency_key": "k-1", "spec": {"gpus": 8, "pool": "gpu"},
                  "condition": "Provisioned", "reason": "", "created_at": AT, "updated_at": AT,
                  "provisioned_at": AT + timedelta(minutes=9), "claimed_at": None,
                  "nodes": {NODES[0]: "ready"}, "preview": None}],
}


def create(url: str) -> None:
    """The c53b69e store at ``url``, filled with :data:`ROWS`."""
    engine = create_engine(url)
    try:
        frozen = baseline.metadata()
        with engine.begin() as conn:
            frozen.create_all(conn)
            for name, rows in ROWS.items():
                conn.execute(insert(frozen.tables[name]), rows)
    finally:
        engine.dispose()


def rows(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the baseline (its columns only), in primary-key order."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return {name: [tuple(r) for r in conn.execute(
                        select(table).order_by(*table.primary_key.columns))]
                    for name, table in baseline.metadata().tables.items()}
    finally:
        engine.dispose()


def upgrade_keeps_every_row(url: str) -> None:
    """The c53b69e store at ``url`` is refused as it is, upgraded, then holds every row and
    reads them through the store: the nodes with their progress, the actions, the history."""
    create(url)
    before = rows(url)
    assert {name: len(found) for name, found in before.items()} == {n: len(r) for n, r in ROWS.items()}
    with pytest.raises(SchemaError, match=r"no schema version .* run `gpu-autoscaler store upgrade"):
        FleetStore(url)
    was, now = store_schema.upgrade(url)
    assert (was.status, was.revision) == (Status.UNVERSIONED, None)
    assert (now.status, now.revision) == (Status.CURRENT, schema.head())
    assert rows(url) == before
    store = FleetStore(url)
    try:
        nodes = {n.name: n for n in store.nodes(include_terminated=True)}
        assert list(nodes) == list(NODES)
        first, second, third = (nodes[name] for name in NODES)
        assert first.state is NodeState.READY and first.ready_at == (AT + timedelta(minutes=5)).replace(tzinfo=UTC)
        assert (first.launched_for, first.progress.cluster, first.progress.action) == ("scale-up", "slurm", 1)
        assert second.replaces == NODES[0] and second.replacement_requested and second.drain_trigger == "idle"
        assert second.progress.provision_failures == 1
        assert third.progress.failure == "PROVISION_FAILED: quota"
        assert [(a.kind, a.node, a.status, a.detail) for a in store.actions()] == [
            ("scale_up", None, "submitted", ""), ("drain", NODES[1], "failed", "scheduler unreachable")]
        history = store.fleet_view().history
        assert history["vision/gpu"].last_scale_down_at == (AT + timedelta(minutes=40)).replace(tzinfo=UTC)
        assert history["nlp/a100"].last_scale_up_at is None
        assert [t.to_state for t in store.transitions()] == ["REQUESTED", "PROVISIONING", "DRAINING", "TERMINATED"]
        assert [a.event for a in store.audit_log()] == ["drain"]
        # The store goes on writing where the old version stopped.
        create_node(store, now=AT.replace(tzinfo=UTC) + timedelta(hours=1))
        assert store.get("vision-gpu-4") is not None
    finally:
        store.close()


def head_matches_models(url: str) -> None:
    """Every migration run on an empty database gives exactly today's tables (fleet/tables.py):
    a column added to the models without a revision fails here."""
    was, now = store_schema.upgrade(url)
    assert (was.status, now.status) == (Status.EMPTY, Status.CURRENT)
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    finally:
        engine.dispose()


def open_at_once(url: str, count: int) -> None:
    """``count`` services opening one empty store at the same moment: none fails or hangs."""
    start, errors = threading.Barrier(count, timeout=30), []

    def open_store() -> None:
        try:
            start.wait()
            FleetStore(url).close()
        except Exception as exc:  # reported below with the thread's error
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert errors == [], errors

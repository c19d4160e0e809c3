"""Merging into a node's ``meta`` is atomic in the store itself (no process-wide lock):
writers of different keys of one node never lose each other's updates, whether they are
threads of one process or separate store instances (separate connections), on SQLite."""

from __future__ import annotations

import threading
from pathlib import Path

from autoscaler.fleet.store import FleetStore, merge
from autoscaler.model.lifecycle import NodeState
from autoscaler.policy.models import Market
from tests.builders import NOW

ROUNDS = 40


def _node(store: FleetStore) -> str:
    return store.create_node(team="vision", pool="gpu", cloud="aws", region="us-east-1",
                             zone=None, instance_type="p3.2xlarge", market=Market.ON_DEMAND,
                             now=NOW, reason="test", meta={"cluster": "slurm"}).name


def test_merge_replaces_keys_and_none_removes_one() -> None:
    assert merge({"a": 1, "b": {"x": 1}}, {"b": {"y": 2}, "a": None, "c": 3}) == {
        "b": {"y": 2}, "c": 3}


def test_concurrent_merges_of_different_keys_lose_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    stores = [FleetStore(url), FleetStore(url)]  # two connections pools, as two processes
    name = _node(stores[0])
    errors: list[BaseException] = []

    def writer(store: FleetStore, key: str) -> None:
        try:
            for i in range(ROUNDS):
                current = store.meta(name).get(key, -1)
                assert current == i - 1, (key, current, i)  # nobody else writes this key
                store.update(name, meta_updates={key: i})
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(store, key))
               for store, key in ((stores[0], "drain"), (stores[1], "bootstrap"),
                                  (stores[0], "long_jobs"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    meta = stores[1].meta(name)
    assert meta == {"cluster": "slurm", "drain": ROUNDS - 1, "bootstrap": ROUNDS - 1,
                    "long_jobs": ROUNDS - 1}
    for store in stores:
        store.close()


def test_a_transition_carries_its_meta_merge(tmp_path: Path) -> None:
    store = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}")
    name = _node(store)
    store.update(name, meta_updates={"bootstrap": {"attempts": 1}})
    store.transition(name, NodeState.PROVISIONING, NOW, "apply",
                     meta_updates={"provision_failures": 1, "bootstrap": None})
    assert store.meta(name) == {"cluster": "slurm", "provision_failures": 1}
    store.close()

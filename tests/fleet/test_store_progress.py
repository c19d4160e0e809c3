"""Writing a node's progress is atomic in the store itself (no process-wide lock): writers
of different fields of one node never lose each other's updates, whether they are threads
of one process or separate store instances (separate connections), on SQLite; a batch of
changes is applied all or none."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pytest

from autoscaler.fleet.store import FleetStore, UnknownNodeError
from autoscaler.fleet.tables import NodeRow
from autoscaler.model.changes import Move, Patch
from autoscaler.model.lifecycle import IllegalTransitionError, NodeState
from autoscaler.model.progress import (
    BootstrapProgress,
    DrainProgress,
    LongJob,
    NodeProgress,
    ProgressUpdate,
)
from tests.builders import NOW
from tests.fleet.writes import create_node, patch, transition

ROUNDS = 40
S = NodeState


def _node(store: FleetStore) -> str:
    return create_node(store, now=NOW, progress=NodeProgress(cluster="slurm")).name


def _drain(i: int) -> DrainProgress:
    return DrainProgress(reason=f"round {i}", started_at=NOW, deadline=NOW, grace=timedelta(0))


def test_concurrent_writes_of_different_fields_lose_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    stores = [FleetStore(url), FleetStore(url)]  # two connections pools, as two processes
    name = _node(stores[0])
    errors: list[BaseException] = []
    fields = {
        "drain": (lambda i: ProgressUpdate(drain=_drain(i)),
                  lambda p: int(p.drain.reason.split()[-1]) if p.drain else -1),
        "bootstrap": (lambda i: ProgressUpdate(bootstrap=BootstrapProgress(attempts=i + 1)),
                      lambda p: p.bootstrap.attempts - 1),
        "long_jobs": (lambda i: ProgressUpdate(long_jobs={str(i): LongJob(reported_at=NOW)}),
                      lambda p: int(next(iter(p.long_jobs), "-1"))),
    }

    def writer(store: FleetStore, field: str) -> None:
        update, read = fields[field]
        try:
            for i in range(ROUNDS):
                current = read(store.get(name).progress)  # type: ignore[union-attr]
                assert current == i - 1, (field, current, i)  # nobody else writes this field
                patch(store, name, NOW, progress=update(i))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(store, field))
               for store, field in ((stores[0], "drain"), (stores[1], "bootstrap"),
                                    (stores[0], "long_jobs"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    progress = stores[1].get(name).progress  # type: ignore[union-attr]
    assert progress.cluster == "slurm" and progress.drain == _drain(ROUNDS - 1)
    assert progress.bootstrap.attempts == ROUNDS and list(progress.long_jobs) == [str(ROUNDS - 1)]
    for store in stores:
        store.close()


def test_a_transition_carries_its_progress_and_none_clears_a_field(tmp_path: Path) -> None:
    store = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}")
    name = _node(store)
    patch(store, name, NOW, progress=ProgressUpdate(bootstrap=BootstrapProgress(attempts=1)))
    transition(store, name, S.PROVISIONING, NOW, "apply",
               progress=ProgressUpdate(provision_failures=1, bootstrap=None))
    assert store.meta(name) == {"cluster": "slurm", "provision_failures": 1}
    store.close()


def test_a_progress_function_reads_the_progress_inside_the_write(tmp_path: Path) -> None:
    """The notice loop joins a drain the executor may be writing at the same moment."""
    store = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}")
    name = _node(store)
    patch(store, name, NOW, progress=ProgressUpdate(provision_failures=2))
    seen: list[NodeProgress] = []

    def bump(current: NodeProgress) -> ProgressUpdate:
        seen.append(current)
        return ProgressUpdate(provision_failures=current.provision_failures + 1)

    patch(store, name, NOW, progress=bump)
    assert seen[0].provision_failures == 2 and store.get(name).progress.provision_failures == 3  # type: ignore[union-attr]
    store.close()


def test_a_batch_is_applied_all_or_none(tmp_path: Path) -> None:
    store = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}")
    a, b = _node(store), _node(store)
    before = (store.nodes(), [(t.node, t.to_state) for t in store.transitions()])
    with pytest.raises(IllegalTransitionError):
        store.apply([Move(a, S.PROVISIONING, "ok alone"), Move(b, S.READY, "illegal")], NOW)
    with pytest.raises(UnknownNodeError):
        store.apply([Patch(a, progress=ProgressUpdate(adopted="i-1")), Patch("nope")], NOW)
    assert (store.nodes(), [(t.node, t.to_state) for t in store.transitions()]) == before
    moved = store.apply([Move(a, S.PROVISIONING, "apply"), Move(b, S.PROVISIONING, "apply")], NOW)
    assert [n.state for n in moved] == [S.PROVISIONING, S.PROVISIONING]
    store.close()


def test_progress_written_by_another_version_keeps_its_unknown_keys(tmp_path: Path) -> None:
    store = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}")
    name = _node(store)
    with store.session() as s:  # as a newer version would have written it
        row = s.get(NodeRow, name)
        row.meta = {**row.meta, "from_the_future": {"x": 1}}  # type: ignore[union-attr]
    patch(store, name, NOW, progress=ProgressUpdate(provision_failures=1))
    assert store.meta(name) == {"cluster": "slurm", "provision_failures": 1,
                                "from_the_future": {"x": 1}}
    store.close()


def test_a_failure_is_remembered_after_the_node_is_cleaned_up(tmp_path: Path) -> None:
    store = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}")
    name = _node(store)
    transition(store, name, S.PROVISIONING, NOW, "apply")
    transition(store, name, S.PROVISION_FAILED, NOW, "InsufficientInstanceCapacity in us-east-1a")
    transition(store, name, S.TERMINATING, NOW, "failed nodes go")
    gone = transition(store, name, S.TERMINATED, NOW, "destroyed by terraform")
    assert gone.progress.failure == "PROVISION_FAILED: InsufficientInstanceCapacity in us-east-1a"
    store.close()

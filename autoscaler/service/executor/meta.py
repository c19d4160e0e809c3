"""The executor's bookkeeping in each node's ``meta`` (JSON), typed: :class:`NodeProgress`.

Keys: ``cluster`` (scheduler kind when the node was launched), ``action``/``index`` (the
plan action and launch slot that created it, so a resubmitted plan creates nothing
twice), ``trigger``/``fallback_from_spot`` (why it was launched: the engine reads them on
its Node), ``drain`` (:class:`DrainProgress`), ``replaces``/``replacement`` (a replacement made or
promised), ``bootstrap`` (:class:`BootstrapMeta`), ``interruption`` (the cloud's notice),
``provision_failures`` (applies that failed without naming the node), ``long_jobs``
(:class:`LongJob` per job past ``max_job_runtime``: reported once, signalled once).

Reads load the record with its node (:func:`tracked`, :func:`tracked_one`: one query, not
one per node). Writes name typed fields (:func:`changes` refuses any other key) and are
merged by the store in one transaction with the row locked, alone (:func:`save`) or with
the node's transition (``Step.move(..., meta_updates=...)``): the tick, the operation
workers and the spot-notice loop write different keys of one node without a lock of
their own and without losing each other's.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from autoscaler.actuators.drain import DrainProgress
from autoscaler.fleet.store import FleetStore
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node


class BootstrapMeta(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    attempts: int = 0
    started_at: datetime | None = None
    ok_at: datetime | None = None
    next_at: datetime | None = None
    last_error: str | None = None


class InterruptionMeta(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    kind: str
    at: datetime
    deadline: datetime | None = None
    source: str = ""


class LongJob(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    reported_at: datetime
    signal: bool = False  # the policy asks for a checkpoint signal
    signalled_at: datetime | None = None
    outcome: str | None = None  # what the signal attempt came to


class NodeProgress(BaseModel):
    """Everything the executor keeps about one node, typed: the node's ``meta`` column,
    loaded with it (:func:`tracked`) and written in the same transaction as its
    transitions. Unknown keys (an older version's) are ignored on read."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    cluster: str | None = None  # scheduler kind when the node was launched
    action: int | None = None  # the plan action and launch slot that created it
    index: int | None = None
    # its pool's policy fingerprint then (service/backoff.py); fleet/queries.py reads the
    # key by this name, so the backoff needs no import of the executor
    policy: str | None = None
    replaces: str | None = None  # the node it stands in for
    trigger: str | None = None  # its launch's trigger (the engine sees it as Node.launched_for)
    fallback_from_spot: bool = False  # on-demand as a spot fallback (Node.fallback_from_spot)
    replacement: dict[str, Any] | None = None  # a replacement promised for it (launch spec)
    drain: DrainProgress | None = None
    bootstrap: BootstrapMeta = BootstrapMeta()
    interruption: InterruptionMeta | None = None
    provision_failures: int = 0  # applies that failed without naming the node
    long_jobs: dict[str, LongJob] = {}
    adopted: str | None = None  # the instance id the reconciler adopted it from
    request: str | None = None  # the capacity request it was launched for (request_keeper)


def progress_of(meta: dict[str, Any]) -> NodeProgress:
    return NodeProgress.model_validate(meta)


LONG_JOBS_KEPT = 100  # per node; a node rarely runs that many jobs past the limit


def changes(**fields: Any) -> dict[str, Any]:
    """Typed updates for the store's merge: each key a :class:`NodeProgress` field, each
    value validated as that field and dumped to JSON; None removes the key."""
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if key not in NodeProgress.model_fields:
            raise KeyError(f"{key!r} is not a field of the node progress record")
        if value is None:
            out[key] = None
            continue
        if key == "long_jobs":
            value = dict(sorted(value.items(), key=lambda kv: kv[1].reported_at)[-LONG_JOBS_KEPT:])
        out[key] = NodeProgress.model_validate({key: value}).model_dump(
            mode="json", include={key})[key]
    return out


def save(store: FleetStore, name: str, **fields: Any) -> None:
    """Merge typed ``fields`` into the node's record (one transaction, row locked)."""
    store.update(name, meta_updates=changes(**fields))


def tracked(store: FleetStore, states: Iterable[NodeState] | None = None,
            pool: str | None = None, include_terminated: bool = False
            ) -> list[tuple[Node, NodeProgress]]:
    """Nodes with their progress record, in one query."""
    return [(n, progress_of(m)) for n, m in store.nodes_with_meta(states, pool, include_terminated)]


def tracked_one(store: FleetStore, name: str) -> tuple[Node, NodeProgress] | None:
    found = store.get_with_meta(name)
    return (found[0], progress_of(found[1])) if found is not None else None

"""The executor's bookkeeping in each node's ``meta`` (JSON): typed (:class:`NodeProgress`),
small, merged on write under one lock.

Keys: ``cluster`` (scheduler kind when the node was launched), ``action``/``index`` (the
plan action and launch slot that created it, so a resubmitted plan creates nothing
twice), ``trigger``/``fallback_from_spot`` (why it was launched: the engine reads them on
its Node), ``drain`` (:class:`DrainProgress`), ``replaces``/``replacement`` (a replacement made or
promised), ``bootstrap`` (:class:`BootstrapMeta`), ``interruption`` (the cloud's notice),
``provision_failures`` (applies that failed without naming the node), ``long_jobs``
(:class:`LongJob` per job past ``max_job_runtime``: reported once, signalled once).
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from autoscaler.actuators.drain import DrainProgress
from autoscaler.fleet.store import FleetStore


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
    loaded with it (``FleetStore.nodes_with_meta``) and written in the same transaction as
    its transitions. Unknown keys (an older version's) are ignored on read."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    cluster: str | None = None  # scheduler kind when the node was launched
    action: int | None = None  # the plan action and launch slot that created it
    index: int | None = None
    policy: str | None = None  # its pool's policy fingerprint then (service/backoff.py)
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


def progress_of(meta: dict[str, Any]) -> NodeProgress:
    return NodeProgress.model_validate(meta)


# The tick, the operation workers and the spot-notice loop all write meta: every
# read-merge-write of one (and the transition that carries it) holds this lock, so no
# writer loses another's key (a drain step's progress vs. a notice's interruption).
META_LOCK = threading.RLock()
LONG_JOBS_KEPT = 100  # per node; a node rarely runs that many jobs past the limit


def dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json")


def drain_of(meta: dict[str, Any]) -> DrainProgress | None:
    raw = meta.get("drain")
    return DrainProgress.model_validate(raw) if raw else None


def bootstrap_of(meta: dict[str, Any]) -> BootstrapMeta:
    return BootstrapMeta.model_validate(meta.get("bootstrap") or {})


def long_jobs_of(meta: dict[str, Any]) -> dict[str, LongJob]:
    return {job: LongJob.model_validate(raw) for job, raw in (meta.get("long_jobs") or {}).items()}


def dump_long_jobs(jobs: dict[str, LongJob]) -> dict[str, Any]:
    newest = sorted(jobs.items(), key=lambda kv: kv[1].reported_at)[-LONG_JOBS_KEPT:]
    return {job: dump(entry) for job, entry in newest}


def merged(store: FleetStore, name: str, **updates: Any) -> dict[str, Any]:
    """The node's meta with ``updates`` applied (None removes a key)."""
    meta = store.meta(name)
    for key, value in updates.items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = dump(value) if isinstance(value, BaseModel) else value
    return meta


def update_meta(store: FleetStore, name: str, **updates: Any) -> dict[str, Any]:
    with META_LOCK:
        meta = merged(store, name, **updates)
        store.update(name, meta=meta)
        return meta

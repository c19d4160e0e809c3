"""How a typed change (``model/changes.py``) becomes ``nodes`` rows, and a row a Node:
the column values the store writes, the runs it writes together, and the names it hands out.
The store (fleet/store.py) owns the transactions; this module only reads and builds rows."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from autoscaler.fleet.tables import NodeRow, PoolHistoryRow
from autoscaler.model.changes import Create, Move, NodeChange, Patch, ProgressChange
from autoscaler.model.lifecycle import FAILED, INITIAL, NodeState
from autoscaler.model.node import Node
from autoscaler.model.progress import NodeProgress
from autoscaler.policy.models import Market

# Names bound in one ``IN (...)`` (SQLite before 3.32 allowed 999 parameters a statement).
NAMES_PER_QUERY = 500
# Keys of the JSON column that are the Node's own facts, not its progress (replaces,
# launched_for and fallback_from_spot: written once, when the node is created).
NODE_FACTS = ("replaces", "trigger", "fallback_from_spot")
_EMPTY = NodeProgress().model_dump(mode="json")


def progress_of(meta: dict[str, Any] | None) -> NodeProgress:
    return NodeProgress.model_validate(meta or {})


def meta_column(previous: dict[str, Any] | None, progress: NodeProgress) -> dict[str, Any]:
    """The JSON column for ``progress``: the node's facts and keys this version does not
    know (a newer one's) are kept; fields still at their default are left out."""
    out = {k: v for k, v in (previous or {}).items() if k not in NodeProgress.model_fields}
    out.update({k: v for k, v in progress.model_dump(mode="json").items() if v != _EMPTY[k]})
    return out


def to_node(row: NodeRow) -> Node:
    meta = row.meta or {}
    return Node(
        name=row.name, team=row.team, pool=row.pool, cloud=row.cloud, region=row.region,
        zone=row.zone, instance_type=row.instance_type, market=Market(row.market),
        state=NodeState(row.state), state_since=row.state_since, created_at=row.created_at,
        ready_at=row.ready_at, instance_id=row.instance_id, address=row.address,
        reason=row.reason or "", drain_trigger=row.drain_trigger,
        replacement_requested=bool(row.replacement_requested),
        replaces=meta.get("replaces"), launched_for=meta.get("trigger"),
        fallback_from_spot=bool(meta.get("fallback_from_spot", False)),
        progress=progress_of(meta),
    )


def lock_rows(s: Session, names: set[str]) -> dict[str, NodeRow]:
    """The rows of ``names`` locked FOR UPDATE in one query per :data:`NAMES_PER_QUERY`
    (in name order: two writers never deadlock on them); a name not stored is left out."""
    wanted = sorted(names)
    out: dict[str, NodeRow] = {}
    for part in range(0, len(wanted), NAMES_PER_QUERY):
        q = (select(NodeRow).where(NodeRow.name.in_(wanted[part:part + NAMES_PER_QUERY]))
             .order_by(NodeRow.name).with_for_update())
        out.update((row.name, row) for row in s.scalars(q))
    return out


def runs(changes: Sequence[NodeChange]) -> Iterator[list[NodeChange]]:
    """``changes`` in order, as runs written together: consecutive creates; consecutive
    moves of distinct nodes (a node moved twice starts a new run); any other change alone."""
    run: list[NodeChange] = []
    for change in changes:
        joins = run and type(change) is type(run[0]) and (
            isinstance(change, Create) or (isinstance(change, Move) and change.node not in {
                m.node for m in run if isinstance(m, Move)}))
        if run and not joins:
            yield run
            run = []
        run.append(change)
        if not isinstance(change, Create | Move):
            yield run
            run = []
    if run:
        yield run


def row_values(change: Move | Patch, row: NodeRow) -> dict[str, Any]:
    """The columns ``change`` writes besides the state: its fields and, when its progress
    changes (or it fails the node, remembered like ready_at for READY), ``meta``."""
    values: dict[str, Any] = change.fields.given()
    failed = isinstance(change, Move) and change.to in FAILED
    if change.progress is not None or failed:
        progress = progress_of(row.meta)
        if change.progress is not None:
            progress = updated(progress, change.progress)
        if isinstance(change, Move) and failed:
            progress = progress.model_copy(update={"failure": f"{change.to}: {change.reason}"})
        values["meta"] = meta_column(row.meta, progress)
    return values


def new_row(change: Create, name: str, now: datetime) -> dict[str, Any]:
    """The ``nodes`` row of a new REQUESTED node, as column values."""
    launch = change.launch
    facts = {"replaces": change.replaces, "trigger": launch.trigger,
             "fallback_from_spot": launch.fallback_from_spot or None}
    return {
        "name": name, "team": change.team, "pool": change.pool, "cloud": change.cloud,
        "region": change.region, "zone": launch.zone, "instance_type": launch.instance_type,
        "market": launch.market.value, "state": INITIAL.value, "state_since": now,
        "created_at": now, "ready_at": None, "instance_id": None, "address": None,
        "reason": launch.reason, "drain_trigger": None,
        "meta": meta_column({k: v for k, v in facts.items() if v is not None}, change.progress),
        "replacement_requested": False, "attempts": 0,
    }


def free_names(s: Session, team: str, pool: str, hist: PoolHistoryRow, count: int,
                taken: set[str]) -> list[str]:
    """The next ``count`` names ``<team>-<pool>-<n>`` from the pool's counter (locked by
    the caller), which moves past them. "<team>-<pool>-<n>" can read the same for two
    pools (a-b/c and a/b-c): a name already held, or ``taken`` by this write, is skipped,
    so a name is never handed out twice (rows are kept)."""
    out: list[str] = []
    seq = hist.next_seq
    while len(out) < count:
        want = [f"{team}-{pool}-{seq + i}"
                for i in range(min(count - len(out), NAMES_PER_QUERY))]
        held = taken | set(s.scalars(select(NodeRow.name).where(NodeRow.name.in_(want))))
        out += [name for name in want if name not in held]
        seq += len(want)
    hist.next_seq = seq
    return out


def updated(progress: NodeProgress, change: ProgressChange) -> NodeProgress:
    update = change if not callable(change) else change(progress)
    return update.applied_to(progress)

"""Typed reads of the fleet store for the service: each function answers one question and
returns frozen records, never ORM rows, so no module above ``fleet/`` writes SQL or knows
a table (``autoscaler/layers.toml``: only ``fleet/`` imports sqlalchemy and fleet.tables).

=============================  ==========================================================
function                       answers
=============================  ==========================================================
``next_seq_by_pool``           the number each pool's next node name will carry
``last_transition_id``         the newest transition's id (0: none yet)
``transitions_after``          the transitions recorded after an id, oldest first
``recent_transitions``         the newest ``limit`` transitions, oldest first
``entries``                    when some nodes moved into a state before a transition
``latest_plan``                the newest plan recorded, with its id and dry-run flag
``plan_by_id``                 one recorded plan, with its dry-run flag (None: not kept)
``launch_outcomes``            nodes that reached READY or failed to launch since a time
``recent_boots``               launch request and READY times of a pool's newest nodes
=============================  ==========================================================
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import func, select

from autoscaler.fleet.store import NAMES_PER_QUERY, FleetStore
from autoscaler.fleet.tables import NodeRow, PlanRow, PoolHistoryRow, TransitionRow
from autoscaler.model.lifecycle import LAUNCH_OUTCOMES, NodeState
from autoscaler.model.plan import Plan
from autoscaler.model.progress import NodeProgress
from autoscaler.policy.models import Market


@dataclass(frozen=True)
class Transition:
    """One recorded state change of a node (``from_state`` None: the node's first row)."""

    id: int
    node: str
    from_state: NodeState | None
    to_state: NodeState
    at: datetime
    reason: str


@dataclass(frozen=True)
class RecordedPlan:
    id: int
    dry_run: bool
    plan: Plan


@dataclass(frozen=True)
class LaunchOutcome:
    """A node reaching READY or a failed state (``LAUNCH_OUTCOMES``), with where it was
    launched and the policy fingerprint its launch recorded (None: none recorded)."""

    at: datetime
    state: NodeState
    reason: str
    team: str
    pool: str
    cloud: str
    region: str
    instance_type: str
    zone: str | None
    market: Market
    policy: str | None


@dataclass(frozen=True)
class Boot:
    """A node's launch request and the moment it first became READY."""

    created_at: datetime
    ready_at: datetime

    @property
    def seconds(self) -> float:
        return (self.ready_at - self.created_at).total_seconds()


def _transition(row: TransitionRow) -> Transition:
    return Transition(id=row.id, node=row.node,
                      from_state=NodeState(row.from_state) if row.from_state is not None else None,
                      to_state=NodeState(row.to_state), at=row.at, reason=row.reason or "")


def next_seq_by_pool(store: FleetStore) -> dict[str, int]:
    """Pool key -> the number its next node name gets (pools never launched are absent)."""
    with store.session() as s:
        return {r.pool: r.next_seq for r in s.scalars(select(PoolHistoryRow))}


def last_transition_id(store: FleetStore) -> int:
    with store.session() as s:
        return int(s.scalar(select(func.max(TransitionRow.id))) or 0)


def transitions_after(store: FleetStore, after_id: int) -> list[Transition]:
    with store.session() as s:
        rows = s.scalars(select(TransitionRow).where(TransitionRow.id > after_id)
                         .order_by(TransitionRow.id))
        return [_transition(r) for r in rows]


def recent_transitions(store: FleetStore, limit: int) -> list[Transition]:
    with store.session() as s:
        rows = list(s.scalars(select(TransitionRow).order_by(TransitionRow.id.desc()).limit(limit)))
    return [_transition(r) for r in reversed(rows)]


def entries(store: FleetStore, nodes: Iterable[str], state: NodeState,
            before_id: int) -> dict[str, list[tuple[int, datetime]]]:
    """Node -> its moves into ``state`` older than ``before_id``, as (transition id, time) in
    id order, for many nodes in one query (one per ``NAMES_PER_QUERY`` nodes): a tick's
    transitions are matched with their nodes' earlier moves without a query per node."""
    wanted = sorted(set(nodes))
    out: dict[str, list[tuple[int, datetime]]] = {}
    with store.session() as s:
        for part in range(0, len(wanted), NAMES_PER_QUERY):
            rows = s.execute(select(TransitionRow.node, TransitionRow.id, TransitionRow.at).where(
                TransitionRow.node.in_(wanted[part:part + NAMES_PER_QUERY]),
                TransitionRow.to_state == state.value, TransitionRow.id < before_id)
                .order_by(TransitionRow.id))
            for node, row_id, at in rows:
                out.setdefault(node, []).append((row_id, at))
    return out


def latest_plan(store: FleetStore) -> RecordedPlan | None:
    with store.session() as s:
        row = s.scalars(select(PlanRow).order_by(PlanRow.id.desc()).limit(1)).first()
        if row is None:
            return None
        plan_id, dry_run, body = row.id, row.dry_run, row.body
    return RecordedPlan(id=plan_id, dry_run=dry_run, plan=Plan.model_validate(body))


def plan_by_id(store: FleetStore, plan_id: int) -> RecordedPlan | None:
    with store.session() as s:
        row = s.get(PlanRow, plan_id)
        if row is None:
            return None
        dry_run, body = row.dry_run, row.body
    return RecordedPlan(id=plan_id, dry_run=dry_run, plan=Plan.model_validate(body))


def launch_outcomes(store: FleetStore, since: datetime) -> list[LaunchOutcome]:
    """Every move into a ``LAUNCH_OUTCOMES`` state at or after ``since``, in the order
    they were written (by id): after a backward step of the wall clock, a move written
    later is stamped earlier, and sorting by time would put a READY before the failures it
    follows."""
    with store.session() as s:
        rows = s.execute(
            select(TransitionRow.to_state, TransitionRow.at, TransitionRow.reason, NodeRow)
            .join(NodeRow, NodeRow.name == TransitionRow.node)
            .where(TransitionRow.to_state.in_([st.value for st in LAUNCH_OUTCOMES]),
                   TransitionRow.at >= since)
            .order_by(TransitionRow.id)).all()
        return [LaunchOutcome(at=at, state=NodeState(to), reason=reason or "", team=node.team,
                              pool=node.pool, cloud=node.cloud, region=node.region,
                              instance_type=node.instance_type, zone=node.zone,
                              market=Market(node.market), policy=_launch_policy(node.meta))
                for to, at, reason, node in rows]


def _launch_policy(meta: dict[str, Any] | None) -> str | None:
    """The policy fingerprint the node was launched under; a record another version wrote
    that does not read as progress counts as none (its outcome resets no back-off)."""
    try:
        return NodeProgress.model_validate(meta or {}).policy
    except ValidationError:
        return None


def recent_boots(store: FleetStore, pool: str, limit: int) -> list[Boot]:
    """The ``limit`` newest nodes of ``pool`` (a "team/pool" key) that became READY."""
    team, _, name = pool.partition("/")
    with store.session() as s:
        rows = s.execute(select(NodeRow.created_at, NodeRow.ready_at).where(
            NodeRow.team == team, NodeRow.pool == name, NodeRow.ready_at.is_not(None))
            .order_by(NodeRow.created_at.desc()).limit(limit)).all()
    return [Boot(created_at=created, ready_at=ready) for created, ready in rows
            if created is not None and ready is not None]

"""The fleet store: nodes, their transitions, plans, actions, audit log, leases.

A node is written one way: :meth:`FleetStore.apply` with typed changes
(``model/changes.py``: Create, Adopt, Move, Patch), in one transaction that checks every
move against the lifecycle table and commits before returning, so callers write the new
state *before* the side effect that follows it (DESIGN.md "Node lifecycle").

With a fence (:meth:`FleetStore.set_fence`, the leader's lease token) every write checks,
in its own transaction, that this instance still holds the lease with its epoch, and
:meth:`FleetStore.fence` does the same check before a side effect (see fleet/lease.py).

The schema carries a version (fleet/schema.py, Alembic): opening an empty database creates
it at the head revision; any other store must be at head already.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, exists, insert, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from autoscaler.fleet import lease, schema
from autoscaler.fleet.database import make_engine
from autoscaler.fleet.lease import Fenced, LeaseToken
from autoscaler.fleet.node_rows import (
    NAMES_PER_QUERY,
    free_names,
    lock_rows,
    meta_column,
    new_row,
    row_values,
    runs,
    to_node,
)
from autoscaler.fleet.schema import SchemaError
from autoscaler.fleet.tables import (
    ActionRow,
    AuditRow,
    LeaseRow,
    NodeRow,
    PlanRow,
    PoolHistoryRow,
    TransitionRow,
)
from autoscaler.model.changes import Adopt, Create, Move, NodeChange, Patch
from autoscaler.model.lifecycle import INITIAL, TERMINAL, NodeState, check_transition
from autoscaler.model.node import FleetView, Node, PoolHistory
from autoscaler.model.plan import Hold, Plan, subject_of
from autoscaler.policy.models import pool_key

DEFAULT_URL = "sqlite:///gpu-autoscaler.db"
# The live fleet as ``state IN (...)``: SQLite serves IN from ix_nodes_state but scans every
# row ever stored for NOT IN (TERMINAL), and terminated rows are kept (free_names).
LIVE_STATES = tuple(sorted(st.value for st in NodeState if st not in TERMINAL))
# Action statuses the executor may still act on: a plan holding one is never pruned.
OPEN_ACTIONS = ("planned", "submitting")


class StoreError(Exception):
    pass


class UnknownNodeError(StoreError):
    pass


class ConcurrentUpdateError(StoreError):
    """Another writer changed the node's state between our read and our write."""


@dataclass(frozen=True)
class RecordedAction:
    """One action of a recorded plan and how far the executor got with it."""

    id: int
    plan_id: int
    kind: str
    pool: str
    node: str | None
    reason: str
    body: dict[str, Any]  # the action as recorded (model.plan.Action's JSON)
    status: str  # planned, submitting, submitted, failed, skipped
    detail: str
    updated_at: datetime


class StoreUnavailableError(StoreError):
    """The database cannot be opened (unreachable, refused, not a database). ``driver_error``
    is the driver's own exception, whose message says why in its words."""

    def __init__(self, error: SQLAlchemyError):
        super().__init__(str(error))
        self.driver_error: BaseException = getattr(error, "orig", None) or error



def _row(s: Session, name: str, locked: dict[str, NodeRow]) -> NodeRow:
    row = locked.get(name) or s.get(NodeRow, name, with_for_update=True)
    if row is None:
        raise UnknownNodeError(f"no node named {name!r} in the store")
    return row


class FleetStore:
    def __init__(self, url: str = DEFAULT_URL,
                 fence: Callable[[], LeaseToken | None] | None = None):
        self.url = url
        self._fence = fence
        try:
            self.engine = make_engine(url)
        except SQLAlchemyError as exc:
            raise StoreUnavailableError(exc) from exc
        try:
            # An empty database is created at the schema's head; any other must be at head
            # already (SchemaError: run `gpu-autoscaler store upgrade`, or newer than known).
            schema.prepare(self.engine)
        except SQLAlchemyError as exc:
            self.engine.dispose()
            raise StoreUnavailableError(exc) from exc
        except SchemaError:
            self.engine.dispose()
            raise
        self._session = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._session.begin() as s:
            yield s

    @contextmanager
    def _write(self, *, read_first: bool = False) -> Iterator[Session]:
        """A session for a write: fenced by the lease epoch when a fence is set.

        ``read_first``: the write depends on what the session reads (a merge into a node's
        ``meta``), so the row is locked from the read on (``FOR UPDATE``; SQLite, which
        has no row locks and whose driver begins a transaction only at the first write,
        takes its write lock up front with ``BEGIN IMMEDIATE``). Two writers of one node
        (the tick, an operation worker, the spot-notice loop) then never lose each
        other's keys, in this process or another."""
        with self.session() as s:
            if read_first and self.engine.dialect.name == "sqlite":
                s.connection().exec_driver_sql("BEGIN IMMEDIATE")
            if self._fence is not None:
                lease.check(s, self._fence())
            yield s

    def set_fence(self, token: Callable[[], LeaseToken | None] | None) -> None:
        """From now on every write needs ``token()`` to be the live lease (None: no fence)."""
        self._fence = token

    def fence(self) -> None:
        """Raise :class:`Fenced` unless this instance holds the lease with its epoch.

        Call it immediately before every side effect (apply, Ansible, drain step...):
        without a fence (a single instance) it does nothing."""
        if self._fence is not None:
            with self.session() as s:
                lease.check(s, self._fence())

    def close(self) -> None:
        self.engine.dispose()

    # -- reading ------------------------------------------------------------------
    def get(self, name: str) -> Node | None:
        with self.session() as s:
            row = s.get(NodeRow, name)
            return to_node(row) if row else None

    def meta(self, name: str) -> dict[str, Any]:
        """The node's JSON column as stored (diagnostics and tests; code reads
        ``Node.progress``)."""
        with self.session() as s:
            row = s.get(NodeRow, name)
            if row is None:
                raise UnknownNodeError(name)
            return dict(row.meta or {})

    def nodes(self, states: Iterable[NodeState] | None = None, pool: str | None = None,
              include_terminated: bool = False, names: Iterable[str] | None = None, *,
              action: int | None = None, replaces: str | None = None) -> list[Node]:
        """Nodes with their progress, in one query (``names``: only these, one query per
        :data:`NAMES_PER_QUERY` of them; a name the store does not hold is left out).
        ``action``: only the nodes that launch action created; ``replaces``: only the
        nodes created to replace that node (both matched in SQL on the JSON column, so a
        pool's history is not loaded to find them)."""
        q = select(NodeRow).order_by(NodeRow.name)
        if states is not None:
            q = q.where(NodeRow.state.in_([st.value for st in states]))
        elif not include_terminated:
            q = q.where(NodeRow.state.in_(LIVE_STATES))
        if action is not None:
            q = q.where(NodeRow.meta["action"].as_integer() == action)
        if replaces is not None:
            q = q.where(NodeRow.meta["replaces"].as_string() == replaces)
        if pool is not None:
            team, _, name = pool.partition("/")
            q = q.where(NodeRow.team == team, NodeRow.pool == name)
        with self.session() as s:
            if names is None:
                return [to_node(r) for r in s.scalars(q)]
            wanted = sorted(set(names))
            found = [to_node(r) for part in range(0, len(wanted), NAMES_PER_QUERY)
                     for r in s.scalars(q.where(NodeRow.name.in_(
                         wanted[part:part + NAMES_PER_QUERY])))]
            return found  # each part is sorted, and the parts are in name order

    def fleet_view(self) -> FleetView:
        with self.session() as s:
            history = {
                r.pool: PoolHistory(last_scale_up_at=r.last_scale_up_at,
                                    last_scale_down_at=r.last_scale_down_at)
                for r in s.scalars(select(PoolHistoryRow))
            }
        return FleetView(nodes=self.nodes(), history=history)

    def transitions(self, name: str | None = None) -> list[TransitionRow]:
        with self.session() as s:
            q = select(TransitionRow).order_by(TransitionRow.id)
            if name is not None:
                q = q.where(TransitionRow.node == name)
            return list(s.scalars(q))

    # -- writing ------------------------------------------------------------------
    def apply(self, changes: Sequence[NodeChange], now: datetime) -> list[Node]:
        """Apply ``changes`` in order, in one transaction (fenced when a fence is set):
        all or none. Returns each changed node as written. Raises UnknownNodeError,
        IllegalTransitionError (a move the lifecycle table forbids) or
        ConcurrentUpdateError (the node left the state the move starts from meanwhile).

        Consecutive creates are written together: a pool's counter is locked and read
        once, the names checked in one query and the rows inserted in one statement each
        (a launch of 100 nodes is a handful of statements, not 400). Consecutive moves of
        distinct nodes too: one compare-and-set UPDATE for all of them (per set of columns
        written), their transitions in one INSERT (a drain of 100 nodes, likewise)."""
        # Progress is read-modify-written: the row is locked from the read on (FOR UPDATE;
        # SQLite, without row locks, takes its write lock up front with BEGIN IMMEDIATE), so
        # the tick, the operation workers and the notice loop never lose each other's fields.
        with self._write(read_first=any(isinstance(c, Move | Patch) for c in changes)) as s:
            locked = lock_rows(s, {c.node for c in changes if isinstance(c, Move | Patch)})
            out: list[Node] = []
            for run in runs(changes):  # a run is of one kind: the filters keep all of it
                first = run[0]
                if isinstance(first, Create):
                    out += self._create_all(s, [c for c in run if isinstance(c, Create)], now)
                elif isinstance(first, Move):
                    out += self._move_all(s, [m for m in run if isinstance(m, Move)], now, locked)
                else:
                    out.append(self._apply_one(s, first, now, locked))
            s.flush()
            return out

    def _apply_one(self, s: Session, change: Patch | Adopt, now: datetime,
                   locked: dict[str, NodeRow]) -> Node:
        if isinstance(change, Adopt):
            return self._adopt(s, change)
        row = _row(s, change.node, locked)
        for key, value in row_values(change, row).items():
            setattr(row, key, value)
        return to_node(row)

    def _move_all(self, s: Session, moves: Sequence[Move], now: datetime,
                  locked: dict[str, NodeRow]) -> list[Node]:
        """Moves of distinct nodes, each checked against the lifecycle table and
        compare-and-set on the state it leaves, in one UPDATE per set of columns written
        (executemany), the transitions in one INSERT, and each pool whose scale-down
        cooldown restarts written once; the rows are read back in one query."""
        s.flush()  # what this write changed before (a patch) first
        rows = [_row(s, m.node, locked) for m in moves]
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        transitions: list[dict[str, Any]] = []
        cooled: set[str] = set()
        for change, row in zip(moves, rows, strict=True):
            current = NodeState(row.state)
            check_transition(change.node, current, change.to)
            values = row_values(change, row)
            values.update(state=change.to.value, state_since=now, reason=change.reason)
            if change.to is NodeState.READY and "ready_at" not in values and row.ready_at is None:
                values["ready_at"] = now
            groups.setdefault(tuple(sorted(values)), []).append(
                {"b_name": change.node, "b_from": current.value,
                 **{f"v_{k}": v for k, v in values.items()}})
            transitions.append({"node": change.node, "from_state": current.value,
                                "to_state": change.to.value, "at": now, "reason": change.reason})
            if change.to is NodeState.DRAINING and change.cooldown == "down":
                cooled.add(pool_key(row.team, row.pool))
        table = cast(Table, NodeRow.__table__)
        for columns, params in groups.items():
            stmt = (update(table).where(table.c.name == bindparam("b_name"),
                                        table.c.state == bindparam("b_from"))
                    .values({c: bindparam(f"v_{c}", type_=table.c[c].type) for c in columns}))
            if s.execute(stmt, params).rowcount != len(params):  # type: ignore[attr-defined]
                names = [p["b_name"] for p in params]
                raise ConcurrentUpdateError(
                    f"{len(params)} nodes moved, but not all from the state they were read in: "
                    f"one of {', '.join(names[:5])}{' ...' if len(names) > 5 else ''} changed "
                    "concurrently")
        s.execute(insert(TransitionRow), transitions)
        for key in sorted(cooled):
            self._history(s, key).last_scale_down_at = now
        s.flush()
        for row in rows:
            s.expire(row)
        fresh = lock_rows(s, {m.node for m in moves})  # read back (locked already)
        return [to_node(fresh[m.node]) for m in moves]

    def _create_all(self, s: Session, creates: Sequence[Create], now: datetime) -> list[Node]:
        """REQUESTED nodes with their pools' next names, in the order given: each pool's
        counter locked once (in pool order, so two writers never deadlock on them), the
        rows inserted in one statement per table."""
        if not creates:
            return []
        by_pool: dict[tuple[str, str], list[int]] = {}
        for i, change in enumerate(creates):
            by_pool.setdefault((change.team, change.pool), []).append(i)
        names: dict[int, str] = {}
        for (team, pool), indexes in sorted(by_pool.items()):
            hist = self._history(s, pool_key(team, pool), lock=True)
            fresh = free_names(s, team, pool, hist, len(indexes), set(names.values()))
            names.update(zip(indexes, fresh, strict=True))
            if any(creates[i].cooldown == "up" for i in indexes):
                hist.last_scale_up_at = now
        s.flush()  # the counters, before the rows that use them
        rows = [new_row(change, names[i], now) for i, change in enumerate(creates)]
        s.execute(insert(NodeRow), rows)
        s.execute(insert(TransitionRow), [
            {"node": row["name"], "from_state": None, "to_state": INITIAL.value, "at": now,
             "reason": row["reason"]} for row in rows])
        return [to_node(NodeRow(**row)) for row in rows]

    def _adopt(self, s: Session, change: Adopt) -> Node:
        node = change.node
        if s.get(NodeRow, node.name) is not None:
            raise StoreError(f"node {node.name} already exists")
        row = NodeRow(
            name=node.name, team=node.team, pool=node.pool, cloud=node.cloud,
            region=node.region, zone=node.zone, instance_type=node.instance_type,
            market=node.market.value, state=node.state.value, state_since=node.state_since,
            created_at=node.created_at, ready_at=node.ready_at, instance_id=node.instance_id,
            address=node.address, reason=change.reason, meta=meta_column({}, node.progress),
            attempts=0, replacement_requested=False,
        )
        s.add(row)
        s.add(TransitionRow(node=node.name, from_state=None, to_state=node.state.value,
                            at=node.state_since, reason=change.reason))
        s.flush()
        return to_node(row)

    @staticmethod
    def _history(s: Session, key: str, *, lock: bool = False) -> PoolHistoryRow:
        hist = s.get(PoolHistoryRow, key, with_for_update=lock)
        if hist is None:
            hist = PoolHistoryRow(pool=key, next_seq=1)
            s.add(hist)
        return hist

    # -- plans, actions, audit ----------------------------------------------------------
    def record_plan(self, plan: Plan, *, dry_run: bool = False) -> int:
        with self._write() as s:
            row = PlanRow(decided_at=plan.decided_at, dry_run=dry_run,
                          body=plan.model_dump(mode="json"))
            s.add(row)
            s.flush()
            actions = [{"plan_id": row.id, "kind": action.kind, "pool": action.pool,
                        "node": subject_of(action).node, "reason": action.reason,
                        "body": action.model_dump(mode="json"),
                        "status": "skipped" if dry_run else "planned",
                        "updated_at": plan.decided_at}
                       for action in plan.actions if not isinstance(action, Hold)]
            if actions:  # one statement for all of them, in order (ids ascending)
                s.execute(insert(ActionRow), actions)
            return row.id

    def prune_plans(self, before: datetime, keep_last: int, limit: int = 2000) -> int:
        """Delete the oldest plans decided before ``before`` with their actions, at most
        ``limit`` of them (one bounded transaction; a caller with more to delete calls
        again). Kept whatever their age: the newest ``keep_last`` plans (what /status,
        the page and the CLI show) and every plan with an action the executor may still
        act on (:data:`OPEN_ACTIONS`: a resubmission reads it). Returns how many went."""
        with self._write() as s:
            newest = select(PlanRow.id).order_by(PlanRow.id.desc()).offset(max(keep_last, 1) - 1)
            floor = s.scalar(newest.limit(1))
            if floor is None:
                return 0
            open_action = exists().where(ActionRow.plan_id == PlanRow.id,
                                         ActionRow.status.in_(OPEN_ACTIONS))
            ids = list(s.scalars(select(PlanRow.id).where(
                PlanRow.id < floor, PlanRow.decided_at < before, ~open_action)
                .order_by(PlanRow.id).limit(limit)))
            for part in range(0, len(ids), NAMES_PER_QUERY):
                chunk = ids[part:part + NAMES_PER_QUERY]
                s.execute(delete(ActionRow).where(ActionRow.plan_id.in_(chunk)))
                s.execute(delete(PlanRow).where(PlanRow.id.in_(chunk)))
            return len(ids)

    def last_plan(self) -> tuple[int, Plan] | None:
        with self.session() as s:
            row = s.scalars(select(PlanRow).order_by(PlanRow.id.desc()).limit(1)).first()
            if row is None:
                return None
            return row.id, Plan.model_validate(row.body)

    def actions(self, plan_id: int | None = None, status: str | None = None) -> list[RecordedAction]:
        with self.session() as s:
            q = select(ActionRow).order_by(ActionRow.id)
            if plan_id is not None:
                q = q.where(ActionRow.plan_id == plan_id)
            if status is not None:
                q = q.where(ActionRow.status == status)
            return [RecordedAction(r.id, r.plan_id, r.kind, r.pool, r.node, r.reason,
                                   dict(r.body), r.status, r.detail, r.updated_at)
                    for r in s.scalars(q)]

    def set_action_status(self, action_id: int, status: str, now: datetime, detail: str = "") -> None:
        self.set_action_statuses({action_id: (status, detail)}, now)

    def set_action_statuses(self, statuses: Mapping[int, tuple[str, str]], now: datetime) -> None:
        """Several actions' (status, detail) in one transaction and one statement."""
        if not statuses:
            return
        table = cast(Table, ActionRow.__table__)
        with self._write() as s:
            s.execute(update(table).where(table.c.id == bindparam("b_id"))
                      .values(status=bindparam("b_status"), detail=bindparam("b_detail"),
                              updated_at=now),
                      [{"b_id": action_id, "b_status": status, "b_detail": detail}
                       for action_id, (status, detail) in statuses.items()])

    def audit(self, event_name: str, detail: str, now: datetime, *, actor: str = "autoscaler",
              pool: str | None = None, node: str | None = None) -> None:
        with self._write() as s:
            s.add(AuditRow(at=now, actor=actor, event=event_name, pool=pool, node=node,
                           detail=detail))

    def prune_audit(self, before: datetime, limit: int = 2000) -> int:
        """Delete the oldest audit rows written before ``before``, at most ``limit`` of them
        (one bounded transaction; a caller with more to delete calls again). Nothing reads
        the log back but people (``audit_log``: the newest rows). Returns how many went."""
        with self._write() as s:
            ids = list(s.scalars(select(AuditRow.id).where(AuditRow.at < before)
                                 .order_by(AuditRow.at).limit(limit)))
            for part in range(0, len(ids), NAMES_PER_QUERY):
                s.execute(delete(AuditRow).where(AuditRow.id.in_(ids[part:part + NAMES_PER_QUERY])))
            return len(ids)

    def audit_log(self, limit: int = 100) -> list[AuditRow]:
        with self.session() as s:
            q = select(AuditRow).order_by(AuditRow.id.desc()).limit(limit)
            return list(reversed(list(s.scalars(q))))

    # -- leader lease (times are the database's, see fleet/lease.py) -----------------
    def try_lease(self, name: str, holder: str, ttl: timedelta) -> int | None:
        """Take or renew the lease; returns the fencing epoch, or None if another holds it."""
        try:
            with self.session() as s:
                return lease.take(s, name, holder, ttl)
        except IntegrityError:
            return None

    def release_lease(self, name: str, holder: str) -> None:
        with self.session() as s:
            lease.release(s, name, holder)

    def lease(self, name: str) -> LeaseRow | None:
        with self.session() as s:
            return s.get(LeaseRow, name)


__all__ = ["LIVE_STATES", "NAMES_PER_QUERY", "OPEN_ACTIONS", "ConcurrentUpdateError", "Fenced",
           "FleetStore", "LeaseToken", "RecordedAction", "SchemaError", "StoreError",
           "StoreUnavailableError", "UnknownNodeError"]

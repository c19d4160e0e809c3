"""The fleet store: nodes, their transitions, plans, actions, audit log, leases.

Every state change goes through :meth:`FleetStore.transition`, which checks the lifecycle
table and commits before returning, so callers write the new state *before* the side
effect that follows it (DESIGN.md "Node lifecycle").

With a fence (:meth:`FleetStore.set_fence`, the leader's lease token) every write checks,
in its own transaction, that this instance still holds the lease with its epoch, and
:meth:`FleetStore.fence` does the same check before a side effect (see fleet/lease.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import create_engine, event, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from autoscaler.fleet import lease
from autoscaler.fleet.intents import drain_cooldown
from autoscaler.fleet.lease import Fenced, LeaseToken
from autoscaler.fleet.tables import (
    ActionRow,
    AuditRow,
    Base,
    LeaseRow,
    NodeRow,
    PlanRow,
    PoolHistoryRow,
    TransitionRow,
)
from autoscaler.model.lifecycle import INITIAL, TERMINAL, NodeState, check_transition
from autoscaler.model.node import FleetView, Node, PoolHistory
from autoscaler.model.plan import Hold, Plan, subject_of
from autoscaler.policy.models import Market, pool_key

DEFAULT_URL = "sqlite:///gpu-autoscaler.db"
_NODE_FIELDS = frozenset({
    "zone", "instance_id", "address", "reason", "drain_trigger", "replacement_requested",
    "ready_at", "attempts", "meta", "instance_type", "market",
})


class StoreError(Exception):
    pass


class UnknownNodeError(StoreError):
    pass


class ConcurrentUpdateError(StoreError):
    """Another writer changed the node's state between our read and our write."""


class StoreUnavailableError(StoreError):
    """The database cannot be opened (unreachable, refused, not a database). ``driver_error``
    is the driver's own exception, whose message says why in its words."""

    def __init__(self, error: SQLAlchemyError):
        super().__init__(str(error))
        self.driver_error: BaseException = getattr(error, "orig", None) or error


# key -> new JSON value (None removes the key), or a function of the meta as read in the
# write's own transaction that returns them (a read-modify-write no other writer splits).
MetaUpdates = Mapping[str, Any] | Callable[[dict[str, Any]], Mapping[str, Any]]


def merge(meta: Mapping[str, Any] | None, updates: MetaUpdates) -> dict[str, Any]:
    """``meta`` with ``updates`` applied: top-level keys replaced, None removes one. The
    keys are the executor's (``service/executor/meta.py`` types them)."""
    out = dict(meta or {})
    if callable(updates):
        updates = updates(dict(out))
    for key, value in updates.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def _to_node(row: NodeRow) -> Node:
    # Three keys of the executor's progress record (service/executor/meta.py) are part of
    # the engine's view: what the node stands in for and why it was launched. They live in
    # ``meta``, not in columns, so an existing database needs no schema migration.
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
    )


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30})

        @event.listens_for(engine, "connect")
        def _wal(dbapi_conn: Any, _: Any) -> None:
            # WAL lets the status API read while the loop writes.
            if ":memory:" not in url:
                dbapi_conn.execute("PRAGMA journal_mode=WAL")
            dbapi_conn.execute("PRAGMA busy_timeout=30000")

        return engine
    return create_engine(url, pool_pre_ping=True)


class FleetStore:
    def __init__(self, url: str = DEFAULT_URL,
                 fence: Callable[[], LeaseToken | None] | None = None):
        self.url = url
        self._fence = fence
        try:
            self.engine = make_engine(url)
            try:
                Base.metadata.create_all(self.engine)
            except (OperationalError, ProgrammingError, IntegrityError):
                # Two processes opening a fresh database race on CREATE TABLE; the loser
                # finds the tables made by the winner on a second look.
                Base.metadata.create_all(self.engine)
        except SQLAlchemyError as exc:
            raise StoreUnavailableError(exc) from exc
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
            return _to_node(row) if row else None

    def meta(self, name: str) -> dict[str, Any]:
        with self.session() as s:
            row = s.get(NodeRow, name)
            if row is None:
                raise UnknownNodeError(name)
            return dict(row.meta or {})

    def get_with_meta(self, name: str) -> tuple[Node, dict[str, Any]] | None:
        """A node with its progress record (``meta``), in one read."""
        with self.session() as s:
            row = s.get(NodeRow, name)
            return (_to_node(row), dict(row.meta or {})) if row else None

    def nodes(self, states: Iterable[NodeState] | None = None, pool: str | None = None,
              include_terminated: bool = False) -> list[Node]:
        return [n for n, _ in self.nodes_with_meta(states, pool, include_terminated)]

    def nodes_with_meta(self, states: Iterable[NodeState] | None = None, pool: str | None = None,
                        include_terminated: bool = False) -> list[tuple[Node, dict[str, Any]]]:
        """Nodes with their progress record (the ``meta`` column) in one query, not one
        query per node."""
        with self.session() as s:
            q = select(NodeRow).order_by(NodeRow.name)
            if states is not None:
                q = q.where(NodeRow.state.in_([st.value for st in states]))
            elif not include_terminated:
                q = q.where(NodeRow.state.not_in([st.value for st in TERMINAL]))
            if pool is not None:
                team, _, name = pool.partition("/")
                q = q.where(NodeRow.team == team, NodeRow.pool == name)
            return [(_to_node(r), dict(r.meta or {})) for r in s.scalars(q)]

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
    def create_node(self, *, team: str, pool: str, cloud: str, region: str, zone: str | None,
                    instance_type: str, market: Market, now: datetime, reason: str,
                    meta: dict[str, Any] | None = None, scale_up: bool = True) -> Node:
        """A new REQUESTED node with the pool's next name; ``scale_up`` (what
        ``fleet.intents.cooldown_of`` decided for its action) restarts the pool's
        scale-up cooldown."""
        key = pool_key(team, pool)
        with self._write() as s:
            hist = s.get(PoolHistoryRow, key, with_for_update=True)
            if hist is None:
                hist = PoolHistoryRow(pool=key, next_seq=1)
                s.add(hist)
            seq = hist.next_seq
            # "<team>-<pool>-<n>" can read the same for two pools (a-b/c and a/b-c): skip
            # any name already held, so a name is never handed out twice (rows are kept).
            while s.get(NodeRow, f"{team}-{pool}-{seq}") is not None:
                seq += 1
            hist.next_seq = seq + 1
            if scale_up:
                hist.last_scale_up_at = now
            row = NodeRow(
                name=f"{team}-{pool}-{seq}", team=team, pool=pool, cloud=cloud, region=region,
                zone=zone, instance_type=instance_type, market=market.value, state=INITIAL.value,
                state_since=now, created_at=now, reason=reason, meta=meta or {},
                replacement_requested=False, attempts=0,
            )
            s.add(row)
            s.add(TransitionRow(node=row.name, from_state=None, to_state=INITIAL.value, at=now,
                                reason=reason))
            s.flush()
            return _to_node(row)

    def transition(self, name: str, to: NodeState, now: datetime, reason: str,
                   scale_down: bool | None = None, meta_updates: MetaUpdates | None = None,
                   **fields: Any) -> Node:
        """Move ``name`` to ``to`` (checked against the lifecycle table) and commit. A move
        to DRAINING restarts the pool's scale-down cooldown when ``scale_down`` says so
        (None: as ``fleet.intents`` decides for a plain drain with its ``drain_trigger``).
        ``meta_updates`` are merged into the node's ``meta`` in the same transaction
        (:func:`merge`)."""
        bad = set(fields) - _NODE_FIELDS
        if bad:
            raise StoreError(f"unknown node fields {sorted(bad)}")
        with self._write(read_first=meta_updates is not None) as s:
            row = s.get(NodeRow, name, with_for_update=meta_updates is not None)
            if row is None:
                raise UnknownNodeError(f"no node named {name!r} in the store")
            current = NodeState(row.state)
            check_transition(name, current, to)
            values: dict[str, Any] = {"state": to.value, "state_since": now, "reason": reason,
                                      **fields}
            if meta_updates is not None:
                values["meta"] = merge(row.meta, meta_updates)
            if to is NodeState.READY and "ready_at" not in fields and row.ready_at is None:
                values["ready_at"] = now
            result = s.execute(
                update(NodeRow).where(NodeRow.name == name, NodeRow.state == current.value)
                .values(**values)
            )
            if result.rowcount != 1:  # type: ignore[attr-defined]
                raise ConcurrentUpdateError(f"node {name} changed state concurrently")
            s.add(TransitionRow(node=name, from_state=current.value, to_state=to.value, at=now,
                                reason=reason))
            if scale_down is None:
                scale_down = drain_cooldown(fields.get("drain_trigger")) == "down"
            if to is NodeState.DRAINING and scale_down:
                self._touch_history(s, pool_key(row.team, row.pool), down=now)
            s.flush()
            s.expire(row)
            return _to_node(s.get(NodeRow, name))  # type: ignore[arg-type]

    def update(self, name: str, meta_updates: MetaUpdates | None = None, **fields: Any) -> Node:
        """Change non-state fields (address, instance id...); ``meta_updates`` are merged
        into the node's ``meta`` in the same transaction (:func:`merge`)."""
        bad = set(fields) - _NODE_FIELDS
        if bad:
            raise StoreError(f"unknown node fields {sorted(bad)}")
        with self._write(read_first=meta_updates is not None) as s:
            row = s.get(NodeRow, name, with_for_update=meta_updates is not None)
            if row is None:
                raise UnknownNodeError(f"no node named {name!r} in the store")
            for key, value in fields.items():
                setattr(row, key, value)
            if meta_updates is not None:
                row.meta = merge(row.meta, meta_updates)
            s.flush()
            return _to_node(row)

    def merge_meta(self, name: str, updates: MetaUpdates) -> dict[str, Any]:
        """Merge ``updates`` into the node's ``meta`` atomically; returns the new meta."""
        self.update(name, meta_updates=updates)
        return self.meta(name)

    def adopt_node(self, node: Node, reason: str, meta: dict[str, Any] | None = None) -> Node:
        """Insert a node found in the cloud but not in the store (reconciler adoption)."""
        with self._write() as s:
            if s.get(NodeRow, node.name) is not None:
                raise StoreError(f"node {node.name} already exists")
            s.add(NodeRow(
                name=node.name, team=node.team, pool=node.pool, cloud=node.cloud,
                region=node.region, zone=node.zone, instance_type=node.instance_type,
                market=node.market.value, state=node.state.value, state_since=node.state_since,
                created_at=node.created_at, ready_at=node.ready_at, instance_id=node.instance_id,
                address=node.address, reason=reason, meta=meta or {}, attempts=0,
                replacement_requested=False,
            ))
            s.add(TransitionRow(node=node.name, from_state=None, to_state=node.state.value,
                                at=node.state_since, reason=reason))
        return node

    @staticmethod
    def _touch_history(s: Session, key: str, *, down: datetime) -> None:
        hist = s.get(PoolHistoryRow, key)
        if hist is None:
            s.add(PoolHistoryRow(pool=key, next_seq=1, last_scale_down_at=down))
        else:
            hist.last_scale_down_at = down

    # -- plans, actions, audit ----------------------------------------------------------
    def record_plan(self, plan: Plan, *, dry_run: bool = False) -> int:
        with self._write() as s:
            row = PlanRow(decided_at=plan.decided_at, dry_run=dry_run,
                          body=plan.model_dump(mode="json"))
            s.add(row)
            s.flush()
            for action in plan.actions:
                if isinstance(action, Hold):
                    continue
                s.add(ActionRow(
                    plan_id=row.id, kind=action.kind, pool=action.pool,
                    node=subject_of(action).node, reason=action.reason,
                    body=action.model_dump(mode="json"),
                    status="skipped" if dry_run else "planned", updated_at=plan.decided_at,
                ))
            return row.id

    def last_plan(self) -> tuple[int, Plan] | None:
        with self.session() as s:
            row = s.scalars(select(PlanRow).order_by(PlanRow.id.desc()).limit(1)).first()
            if row is None:
                return None
            return row.id, Plan.model_validate(row.body)

    def actions(self, plan_id: int | None = None, status: str | None = None) -> list[ActionRow]:
        with self.session() as s:
            q = select(ActionRow).order_by(ActionRow.id)
            if plan_id is not None:
                q = q.where(ActionRow.plan_id == plan_id)
            if status is not None:
                q = q.where(ActionRow.status == status)
            return list(s.scalars(q))

    def set_action_status(self, action_id: int, status: str, now: datetime, detail: str = "") -> None:
        with self._write() as s:
            s.execute(update(ActionRow).where(ActionRow.id == action_id)
                      .values(status=status, detail=detail, updated_at=now))

    def audit(self, event_name: str, detail: str, now: datetime, *, actor: str = "autoscaler",
              pool: str | None = None, node: str | None = None) -> None:
        with self._write() as s:
            s.add(AuditRow(at=now, actor=actor, event=event_name, pool=pool, node=node,
                           detail=detail))

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


__all__ = ["ConcurrentUpdateError", "Fenced", "FleetStore", "LeaseToken", "StoreError",
           "StoreUnavailableError", "UnknownNodeError"]

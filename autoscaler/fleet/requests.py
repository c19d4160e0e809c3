"""Capacity requests in the fleet store: create (idempotent), read per team, move conditions.

Every write goes through ``FleetStore._write()``, so a deposed leader's write is refused
by the lease epoch like any node write; every condition change is checked against
:data:`~autoscaler.model.request_spec.NEXT` and lands in the audit log with its reason.
"""

from __future__ import annotations

import builtins  # RequestBook.list shadows list in the class body
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from autoscaler.fleet.node_rows import NAMES_PER_QUERY
from autoscaler.fleet.store import FleetStore, StoreError
from autoscaler.fleet.tables import AuditRow, NodeRow, RequestRow
from autoscaler.model.changes import Create
from autoscaler.model.lifecycle import TERMINAL, NodeState
from autoscaler.model.node import Node
from autoscaler.model.request_spec import (
    FINAL,
    Condition,
    RequestSpec,
    RequestView,
    check_next,
)


class UnknownRequestError(StoreError):
    pass


class IdempotencyConflict(StoreError):
    """The key was used before with a different request body."""


@dataclass(frozen=True)
class Created:
    request: RequestView
    created: bool  # False: an earlier create with the same idempotency key answered


def _view(row: RequestRow) -> RequestView:
    return RequestView(
        id=row.id, team=row.team, spec=RequestSpec.model_validate(row.spec),
        condition=Condition(row.condition), reason=row.reason or "",
        created_at=row.created_at, updated_at=row.updated_at,
        provisioned_at=row.provisioned_at, nodes=dict(row.nodes or {}), preview=row.preview,
        claimed_at=row.claimed_at,
    )


def _spec_body(spec: RequestSpec) -> dict[str, Any]:
    return spec.model_dump(mode="json", by_alias=True)


class RequestBook:
    """The requests of one store: ``RequestBook(store).create(team, spec, now)``."""

    def __init__(self, store: FleetStore):
        self.store = store

    # -- reading ----------------------------------------------------------------------
    def get(self, request_id: str) -> RequestView | None:
        with self.store.session() as s:
            row = s.get(RequestRow, request_id)
            return _view(row) if row else None

    def list(self, team: str | None = None, *, include_final: bool = True) -> list[RequestView]:
        with self.store.session() as s:
            q = select(RequestRow).order_by(RequestRow.created_at, RequestRow.id)
            if team is not None:
                q = q.where(RequestRow.team == team)
            if not include_final:
                q = q.where(RequestRow.condition.not_in([c.value for c in FINAL]))
            return [_view(r) for r in s.scalars(q)]

    def unsettled(self) -> builtins.list[RequestView]:
        """The requests the keeper still has work for, in creation order: every one that
        has not ended, and every ended one a node not yet TERMINATED still names.

        The rest (ended, every node TERMINATED or gone) can never have work again: both
        conditions have no exits, a request's nodes are written only while it is Accepted
        (:meth:`launch`), and each of them carries the request's id in ``meta.request``
        from its first write on (nothing clears it). So the read follows the live requests
        and the live fleet, not the history (``list()`` still shows it all)."""
        live = [c.value for c in Condition if c not in FINAL]
        tag = NodeRow.meta["request"].as_string()
        with self.store.session() as s:
            rows = {r.id: r for r in s.scalars(
                select(RequestRow).where(RequestRow.condition.in_(live)))}
            owing = sorted(set(s.scalars(select(tag).where(
                NodeRow.state.in_([st.value for st in NodeState if st not in TERMINAL]),
                tag.is_not(None)))) - rows.keys())
            for part in range(0, len(owing), NAMES_PER_QUERY):
                rows.update((r.id, r) for r in s.scalars(select(RequestRow).where(
                    RequestRow.id.in_(owing[part:part + NAMES_PER_QUERY]))))
            return [_view(r) for r in sorted(rows.values(), key=lambda r: (r.created_at, r.id))]

    def _by_key(self, team: str, key: str) -> RequestView | None:
        with self.store.session() as s:
            row = s.scalars(select(RequestRow).where(
                RequestRow.team == team, RequestRow.idempotency_key == key)).first()
            return _view(row) if row else None

    # -- writing ----------------------------------------------------------------------
    def create(self, team: str, spec: RequestSpec, now: datetime, *,
               actor: str = "api") -> Created:
        """Store a Pending request; with an idempotency key already used by this team for
        the same body, answer the first request instead of making a second one."""
        key = spec.idempotency_key
        if key is not None:
            earlier = self._existing(team, spec)
            if earlier is not None:
                return Created(earlier, created=False)
        request_id = f"req-{secrets.token_hex(6)}"
        reason = f"request {spec.name} (team {team}, {spec.request_class.value}, {spec.shape()}) received"
        try:
            with self.store._write() as s:
                s.add(RequestRow(
                    id=request_id, team=team, name=spec.name, idempotency_key=key,
                    spec=_spec_body(spec), condition=Condition.PENDING.value, reason=reason,
                    created_at=now, updated_at=now, nodes={},
                ))
                s.add(AuditRow(at=now, actor=actor, event="request_created", detail=(
                    f"{request_id}: {reason}")))
        except IntegrityError:
            # A retry raced the first create: the unique (team, key) kept one; answer it.
            earlier = self._existing(team, spec) if key is not None else None
            if earlier is None:
                raise
            return Created(earlier, created=False)
        view = self.get(request_id)
        assert view is not None
        return Created(view, created=True)

    def _existing(self, team: str, spec: RequestSpec) -> RequestView | None:
        assert spec.idempotency_key is not None
        earlier = self._by_key(team, spec.idempotency_key)
        if earlier is not None and _spec_body(earlier.spec) != _spec_body(spec):
            raise IdempotencyConflict(
                f"idempotency key {spec.idempotency_key} was used for {earlier.id} with a "
                "different body")
        return earlier

    def set_condition(self, request_id: str, to: Condition, now: datetime, reason: str, *,
                      actor: str = "autoscaler", nodes: dict[str, str | None] | None = None,
                      preview: dict[str, Any] | None = None) -> RequestView:
        """Move the request to ``to`` (checked), with the reason, and audit it."""
        with self.store._write() as s:
            row = s.get(RequestRow, request_id)
            if row is None:
                raise UnknownRequestError(f"no request {request_id}")
            current = Condition(row.condition)
            check_next(request_id, current, to)
            values: dict[str, Any] = {"condition": to.value, "reason": reason, "updated_at": now}
            if nodes is not None:
                values["nodes"] = nodes
            if preview is not None:
                values["preview"] = preview
            if to is Condition.PROVISIONED:
                values["provisioned_at"] = now
            result = s.execute(update(RequestRow).where(
                RequestRow.id == request_id, RequestRow.condition == current.value).values(**values))
            if result.rowcount != 1:  # type: ignore[attr-defined]
                raise StoreError(f"request {request_id} changed concurrently")
            s.add(AuditRow(at=now, actor=actor, event=f"request_{to.value.lower()}",
                           detail=f"{request_id}: {reason}"))
        view = self.get(request_id)
        assert view is not None
        return view

    def launch(self, request_id: str, creates: Sequence[Create], now: datetime) -> builtins.list[Node]:
        """Create the Accepted request's nodes and record them on it, in one transaction:
        a crash leaves all of them recorded or none made, never a second set nor a short
        one. Nothing is written (and [] returned) when the request is no longer Accepted
        or has its nodes already (a DELETE, or another writer, came first)."""
        with self.store._write(read_first=True) as s:
            row = s.get(RequestRow, request_id, with_for_update=True)
            if row is None or row.condition != Condition.ACCEPTED.value or row.nodes:
                return []
            made = self.store._create_all(s, creates, now)
            row.nodes = {n.name: None for n in made}
            row.updated_at = now
            s.flush()
            return made

    def set_claimed(self, request_id: str, now: datetime) -> None:
        """A job was seen on the request's nodes: its booking is used."""
        with self.store._write() as s:
            s.execute(update(RequestRow).where(RequestRow.id == request_id,
                                               RequestRow.claimed_at.is_(None))
                      .values(claimed_at=now))

    def set_preview(self, request_id: str, preview: dict[str, Any]) -> None:
        with self.store._write() as s:
            s.execute(update(RequestRow).where(RequestRow.id == request_id)
                      .values(preview=preview))


def held_nodes(requests: list[RequestView]) -> dict[str, str]:
    """node name -> request id, for every node a live request holds or waits for (an
    atomic request's first READY node waits, idle, for the others)."""
    return {node: r.id for r in requests
            if r.holds_nodes or r.condition is Condition.ACCEPTED for node in r.nodes}


__all__ = ["Created", "IdempotencyConflict", "RequestBook", "UnknownRequestError", "held_nodes"]

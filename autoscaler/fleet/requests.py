"""Capacity requests in the fleet store: create (idempotent), read per team, move conditions.

Every write goes through ``FleetStore._write()``, so a deposed leader's write is refused
by the lease epoch like any node write; every condition change is checked against
:data:`~autoscaler.model.request_spec.NEXT` and lands in the audit log with its reason.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from autoscaler.fleet.store import FleetStore, StoreError
from autoscaler.fleet.tables import AuditRow, RequestRow
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

    def set_nodes(self, request_id: str, nodes: dict[str, str | None], now: datetime) -> None:
        """Record the nodes launched for the request (name -> address, None until known)."""
        with self.store._write() as s:
            s.execute(update(RequestRow).where(RequestRow.id == request_id)
                      .values(nodes=nodes, updated_at=now))

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

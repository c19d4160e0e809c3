"""Operations as rows: every side effect handed to actuation (a pool's apply, an Ansible
batch, a drain step) is written when it starts and closed when it ends, so what was
running when the service died is known after the restart, not only inferred.

The node's own progress (its state, ``meta``) stays what the executor resumes from; this
journal says which operations a crash cut short (``running`` rows found at startup become
``interrupted``, and are audited), and how long each one took.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete, select, update

from autoscaler.fleet.store import FleetStore
from autoscaler.fleet.tables import OperationRow

RUNNING, DONE, FAILED, INTERRUPTED = "running", "done", "failed", "interrupted"
KEPT = 2000  # closed rows kept (drain steps add one per draining node and tick)


class OperationLog:
    def __init__(self, store: FleetStore):
        self.store = store

    def started(self, kind: str, keys: Sequence[str], what: str, at: datetime) -> int:
        with self.store._write() as s:  # fenced: a deposed leader starts nothing
            row = OperationRow(kind=kind, keys=list(keys), what=what, started_at=at,
                               outcome=RUNNING, detail="")
            s.add(row)
            s.flush()
            return row.id

    def finished(self, op_id: int, at: datetime, outcome: str, detail: str = "") -> None:
        # Not fenced: an operation that ran did run, whoever holds the lease now.
        with self.store.session() as s:
            s.execute(update(OperationRow).where(OperationRow.id == op_id)
                      .values(finished_at=at, outcome=outcome, detail=detail[:2000]))
            if op_id % 100 == 0:  # now and then, not on every row
                s.execute(delete(OperationRow).where(OperationRow.id <= op_id - KEPT,
                                                     OperationRow.outcome != RUNNING))

    def interrupt_running(self, at: datetime) -> list[OperationRow]:
        """Close the rows a previous process left ``running`` (only the leader calls
        this, before it starts operations of its own); returns them."""
        with self.store._write() as s:
            rows = list(s.scalars(select(OperationRow).where(OperationRow.outcome == RUNNING)
                                  .order_by(OperationRow.id)))
            for row in rows:
                row.outcome, row.finished_at = INTERRUPTED, at
                row.detail = "cut short by a restart; resumed from the store"
            return rows

    def recent(self, limit: int = 50) -> list[OperationRow]:
        with self.store.session() as s:
            q = select(OperationRow).order_by(OperationRow.id.desc()).limit(limit)
            return list(reversed(list(s.scalars(q))))
